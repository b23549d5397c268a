package link

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockade/stockade/warden/wire"
)

// The fakes here speak the warden's side of the protocol over io.Pipe
// pairs: fake is scripted by a test frame by frame; model is a small
// working warden (used by the concurrency test and the benchmark).

const waitFor = 5 * time.Second

var testSecret = bytes.Repeat([]byte{0x5a}, wire.SecretSize)

// hex32 is a valid hex secret or nonce.
var hex32 = strings.Repeat("ab", wire.SecretSize)

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// pipes returns the runtime's ends (r, w, c) and the warden's ends.
func pipes() (r io.Reader, w io.Writer, c io.Closer, wr *io.PipeReader, ww *io.PipeWriter) {
	toRuntimeR, toRuntimeW := io.Pipe()
	toWardenR, toWardenW := io.Pipe()
	c = closerFunc(func() error {
		_ = toRuntimeR.Close()
		_ = toWardenW.Close()
		return nil
	})
	return toRuntimeR, toWardenW, c, toWardenR, toRuntimeW
}

// fake is a scripted warden: the runtime's frames arrive on in (payloads
// copied); the test writes the warden's frames with w (or raw bytes).
type fake struct {
	t   testing.TB
	w   *wire.Writer
	raw *io.PipeWriter
	in  chan wire.Frame
}

func newFake(t testing.TB) (f *fake, r io.Reader, w io.Writer, c io.Closer) {
	r, w, c, wr, ww := pipes()
	f = &fake{t: t, w: wire.NewWriter(ww), raw: ww, in: make(chan wire.Frame, 1<<16)}
	go func() {
		defer close(f.in)
		rd := wire.NewReader(wr)
		for {
			fr, err := rd.Read()
			if err != nil {
				return
			}
			fr.Payload = bytes.Clone(fr.Payload)
			f.in <- fr
		}
	}()
	t.Cleanup(func() {
		_ = ww.Close()
		_ = wr.Close()
	})
	return f, r, w, c
}

// next returns the runtime's next frame; ok false if its stream ended.
func (f *fake) next() (wire.Frame, bool) {
	f.t.Helper()
	select {
	case fr, ok := <-f.in:
		return fr, ok
	case <-time.After(waitFor):
		f.t.Fatalf("fake warden: no frame from the runtime in %v", waitFor)
		return wire.Frame{}, false
	}
}

// expect returns the next frame that is not an Ack, checking its type and
// channel.
func (f *fake) expect(t wire.Type, ch uint32) wire.Frame {
	f.t.Helper()
	for {
		fr, ok := f.next()
		if !ok {
			f.t.Fatalf("fake warden: the runtime's stream ended awaiting %v", t)
		}
		if fr.Type == wire.TAck && t != wire.TAck {
			continue
		}
		if fr.Type != t || fr.Channel != ch {
			f.t.Fatalf("fake warden: got %v on channel %d, want %v on %d", fr.Type, fr.Channel, t, ch)
		}
		return fr
	}
}

// expectAny is expect for a frame on any of chans.
func (f *fake) expectAny(t wire.Type, chans ...uint32) wire.Frame {
	f.t.Helper()
	fr, ok := f.next()
	if !ok || fr.Type != t || !slices.Contains(chans, fr.Channel) {
		f.t.Fatalf("fake warden: got %v on channel %d, want %v on one of %v", fr.Type, fr.Channel, t, chans)
	}
	return fr
}

// quiet checks that the runtime sends nothing for d.
func (f *fake) quiet(d time.Duration) {
	f.t.Helper()
	select {
	case fr, ok := <-f.in:
		if ok {
			f.t.Fatalf("fake warden: unexpected %v on channel %d (offset %v)", fr.Type, fr.Channel, fr.Payload)
		}
	case <-time.After(d):
	}
}

// ended waits for the runtime's stream to end (transport closed).
func (f *fake) ended() {
	f.t.Helper()
	deadline := time.After(waitFor)
	for {
		select {
		case _, ok := <-f.in:
			if !ok {
				return
			}
		case <-deadline:
			f.t.Fatal("fake warden: the runtime's stream did not end")
		}
	}
}

func (f *fake) sendJSON(t wire.Type, ch uint32, v any) {
	f.t.Helper()
	if t == wire.TExited {
		// A warden sends what the process changed before its exit.
		if err := f.w.WriteJSON(wire.TChanges, ch, wire.Changes{Untracked: "fake warden"}); err != nil {
			f.t.Fatalf("fake warden: writing changes: %v", err)
		}
	}
	if err := f.w.WriteJSON(t, ch, v); err != nil {
		f.t.Fatalf("fake warden: writing %v: %v", t, err)
	}
}

// sendAsync writes without waiting: for frames the runtime may never read
// (after a violation).
func (f *fake) sendAsync(t wire.Type, ch uint32, parts ...[]byte) {
	go func() { _ = f.w.Write(t, ch, parts...) }() // may never be read: its error is expected
}

func (f *fake) out(ch uint32, stream byte, data []byte) {
	f.t.Helper()
	if err := f.w.WriteOut(ch, stream, data); err != nil {
		f.t.Fatalf("fake warden: writing out: %v", err)
	}
}

func testHello(window, stdinWindow int) wire.Hello {
	return wire.Hello{Version: wire.Version, PID: 7, Window: window, StdinWindow: stdinWindow, Socket: "/tmp/.stockade-warden.sock"}
}

// openLink opens a fresh link against a fake whose Hello has the given
// windows (zero: the defaults), asked for with the same Init.
func openLink(t testing.TB, window, stdinWindow int) (*Link, *fake) {
	t.Helper()
	f, r, w, c := newFake(t)
	hs := Handshake{Secret: testSecret, Window: window, StdinWindow: stdinWindow}
	type result struct {
		l   *Link
		err error
	}
	res := make(chan result, 1)
	go func() {
		l, _, err := Open(context.Background(), r, w, c, hs)
		res <- result{l, err}
	}()
	init := f.expect(wire.TInit, 0)
	var m wire.Init
	if err := wire.Decode(init, &m); err != nil {
		t.Fatal(err)
	}
	if m.Secret != hex.EncodeToString(testSecret) || m.Window != window || m.StdinWindow != stdinWindow {
		t.Fatalf("init %+v", m)
	}
	f.sendJSON(wire.THello, 0, testHello(cmp(window, wire.DefaultWindow), cmp(stdinWindow, wire.DefaultStdinWindow)))
	got := <-res
	if got.err != nil {
		t.Fatal(got.err)
	}
	t.Cleanup(func() { _ = got.l.Close() })
	return got.l, f
}

func cmp(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// startProc spawns a process the fake starts.
func startProc(t testing.TB, l *Link, f *fake, s wire.Spawn) *Proc {
	t.Helper()
	type result struct {
		p   *Proc
		err error
	}
	res := make(chan result, 1)
	go func() {
		p, err := l.Spawn(context.Background(), s)
		res <- result{p, err}
	}()
	fr, ok := f.next()
	for ok && fr.Type == wire.TAck {
		fr, ok = f.next()
	}
	if !ok || fr.Type != wire.TSpawn {
		t.Fatalf("fake warden: got %v, want spawn", fr.Type)
	}
	var m wire.Spawn
	if err := wire.Decode(fr, &m); err != nil {
		t.Fatal(err)
	}
	if m.ID != s.ID {
		t.Fatalf("spawn of %q, want %q", m.ID, s.ID)
	}
	f.sendJSON(wire.TStarted, fr.Channel, wire.Started{PID: 100 + int(fr.Channel), PGID: 100 + int(fr.Channel), OOMKills: 3})
	got := <-res
	if got.err != nil {
		t.Fatal(got.err)
	}
	if got.p.Channel != fr.Channel || got.p.PID != 100+int(fr.Channel) || got.p.OOMKills != 3 {
		t.Fatalf("proc %+v", got.p)
	}
	return got.p
}

// within runs fn and fails the test if it does not return in time.
func within(t testing.TB, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(waitFor):
		t.Fatalf("%s did not return in %v", what, waitFor)
	}
}

// readAll reads p to its end, returning each stream's bytes.
func readAll(p *Proc) (stdout, stderr []byte, err error) {
	for {
		s, d, err := p.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return stdout, stderr, err
		}
		if s == 1 {
			stdout = append(stdout, d...)
		} else {
			stderr = append(stderr, d...)
		}
	}
}

// model is a small working warden: "out N" writes N bytes of pattern to
// stdout in MaxData frames; "echo" writes stdin back to stdout (and
// "echo2" alternates stdout and stderr per frame) until CloseIn; both
// respect the windows and exit 0.
type model struct {
	w      *wire.Writer
	window uint64

	mu    sync.Mutex
	procs map[uint32]*modelProc
	sigs  []int
}

type modelProc struct {
	mu     sync.Mutex
	cond   *sync.Cond
	acked  uint64
	stdin  []byte
	closed bool
	gone   bool
}

// openModel opens a link to a model warden.
func openModel(tb testing.TB, window int) (*Link, *model) {
	tb.Helper()
	r, w, c, wr, ww := pipes()
	m := &model{w: wire.NewWriter(ww), window: uint64(window), procs: make(map[uint32]*modelProc)}
	go m.serve(wire.NewReader(wr))
	l, _, err := Open(context.Background(), r, w, c, Handshake{Secret: testSecret, Window: window})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = l.Close()
		_ = ww.Close()
		_ = wr.Close()
	})
	return l, m
}

func (m *model) serve(rd *wire.Reader) {
	for {
		f, err := rd.Read()
		if err != nil {
			m.mu.Lock()
			for _, p := range m.procs {
				p.mu.Lock()
				p.gone = true
				p.cond.Broadcast()
				p.mu.Unlock()
			}
			m.mu.Unlock()
			return
		}
		m.mu.Lock()
		p := m.procs[f.Channel]
		m.mu.Unlock()
		switch f.Type {
		case wire.TInit:
			// A runtime gone shows in the next read, which ends this loop.
			_ = m.w.WriteJSON(wire.THello, 0, testHello(int(m.window), wire.DefaultStdinWindow))
		case wire.TSpawn:
			var s wire.Spawn
			if wire.Decode(f, &s) != nil {
				return
			}
			p := &modelProc{}
			p.cond = sync.NewCond(&p.mu)
			m.mu.Lock()
			m.procs[f.Channel] = p
			m.mu.Unlock()
			_ = m.w.WriteJSON(wire.TStarted, f.Channel, wire.Started{PID: 10, PGID: 10})
			go m.run(f.Channel, p, s.Argv)
		case wire.TAck:
			p.mu.Lock()
			p.acked = wire.Offset(f)
			p.cond.Broadcast()
			p.mu.Unlock()
		case wire.TIn:
			p.mu.Lock()
			p.stdin = append(p.stdin, f.Payload...)
			p.cond.Broadcast()
			p.mu.Unlock()
		case wire.TCloseIn:
			p.mu.Lock()
			p.closed = true
			p.cond.Broadcast()
			p.mu.Unlock()
		case wire.TSignal:
			m.mu.Lock()
			m.sigs = append(m.sigs, wire.SignalNumber(f))
			m.mu.Unlock()
		case wire.TForget:
			m.mu.Lock()
			delete(m.procs, f.Channel)
			m.mu.Unlock()
		default:
			// the warden's own types: the model receives none of them
		}
	}
}

// send writes one Out once the window allows, false if the link is gone.
func (m *model) sendOut(ch uint32, p *modelProc, sent *uint64, stream byte, d []byte) bool {
	p.mu.Lock()
	for *sent+uint64(len(d))-p.acked > m.window && !p.gone {
		p.cond.Wait()
	}
	gone := p.gone
	p.mu.Unlock()
	if gone || m.w.WriteOut(ch, stream, d) != nil {
		return false
	}
	*sent += uint64(len(d))
	return true
}

func (m *model) run(ch uint32, p *modelProc, argv []string) {
	var sent uint64
	switch argv[0] {
	case "out":
		n := 0
		for _, c := range argv[1] {
			n = n*10 + int(c-'0')
		}
		chunk := make([]byte, wire.MaxData)
		for i := range chunk {
			chunk[i] = byte(i)
		}
		for n > 0 {
			k := min(n, len(chunk))
			if !m.sendOut(ch, p, &sent, 1, chunk[:k]) {
				return
			}
			n -= k
		}
	case "echo", "echo2":
		var read uint64
		stream := byte(1)
		for {
			p.mu.Lock()
			for uint64(len(p.stdin)) == read && !p.closed && !p.gone {
				p.cond.Wait()
			}
			d := p.stdin[read:]
			end, gone := p.closed && len(d) == 0, p.gone
			p.mu.Unlock()
			if end || gone {
				break
			}
			d = d[:min(len(d), wire.MaxData)]
			if !m.sendOut(ch, p, &sent, stream, d) {
				return
			}
			read += uint64(len(d))
			if m.w.WriteOffset(wire.TInAck, ch, read) != nil {
				return
			}
			if argv[0] == "echo2" {
				stream = 3 - stream
			}
		}
	}
	_ = m.w.WriteJSON(wire.TChanges, ch, wire.Changes{Untracked: "model warden"})
	_ = m.w.WriteJSON(wire.TExited, ch, wire.Exited{Code: 0, Output: sent, Stdout: sent})
}
