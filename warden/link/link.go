// Package link is the runtime's end of a warden link: over one byte
// stream it checks the warden's hello (the listener must prove it holds
// the sandbox's secret before anything it says is believed), then carries
// spawns, output with its acks and windows, stdin, signals, resizes,
// changes and freezes for many processes, and resumes them on a new link
// after a reconnect. Every byte from the warden is untrusted: a protocol
// break ends the link with a *ProtocolError. The wire format is
// warden/wire; the other end is package warden.
package link

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"

	"github.com/stockade/stockade/warden/wire"
)

// Handshake says how a link begins.
type Handshake struct {
	// Secret is the warden's secret (SecretSize bytes).
	Secret []byte
	// Reattach false: the warden was just started; send Init{Secret,
	// windows}. True: a reattach; await Challenge and answer
	// Auth{MAC(Secret, nonce)}.
	Reattach bool
	// Window and StdinWindow are Init's windows (zero takes the defaults).
	// On a reattach pass the values the first link's Init carried: a
	// Hello whose Window is larger than Window is refused.
	Window, StdinWindow int
}

// retiredMax bounds how many forgotten channels a link remembers (their
// late frames are ignored, not violations).
const retiredMax = wire.MaxProcesses

// Link is the runtime's side of one warden link: one byte stream in each
// direction, many processes (channels) on it.
//
// One goroutine (started by Open) reads the warden's frames. It never
// waits for a consumer: output goes into its process's queue, which the
// window bounds (a warden that sends beyond it breaks the protocol). Every
// byte from the warden is untrusted: anything that breaks the protocol
// ends the link with a *ProtocolError, and nothing the warden sends can
// make the link panic, block or grow beyond its windows.
//
// Writes to the warden (Spawn, acks, stdin, signals) block while the warden
// does not read its input; Close (or the transport's own end) unblocks them.
//
// The warden may send frames on a process channel only after the runtime
// opened it on this link (Spawn, Resume), and Started before any other
// frame on it.
type Link struct {
	w     *wire.Writer
	c     io.Closer
	hello wire.Hello

	window      uint64 // output window per process (Hello.Window)
	stdinWindow uint64 // stdin window per process
	ackEvery    uint64 // consumed bytes that make Next acknowledge
	// chunk bounds the data one Next returns: up to ackEvery, so that a
	// consumer behind the warden takes what queued in a few calls (each
	// a write to the recording and the consumer's pipe), not one per
	// frame, and an Ack still goes out at each call.
	chunk int

	done     chan struct{}
	closeErr error // the transport's Close result
	listMu   sync.Mutex

	mu          sync.Mutex
	err         error
	procs       map[uint32]*Proc
	retired     map[uint32]struct{}
	retiredQ    []uint32 // ring of retired channels, oldest at retiredHead
	retiredHead int
	listed      map[uint32]struct{} // channels the last Table named, not opened here
	next        uint32              // next channel to try
	listSent    uint64
	listRecv    uint64
	listWait    map[uint64]chan []wire.Entry
	rekeySent   uint64
	rekeyRecv   uint64
	rekeyWait   map[uint64]chan struct{}
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

// Open runs the handshake on the stream (r: the warden's output; w: its
// input; c closes the transport, nil if nothing to close) and starts the
// link's reader goroutine. It returns once Hello arrived (with Version ==
// warden.Version, else a *VersionError and the transport closed), or when
// ctx ended or the stream failed: then the transport is closed. A ctx that
// ends after Open returned does not affect the link.
func Open(ctx context.Context, r io.Reader, w io.Writer, c io.Closer, hs Handshake) (*Link, wire.Hello, error) {
	if c == nil {
		c = nopCloser{}
	}
	window, stdinWindow := hs.Window, hs.StdinWindow
	if window == 0 {
		window = wire.DefaultWindow
	}
	if stdinWindow == 0 {
		stdinWindow = wire.DefaultStdinWindow
	}
	init := wire.Init{Secret: hex.EncodeToString(hs.Secret), Window: hs.Window, StdinWindow: hs.StdinWindow}
	// On a failed handshake the transport is closed and the handshake's
	// error returned: a close error would only hide it.
	if err := init.Validate(); err != nil {
		_ = c.Close()
		return nil, wire.Hello{}, fmt.Errorf("warden: handshake: %w", err)
	}
	if err := ctx.Err(); err != nil {
		_ = c.Close()
		return nil, wire.Hello{}, err
	}
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	rd, wr := wire.NewReader(r), wire.NewWriter(w)
	hello, err := handshake(rd, wr, hs, init)
	if !stop() {
		// ctx ended: the transport is closed (and err, if any, is
		// probably that).
		return nil, wire.Hello{}, ctx.Err()
	}
	if err == nil && hello.Window > window {
		err = wire.Violation("hello: window %d, more than the %d asked for", hello.Window, window)
	}
	if err != nil {
		_ = c.Close()
		return nil, wire.Hello{}, err
	}
	l := &Link{
		w:           wr,
		c:           c,
		hello:       hello,
		window:      uint64(hello.Window),
		stdinWindow: uint64(min(hello.StdinWindow, stdinWindow)),
		done:        make(chan struct{}),
		procs:       make(map[uint32]*Proc),
		retired:     make(map[uint32]struct{}),
		listWait:    make(map[uint64]chan []wire.Entry),
		rekeyWait:   make(map[uint64]chan struct{}),
		next:        1,
	}
	l.ackEvery = max(l.window/4, 1)
	l.chunk = max(maxChunk, int(l.ackEvery))
	go l.run(rd)
	return l, hello, nil
}

func handshake(rd *wire.Reader, wr *wire.Writer, hs Handshake, init wire.Init) (wire.Hello, error) {
	var mine []byte // the nonce the warden must answer, on a reattach
	if !hs.Reattach {
		if err := wr.WriteJSON(wire.TInit, 0, &init); err != nil {
			return wire.Hello{}, fmt.Errorf("warden: handshake: sending init: %w", err)
		}
	} else {
		f, err := readFirst(rd, wire.TChallenge)
		if err != nil {
			return wire.Hello{}, err
		}
		var ch wire.Challenge
		if err := wire.Decode(f, &ch); err != nil {
			return wire.Hello{}, err
		}
		nonce, _ := wire.DecodeHex(ch.Nonce, wire.SecretSize)
		mine = make([]byte, wire.SecretSize)
		if _, err := rand.Read(mine); err != nil {
			return wire.Hello{}, fmt.Errorf("warden: handshake: a nonce: %w", err)
		}
		auth := wire.Auth{MAC: hex.EncodeToString(wire.MAC(hs.Secret, nonce)), Nonce: hex.EncodeToString(mine)}
		if err := wr.WriteJSON(wire.TAuth, 0, &auth); err != nil {
			return wire.Hello{}, fmt.Errorf("warden: handshake: sending auth: %w", err)
		}
	}
	f, err := readFirst(rd, wire.THello)
	if err != nil {
		return wire.Hello{}, err
	}
	var v struct {
		Version string `json:"version"`
		Proof   string `json:"proof"`
	}
	parsed := json.Unmarshal(f.Payload, &v) == nil
	if mine != nil {
		// Whatever listens on the socket must first prove it holds the
		// secret: only the warden does (the bridge also checks the
		// listener's pid; this holds once the warden is gone and its pid
		// reused). Nothing else it says is believed before, its version
		// included.
		proof, _ := wire.DecodeHex(v.Proof, sha256.Size)
		if !hmac.Equal(proof, wire.Proof(hs.Secret, mine)) {
			return wire.Hello{}, wire.Violation("hello: no proof of the secret (an impostor on the warden's socket?)")
		}
	}
	// The version next: a warden of another version may well send a
	// Hello this one would not accept.
	if parsed && v.Version != wire.Version {
		return wire.Hello{}, &VersionError{Got: v.Version}
	}
	var h wire.Hello
	if err := wire.Decode(f, &h); err != nil {
		return wire.Hello{}, err
	}
	return h, nil
}

func readFirst(rd *wire.Reader, want wire.Type) (wire.Frame, error) {
	f, err := rd.Read()
	if err != nil {
		if wire.IsProtocol(err) {
			return wire.Frame{}, err
		}
		if errors.Is(err, io.EOF) {
			return wire.Frame{}, fmt.Errorf("warden: handshake: the warden's output ended awaiting %v: %w", want, err)
		}
		return wire.Frame{}, fmt.Errorf("warden: handshake: awaiting %v: %w", want, err)
	}
	if f.Type != want {
		return wire.Frame{}, wire.Violation("handshake: %v frame on channel %d, awaiting %v", f.Type, f.Channel, want)
	}
	return f, nil
}

// Hello returns the warden's Hello.
func (l *Link) Hello() wire.Hello { return l.hello }

// Done is closed when the link ends: the transport's end or error, a
// protocol violation, or Close.
func (l *Link) Done() <-chan struct{} { return l.done }

// Err says why the link ended (nil while it is up): a *ProtocolError for
// the warden's violation of the protocol, ErrLinkClosed after Close,
// otherwise the transport's error (io.EOF when the warden's output ended)
// wrapped.
func (l *Link) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Close ends the link: the transport is closed, and every blocked call
// returns ErrLinkClosed. The warden's processes are not touched (the
// warden keeps them for a reattach). It returns the transport's Close
// error the first time, nil after.
func (l *Link) Close() error {
	if l.fail(ErrLinkClosed) {
		return l.closeErr
	}
	return nil
}

// Abort ends the link because the runtime gave up on the warden (it stopped
// answering): like a broken link, not like Close, so its processes are
// taken for lost. Err wraps why.
func (l *Link) Abort(why error) {
	l.fail(fmt.Errorf("warden: link aborted: %w", why))
}

// fail ends the link with err (the first error wins) and reports whether
// this call ended it.
func (l *Link) fail(err error) bool {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return false
	}
	l.err = err
	procs := make([]*Proc, 0, len(l.procs))
	for _, p := range l.procs {
		procs = append(procs, p)
	}
	l.mu.Unlock()
	close(l.done)
	l.closeErr = l.c.Close()
	for _, p := range procs {
		p.linkEnded()
	}
	return true
}

func (l *Link) ended() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// sent handles the result of a write to the warden: a failed write ends
// the link, and the link's error is returned.
func (l *Link) sent(err error) error {
	if err == nil {
		return nil
	}
	l.fail(fmt.Errorf("warden: link: writing to the warden: %w", err))
	return l.Err()
}

func (l *Link) run(rd *wire.Reader) {
	for {
		f, err := rd.Read()
		if err == nil {
			err = l.dispatch(f)
		} else if !wire.IsProtocol(err) {
			err = fmt.Errorf("warden: link: reading from the warden: %w", err)
		}
		if err != nil {
			l.fail(err)
			return
		}
	}
}

// dispatch handles one frame from the warden. It never blocks on anything
// but short critical sections.
func (l *Link) dispatch(f wire.Frame) error {
	if f.Channel == 0 {
		switch f.Type {
		case wire.TTable:
			return l.onTable(f)
		case wire.TRekeyed:
			return l.onRekeyed()
		default:
			// every other control type: refused below
		}
		return wire.Violation("%v frame from the warden after the handshake", f.Type)
	}
	switch f.Type {
	case wire.TStarted:
		var m wire.Started
		if err := wire.Decode(f, &m); err != nil {
			return err
		}
		return l.onStarted(f.Channel, m)
	case wire.TSpawnFailed:
		var m wire.SpawnFailed
		if err := wire.Decode(f, &m); err != nil {
			return err
		}
		return l.onSpawnFailed(f.Channel, m)
	case wire.TOut, wire.TInAck, wire.TExited, wire.TReaped, wire.TChanges:
		p, err := l.started(f)
		if p == nil {
			return err
		}
		switch f.Type {
		case wire.TOut:
			return p.onOut(f.Payload[0], f.Payload[1:])
		case wire.TChanges:
			var m wire.Changes
			if err := wire.Decode(f, &m); err != nil {
				return err
			}
			return p.onChanges(m)
		case wire.TInAck:
			return p.onInAck(wire.Offset(f))
		case wire.TReaped:
			var m wire.Reaped
			if err := wire.Decode(f, &m); err != nil {
				return err
			}
			return p.onReaped(m)
		default:
			var m wire.Exited
			if err := wire.Decode(f, &m); err != nil {
				return err
			}
			return p.onExited(m)
		}
	default:
		// every other type: refused below
	}
	return wire.Violation("%v frame from the warden on channel %d", f.Type, f.Channel)
}

// started returns the started process on f's channel; nil and nil for a
// retired channel (a late frame, ignored); nil and a violation otherwise.
func (l *Link) started(f wire.Frame) (*Proc, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.procs[f.Channel]
	if p == nil {
		if _, ok := l.retired[f.Channel]; ok {
			return nil, nil
		}
		return nil, wire.Violation("%v frame on channel %d, which is not in use", f.Type, f.Channel)
	}
	if p.state != stateStarted {
		return nil, wire.Violation("%v frame on channel %d (process %s) before its started", f.Type, f.Channel, p.ID)
	}
	return p, nil
}

func (l *Link) onStarted(ch uint32, m wire.Started) error {
	l.mu.Lock()
	p := l.procs[ch]
	if p == nil {
		_, ok := l.retired[ch]
		l.mu.Unlock()
		if ok {
			return nil
		}
		return wire.Violation("started on channel %d, which is not in use", ch)
	}
	switch p.state {
	case statePending:
		p.PID, p.PGID, p.OOMKills = m.PID, m.PGID, m.OOMKills
		p.state = stateStarted
		l.mu.Unlock()
		p.spawned <- nil
		return nil
	case stateAbandoned:
		// The caller of Spawn gave up: nobody wants this process. It
		// stays on the channel, its output unread, until the warden
		// reports it reaped: only then may it be forgotten (a Forget of
		// a process the warden has not reaped is not what the protocol
		// asks for).
		p.PID, p.PGID, p.OOMKills = m.PID, m.PGID, m.OOMKills
		p.state = stateStarted
		p.closed = true
		l.mu.Unlock()
		go p.killAndForget()
		return nil
	default:
		// started already: refused below
	}
	l.mu.Unlock()
	return wire.Violation("a second started on channel %d (process %s)", ch, p.ID)
}

// killAndForget ends a process nobody wants: SIGKILL to its group, and
// Forget once the warden reports it reaped (or nothing, if the link ends
// first: the warden keeps it for a reattach's table).
func (p *Proc) killAndForget() {
	if p.Signal(syscall.SIGKILL) != nil {
		return
	}
	<-p.Reaped()
	if _, ok := p.Reap(); ok {
		// Fails only when the link ended; the warden then keeps the
		// process for a reattach's table, as when Signal fails above.
		_ = p.Forget()
	}
}

func (l *Link) onSpawnFailed(ch uint32, m wire.SpawnFailed) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.procs[ch]
	if p == nil {
		if _, ok := l.retired[ch]; ok {
			return nil
		}
		return wire.Violation("spawn_failed on channel %d, which is not in use", ch)
	}
	switch p.state {
	case statePending:
		delete(l.procs, ch)
		p.spawned <- &SpawnError{Code: m.Code, Msg: m.Error}
		return nil
	case stateAbandoned:
		delete(l.procs, ch)
		return nil
	default:
		// started: refused below
	}
	return wire.Violation("spawn_failed on channel %d (process %s), which started", ch, p.ID)
}

func (l *Link) onTable(f wire.Frame) error {
	var m wire.Table
	if err := wire.Decode(f, &m); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.listRecv == l.listSent {
		return wire.Violation("a table nobody asked for")
	}
	l.listRecv++
	l.listed = make(map[uint32]struct{}, len(m.Processes))
	for _, e := range m.Processes {
		if l.procs[e.Channel] == nil {
			l.listed[e.Channel] = struct{}{}
		}
	}
	if c, ok := l.listWait[l.listRecv]; ok {
		delete(l.listWait, l.listRecv)
		c <- m.Processes
	}
	return nil
}

// onRekeyed takes the answer to the oldest Rekey in flight (the warden
// answers in order).
func (l *Link) onRekeyed() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rekeyRecv == l.rekeySent {
		return wire.Violation("a rekeyed nobody asked for")
	}
	l.rekeyRecv++
	if c, ok := l.rekeyWait[l.rekeyRecv]; ok {
		delete(l.rekeyWait, l.rekeyRecv)
		close(c)
	}
	return nil
}

// retire remembers a forgotten channel (l.mu held): frames still in flight
// for it are ignored, and it is not reused while remembered.
func (l *Link) retire(ch uint32) {
	if len(l.retiredQ) < retiredMax {
		l.retiredQ = append(l.retiredQ, ch)
	} else {
		delete(l.retired, l.retiredQ[l.retiredHead])
		l.retiredQ[l.retiredHead] = ch
		l.retiredHead = (l.retiredHead + 1) % retiredMax
	}
	l.retired[ch] = struct{}{}
}
