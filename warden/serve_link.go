package warden

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/stockade/stockade/warden/wire"
)

// maxQueued bounds the control replies (Started, Table, …) waiting for a
// link writer: a runtime that asks without reading ends its link rather than
// growing the warden.
const maxQueued = 8 << 20

// sendBatch bounds the Out frames of one process sent in one write: four
// full frames.
const sendBatch = 4 * (wire.MaxData + wire.OutHeaderSize)

// link is one connection to the runtime: the first on stdin/stdout, later
// ones on accepted socket connections. Exactly one is current; a reader
// goroutine decodes and applies the runtime's frames, a writer goroutine
// sends control replies first, then the ready processes' frames, a few
// frames (sendBatch) per process in turn so that no process starves
// another.
type link struct {
	s      *state
	r      *wire.Reader
	w      *wire.Writer
	closer func()
	first  bool

	// Guarded by s.mu.
	closed bool
	wake   *sync.Cond
	ctrl   []ctrlFrame
	queued int
	ready  []*proc

	obuf []byte // the writer's copy of data frames (sendBatch bytes)
}

type ctrlFrame struct {
	t       wire.Type
	ch      uint32
	payload []byte
}

func newLink(s *state, r *wire.Reader, w *wire.Writer, closer func(), first bool) *link {
	l := &link{s: s, r: r, w: w, closer: closer, first: first, obuf: make([]byte, 0, sendBatch)}
	l.wake = sync.NewCond(&s.mu)
	return l
}

// errLinkOver says the link ended for a reason already handled.
var errLinkOver = errors.New("link over")

// queue adds a control reply (v nil: an empty payload). The caller holds
// s.mu.
func (l *link) queue(t wire.Type, ch uint32, v any) {
	if l.closed {
		return
	}
	var b []byte
	if v != nil {
		var err error
		if b, err = json.Marshal(v); err != nil {
			logf("encoding %v: %v", t, err)
			return
		}
	}
	if l.queued+len(b) > maxQueued {
		logf("the runtime is not reading its replies: link ended")
		l.s.endLocked(l)
		return
	}
	l.queued += len(b)
	l.ctrl = append(l.ctrl, ctrlFrame{t, ch, b})
	l.wake.Signal()
}

// takeOver makes l the current link: the previous one (if any) is closed,
// and every process waits for a Resume before sending on l. The caller holds
// s.mu.
func (s *state) takeOver(l *link) {
	if old := s.link; old != nil {
		logf("a new link replaces the current one")
		s.endLocked(old)
	}
	s.link = l
	for _, p := range s.procs {
		p.sending = false
		p.sent = p.acked
		p.exitSent = false
		p.reapSent = false
		p.changesSent = false
		p.changesFirst = false
		p.queued = false
		p.inBase = p.inRecv
		p.inAckDue = false
	}
}

// endLocked ends l (its reader and writer stop, its streams are closed);
// processes keep running. The caller holds s.mu.
func (s *state) endLocked(l *link) {
	if l.closed {
		return
	}
	l.closed = true
	l.wake.Broadcast()
	if s.link == l {
		s.link = nil
	}
	for _, p := range l.ready {
		p.queued = false
	}
	l.ready, l.ctrl = nil, nil
	// Closing unblocks the reader and the writer (every link fd is in the
	// poller); a write never tells the warden that the runtime left.
	go l.closer()
}

func (s *state) end(l *link) {
	s.mu.Lock()
	s.endLocked(l)
	s.mu.Unlock()
}

// serve runs l until it ends: the writer in a goroutine, the reader here.
func (l *link) serve() {
	go l.writer()
	for {
		f, err := l.r.Read()
		if err != nil && wire.IsProtocol(err) && f.Channel != 0 {
			// A whole frame, malformed, about one process: the stream
			// is still in step, and the request is refused alone.
			logf("refused: %v", err)
			continue
		}
		if err != nil {
			switch {
			case wire.IsProtocol(err):
				logf("link ended: %v", err)
			case errors.Is(err, io.EOF), errors.Is(err, os.ErrClosed), errors.Is(err, io.ErrClosedPipe):
			default:
				logf("link ended: %v", err)
			}
			break
		}
		if err := l.handle(f); err != nil {
			var r *refusal
			if errors.As(err, &r) {
				logf("refused: %v", err)
				continue
			}
			if !errors.Is(err, errLinkOver) {
				logf("link ended: %v", err)
			}
			break
		}
	}
	l.s.end(l)
}

// refusal is a runtime request about one process channel that the warden
// does not apply. The link goes on: the stream is in step, and ending it
// would cut every other process's output for one channel's fault (a
// runtime's race with its own Forget, say). Only what breaks the stream
// itself (framing, the control channel, an unread reply queue) ends the
// link.
type refusal struct{ what string }

func (r *refusal) Error() string { return r.what }

func refuse(format string, args ...any) error {
	return &refusal{what: fmt.Sprintf(format, args...)}
}

// handle applies one frame from the runtime. A *refusal refuses that frame
// alone; any other non-nil error ends the link.
func (l *link) handle(f wire.Frame) error {
	s := l.s
	if f.Type == wire.TSpawn {
		var sp wire.Spawn
		if err := wire.Decode(f, &sp); err != nil {
			return l.badSpawn(f.Channel, err)
		}
		return l.spawn(f.Channel, &sp)
	}
	if f.Type == wire.TList {
		// After every spawn in progress: a process forked for an earlier
		// link (or earlier on this one) is registered before the table is
		// made, so a reattached runtime sees every process the warden
		// runs.
		s.forkMu.Lock()
		defer s.forkMu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.link != l {
		return errLinkOver
	}
	if f.Channel == 0 {
		switch f.Type {
		case wire.TList:
			l.table()
			return nil
		case wire.TRekey:
			return l.rekey(f)
		default:
			// every other control type: refused below
		}
		return violation("unexpected %v frame from the runtime", f.Type)
	}
	p := s.procs[f.Channel]
	switch f.Type {
	case wire.TIn, wire.TCloseIn, wire.TSignal, wire.TResize, wire.TForget, wire.TAck:
		if p == nil {
			// A runtime may send these right behind a Spawn that then
			// failed, or behind its own Forget (an Ack a reader had
			// under way): there is nothing left to apply them to.
			return nil
		}
	case wire.TResume:
		if p == nil {
			return refuse("%v for channel %d, which has no process", f.Type, f.Channel)
		}
	default:
		return refuse("unexpected %v frame from the runtime on channel %d", f.Type, f.Channel)
	}
	switch f.Type {
	case wire.TAck:
		return l.onAck(p, f)
	case wire.TResume:
		return l.onResume(p, f)
	case wire.TForget:
		return l.onForget(p, f)
	case wire.TIn:
		return l.onIn(p, f)
	case wire.TCloseIn:
		return l.onCloseIn(p)
	case wire.TSignal:
		return l.onSignal(p, f)
	case wire.TResize:
		l.onResize(p, f)
	default:
		// every other type: refused by the decoder or above
	}
	return nil
}

// The process frames' handlers: each is called with s.mu held and p the
// channel's process (handle decided both).

func (l *link) onAck(p *proc, f wire.Frame) error {
	s := l.s
	off := wire.Offset(f)
	if off < p.acked || off > p.sent {
		return refuse("ack %d on channel %d outside [%d, %d]", off, f.Channel, p.acked, p.sent)
	}
	s.total -= p.ackTo(off)
	p.window.Broadcast()
	s.space.Broadcast()
	return nil
}

func (l *link) onResume(p *proc, f wire.Frame) error {
	off := wire.Offset(f)
	if off < p.acked || off > p.read {
		return refuse("resume %d on channel %d outside [%d, %d]", off, f.Channel, p.acked, p.read)
	}
	p.sent = off
	p.sending = true
	// A runtime that resumes the process takes it back from a Forget an
	// earlier link sent before its reap.
	p.forgetOnReap = false
	p.exitSent = false
	p.reapSent = false
	// An exited process's Changes is the first frame after its Resume
	// (the runtime takes its exit from the table).
	p.changesSent = false
	p.changesFirst = p.exit != nil
	// Tell the runtime where stdin stands on this link.
	p.inAckDue = p.stdin != nil
	l.s.kick(p)
	return nil
}

func (l *link) onForget(p *proc, f wire.Frame) error {
	s := l.s
	if p.running() {
		// Not reaped yet: the runtime wants it gone, so it is killed, and
		// dropped once reaped (until then a table lists it: it never runs
		// unattended). Nothing more is sent for it on this link.
		logf("forget of running process %s on channel %d: killed, forgotten once reaped", p.id, f.Channel)
		p.forgetOnReap = true
		p.sending = false
		if err := s.sys.kill(p.pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
			logf("kill group %d: %v", p.pid, err)
		}
		return nil
	}
	s.forget(p)
	return nil
}

func (l *link) onIn(p *proc, f wire.Frame) error {
	if p.stdin == nil {
		return refuse("stdin for process %s, spawned without stdin", p.id)
	}
	if p.closeIn {
		return refuse("stdin for process %s after close_in", p.id)
	}
	base := max(p.inAckSent, p.inBase)
	if p.inRecv+uint64(len(f.Payload))-base > uint64(l.s.stdinWindow) {
		// Its stdin is broken (bytes are missing): the child gets what
		// came before, then the end of its input.
		p.closeIn = true
		p.inWake.Signal()
		return refuse("stdin for process %s beyond the window (%d past %d): its stdin is closed", p.id, p.inRecv+uint64(len(f.Payload))-base, base)
	}
	p.in = append(p.in, f.Payload...)
	p.inRecv += uint64(len(f.Payload))
	p.inWake.Signal()
	return nil
}

func (l *link) onCloseIn(p *proc) error {
	if p.stdin == nil {
		return refuse("close_in for process %s, spawned without stdin", p.id)
	}
	// A terminal has no end of input short of hanging up: for a TTY this
	// only stops further stdin (the child is not told).
	p.closeIn = true
	p.inWake.Signal()
	return nil
}

func (l *link) onSignal(p *proc, f wire.Frame) error {
	sig := wire.SignalNumber(f)
	if sig < 1 || sig > 64 {
		return refuse("signal %d for process %s", sig, p.id)
	}
	if err := l.s.sys.kill(p.pid, unix.Signal(sig)); err != nil && !errors.Is(err, unix.ESRCH) {
		logf("signal %d to group %d: %v", sig, p.pid, err)
	}
	return nil
}

func (l *link) onResize(p *proc, f wire.Frame) {
	if p.master == nil {
		return
	}
	rows, cols := wire.Size(f)
	if err := resize(p.master, rows, cols); err != nil && !errors.Is(err, os.ErrClosed) {
		logf("resize process %s: %v", p.id, err)
	}
}

func violation(format string, args ...any) error {
	return &wire.ProtocolError{What: fmt.Sprintf(format, args...)}
}

// spawn starts a process on channel ch in the background (up to maxSpawns
// at once; a burst beyond blocks this reader) and has it queue Started or
// SpawnFailed. The read lock on s.forkMu is taken here, before the next
// frame is read: a List behind this Spawn waits for it.
func (l *link) spawn(ch uint32, sp *wire.Spawn) error {
	s := l.s
	s.spawnSlots <- struct{}{}
	s.forkMu.RLock()
	release := func() {
		s.forkMu.RUnlock()
		<-s.spawnSlots
	}
	s.mu.Lock()
	if s.link != l {
		s.mu.Unlock()
		release()
		return errLinkOver
	}
	if _, busy := s.spawning[ch]; busy || s.procs[ch] != nil {
		s.mu.Unlock()
		release()
		return refuse("spawn on channel %d, which is in use", ch)
	}
	if len(s.procs)+len(s.spawning) >= wire.MaxProcesses {
		l.queue(wire.TSpawnFailed, ch, &wire.SpawnFailed{Code: 126, Error: fmt.Sprintf("the warden holds %d processes already", len(s.procs)+len(s.spawning))})
		s.mu.Unlock()
		release()
		return nil
	}
	s.spawning[ch] = struct{}{}
	s.mu.Unlock()
	go func() {
		defer release()
		l.spawnNow(ch, sp)
	}()
	return nil
}

// spawnNow forks sp's child and registers it. The caller holds s.forkMu for
// reading and has marked ch spawning.
func (l *link) spawnNow(ch uint32, sp *wire.Spawn) {
	s := l.s
	// The OOM kill count before the fork: a child the OOM killer takes at
	// once (before a count read after its start) is still seen to have
	// died of it.
	oom := s.sys.oomKills()
	p, err := s.start(ch, sp)

	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.spawning, ch)
	if err != nil {
		var se *spawnError
		if !errors.As(err, &se) {
			se = &spawnError{code: 126, text: err.Error()}
		}
		l.queue(wire.TSpawnFailed, ch, &wire.SpawnFailed{Code: se.code, Error: truncate(se.text)})
		return
	}
	s.register(p)
	if s.link != l {
		// A reattach took over during the fork: the new link learns of
		// p from its Table and Resumes it like the others.
		p.sending = false
	}
	// Started is queued before p can be ready, and the writer sends
	// control replies first: Started precedes the channel's output.
	l.queue(wire.TStarted, ch, &wire.Started{PID: p.pid, PGID: p.pid, OOMKills: oom})
}

// badSpawn answers a Spawn the warden cannot decode: SpawnFailed on a free
// channel (the runtime learns its request was bad), a refusal on a busy one
// (an answer there would speak for the process that runs on it).
func (l *link) badSpawn(ch uint32, err error) error {
	s := l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.link != l {
		return errLinkOver
	}
	if _, busy := s.spawning[ch]; busy || s.procs[ch] != nil {
		return refuse("%v (on channel %d, which is in use)", err, ch)
	}
	logf("refused: %v", err)
	l.queue(wire.TSpawnFailed, ch, &wire.SpawnFailed{Code: 126, Error: truncate(err.Error())})
	return nil
}

// truncate bounds a SpawnFailed's text.
func truncate(text string) string {
	if len(text) > 4096 {
		return text[:4096]
	}
	return text
}

// rekey replaces the secret that authenticates reattaches and answers
// Rekeyed. The link already proved the old secret (Init, or a reattach's
// MAC); a malformed Rekey ends it, as any bad control frame does. The
// caller holds s.mu.
func (l *link) rekey(f wire.Frame) error {
	var m wire.Rekey
	if err := wire.Decode(f, &m); err != nil {
		return err
	}
	secret, _ := wire.DecodeHex(m.Secret, wire.SecretSize)
	l.s.secret = secret
	// Not logged: a rekey is every claim's, and the runtime reads the
	// warden's stderr as warnings.
	l.queue(wire.TRekeyed, 0, nil)
	return nil
}

// table queues the process table, in channel order. The caller holds s.mu.
func (l *link) table() {
	t := wire.Table{Processes: make([]wire.Entry, 0, len(l.s.procs))}
	for _, p := range l.s.procs {
		t.Processes = append(t.Processes, p.entry())
	}
	sort.Slice(t.Processes, func(i, j int) bool { return t.Processes[i].Channel < t.Processes[j].Channel })
	l.queue(wire.TTable, 0, &t)
}

// writer sends l's frames until l ends. It never decides that the runtime
// left from a write that succeeded: Docker accepts and discards the writes
// of a detached exec.
func (l *link) writer() {
	s := l.s
	s.mu.Lock()
	for {
		if l.closed {
			s.mu.Unlock()
			return
		}
		var err error
		switch {
		case len(l.ctrl) > 0:
			c := l.ctrl[0]
			l.ctrl = l.ctrl[1:]
			l.queued -= len(c.payload)
			s.mu.Unlock()
			err = l.w.Write(c.t, c.ch, c.payload)
			s.mu.Lock()
		case len(l.ready) > 0:
			p := l.ready[0]
			l.ready = l.ready[1:]
			p.queued = false
			if p.forgotten || !p.sending {
				continue
			}
			err = l.sendOne(p)
			s.kick(p)
		default:
			l.wake.Wait()
			continue
		}
		if err != nil {
			if !l.closed {
				logf("link ended: %v", err)
			}
			s.endLocked(l)
		}
	}
}

// sendOne sends p's next frame: an InAck when stdin moved, else output, else
// Exited once all output went out. Called and returns with s.mu held; the
// write itself happens unlocked, from copies.
func (l *link) sendOne(p *proc) error {
	s := l.s
	switch {
	case p.changesFirst:
		// And again right before Exited (the runtime ignores the
		// repeat): every Exited has its Changes right before it.
		p.changesFirst = false
		return l.sendChanges(p)
	case p.reaped && !p.reapSent:
		// Ahead of any output: the runtime learns the end even when no
		// consumer reads (and can then stop and forget the process).
		p.reapSent = true
		b, err := json.Marshal(wire.Reaped{Code: p.code, Signal: p.sig, OOMKills: p.reapOOM})
		if err != nil {
			return err
		}
		s.mu.Unlock()
		defer s.mu.Lock()
		return l.w.Write(wire.TReaped, p.ch, b)
	case p.stdin != nil && (p.inWritten > p.inAckSent || p.inAckDue):
		off := p.inWritten
		p.inAckSent = off
		p.inAckDue = false
		s.mu.Unlock()
		defer s.mu.Lock()
		return l.w.WriteOffset(wire.TInAck, p.ch, off)
	case p.sent < p.read:
		// Up to sendBatch of frames in one write: a streaming child
		// costs a write to the link per few frames, not per frame.
		b := l.obuf[:0]
		for p.sent < p.read && len(b)+wire.OutHeaderSize < cap(b) {
			stream, d := p.peek(p.sent, min(wire.MaxData, cap(b)-len(b)-wire.OutHeaderSize))
			b = wire.AppendOutHeader(b, p.ch, stream, len(d))
			b = append(b, d...)
			p.sent += uint64(len(d))
		}
		s.mu.Unlock()
		defer s.mu.Lock()
		return l.w.WriteFrames(b)
	case p.exit != nil && !p.changesSent:
		// Right before Exited.
		p.changesSent = true
		return l.sendChanges(p)
	case p.exit != nil && !p.exitSent:
		p.exitSent = true
		b, err := json.Marshal(p.exit)
		if err != nil {
			return err
		}
		s.mu.Unlock()
		defer s.mu.Lock()
		return l.w.Write(wire.TExited, p.ch, b)
	}
	return nil
}

// sendChanges sends p's Changes (p has an exit, so it has them). Called
// and returns with s.mu held.
func (l *link) sendChanges(p *proc) error {
	b, err := encodeChanges(p.changes)
	if err != nil {
		return err
	}
	l.s.mu.Unlock()
	defer l.s.mu.Lock()
	err = l.w.Write(wire.TChanges, p.ch, b)
	if len(b) >= 16<<10 || p.track != nil && p.track.heavy() {
		// What its tracking held goes back now, and its report's once
		// the runtime forgets it (forget): measured, the two together
		// leave the least behind (BENCHMARKS.md).
		l.s.mu.Lock()
		p.heavy = true
		l.s.mu.Unlock()
		giveBack()
	}
	return err
}
