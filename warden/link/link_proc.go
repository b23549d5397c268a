package link

import (
	"fmt"
	"io"
	"sync"
	"syscall"

	"github.com/stockade/stockade/warden/wire"
)

type procState uint8

const (
	statePending   procState = iota // Spawn sent, no answer yet
	stateAbandoned                  // pending, and its Spawn caller gave up
	stateStarted                    // Started arrived (or resumed)
)

// maxChunk is the least bound of the data one Next returns (Link.chunk):
// a bound lets acknowledgements flow while the consumer handles a long run
// of queued output.
const maxChunk = wire.MaxData + 1

// Proc is one process on a link: its output (pull-style, Next), its stdin
// (Write, CloseStdin), signals and its exit.
//
// Next is for one goroutine at a time; the other methods are safe for
// concurrent use.
type Proc struct {
	// ID is the runtime's process id (Spawn.ID).
	ID string
	// Channel is the process's channel on the link.
	Channel uint32
	// PID and PGID are the process's and its group's ids in the sandbox.
	PID, PGID int
	// OOMKills is the sandbox memory cgroup's OOM kill count at the spawn
	// (-1 when unreadable or, for a resumed Proc, unknown).
	OOMKills int64

	link    *Link
	state   procState  // guarded by link.mu
	spawned chan error // Spawn's answer, for a pending spawn
	resumed bool
	stdin   bool

	nextMu sync.Mutex // one Next at a time
	wmu    sync.Mutex // one Write (and CloseStdin's frame) at a time

	mu          sync.Mutex
	q           outQueue
	received    uint64 // output offset received
	consumed    uint64 // output offset released by the consumer (Next called again)
	held        int    // bytes the last Next returned, not yet released
	acked       uint64 // output offset last acknowledged (set before the Ack is sent)
	closed      bool   // Close: the consumer is gone
	forgotten   bool
	exit        *wire.Exited
	tableExit   bool          // exit came from the table (Resume): the warden may send it again
	changes     *wire.Changes // the first Changes (a Resume sends it again: ignored)
	exitClosed  bool
	exited      chan struct{}
	reap        *wire.Reaped
	reapClosed  bool
	reaped      chan struct{}
	outReady    chan struct{}
	inReady     chan struct{}
	inSent      uint64 // stdin offset sent (set before the In is sent)
	inAcked     uint64
	stdinClosed bool
}

func (l *Link) newProc(ch uint32, id string) *Proc {
	return &Proc{
		ID:       id,
		Channel:  ch,
		link:     l,
		exited:   make(chan struct{}),
		reaped:   make(chan struct{}),
		outReady: make(chan struct{}, 1),
		inReady:  make(chan struct{}, 1),
	}
}

func (p *Proc) spawnResult(err error) (*Proc, error) {
	if err != nil {
		return nil, err
	}
	return p, nil
}

func wake(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (p *Proc) String() string { return fmt.Sprintf("process %s (channel %d)", p.ID, p.Channel) }

// onOut queues output from the reader goroutine; it never blocks.
func (p *Proc) onOut(stream byte, data []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.forgotten {
		return nil
	}
	n := uint64(len(data))
	end := p.received + n
	if end < p.received {
		return wire.Violation("out on channel %d: offset overflow", p.Channel)
	}
	if p.exit != nil && end > p.exit.Output {
		return wire.Violation("out on channel %d (process %s) up to %d, beyond its exited output %d", p.Channel, p.ID, end, p.exit.Output)
	}
	if end-p.acked > p.link.window {
		return wire.Violation("out on channel %d (process %s) up to %d with %d acknowledged: more than the window of %d", p.Channel, p.ID, end, p.acked, p.link.window)
	}
	p.received = end
	if p.closed {
		return nil
	}
	p.q.push(stream, data, int(p.link.window))
	wake(p.outReady)
	return nil
}

func (p *Proc) onInAck(off uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.forgotten || p.resumed {
		// A resumed process's stdin offsets belong to an earlier link.
		return nil
	}
	if off > p.inSent {
		return wire.Violation("in_ack on channel %d (process %s) of %d, beyond the %d sent", p.Channel, p.ID, off, p.inSent)
	}
	if off < p.inAcked {
		return wire.Violation("in_ack on channel %d (process %s) of %d, back from %d", p.Channel, p.ID, off, p.inAcked)
	}
	p.inAcked = off
	wake(p.inReady)
	return nil
}

func (p *Proc) onExited(m wire.Exited) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.forgotten {
		return nil
	}
	if p.exit != nil {
		if p.tableExit && m == *p.exit {
			// The exit Resume knew from the table, sent again.
			p.tableExit = false
			return nil
		}
		return wire.Violation("a second exited on channel %d (process %s)", p.Channel, p.ID)
	}
	if m.Output < p.received {
		return wire.Violation("exited on channel %d (process %s) with output %d, less than the %d received", p.Channel, p.ID, m.Output, p.received)
	}
	if p.changes == nil {
		// A warden sends what the process changed before its exit; one
		// that does not would leave the output waiting for it forever.
		return wire.Violation("exited on channel %d (process %s) before its changes", p.Channel, p.ID)
	}
	p.exit = &m
	p.endExited()
	p.setReaped(wire.Reaped{Code: m.Code, Signal: m.Signal, OOMKills: m.OOMKills})
	wake(p.outReady)
	wake(p.inReady)
	return nil
}

// onChanges takes what the process did to the workspace. It comes before
// the Exited it belongs to (or, after a Resume, before anything else); a
// repeat after a Resume is the same report and is ignored.
func (p *Proc) onChanges(m wire.Changes) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.forgotten {
		return nil
	}
	if p.exit != nil && !p.tableExit {
		return wire.Violation("changes on channel %d (process %s) after its exited", p.Channel, p.ID)
	}
	if p.changes != nil {
		return nil
	}
	p.changes = &m
	wake(p.outReady)
	return nil
}

// Changes returns what the process did to the workspace and true once the
// warden reported it (it comes with the exit).
func (p *Proc) Changes() (wire.Changes, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.changes == nil {
		return wire.Changes{}, false
	}
	return *p.changes, true
}

func (p *Proc) linkEnded() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endExited()
	p.endReaped()
}

// onReaped takes the child's exit status. A repeat (after a resume, or
// with Exited) must say the same.
func (p *Proc) onReaped(m wire.Reaped) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.forgotten {
		return nil
	}
	if p.reap != nil {
		if p.reap.Code != m.Code || p.reap.Signal != m.Signal {
			return wire.Violation("reaped on channel %d (process %s) twice with different status", p.Channel, p.ID)
		}
		return nil
	}
	p.setReaped(m)
	return nil
}

// endExited closes Exited, once (p.mu held).
func (p *Proc) endExited() {
	if !p.exitClosed {
		p.exitClosed = true
		close(p.exited)
	}
}

// endReaped closes Reaped, once (p.mu held).
func (p *Proc) endReaped() {
	if !p.reapClosed {
		p.reapClosed = true
		close(p.reaped)
	}
}

// setReaped records the status (p.mu held).
func (p *Proc) setReaped(m wire.Reaped) {
	if p.reap == nil {
		p.reap = &m
	}
	p.endReaped()
}

// Reaped is closed once the child was reaped (Reaped or Exited arrived),
// or when the link ended or the Proc was forgotten without it (then Reap
// returns ok false).
func (p *Proc) Reaped() <-chan struct{} { return p.reaped }

// Reap returns the child's exit status and true once it was reaped.
func (p *Proc) Reap() (wire.Reaped, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reap == nil {
		return wire.Reaped{}, false
	}
	return *p.reap, true
}

// complete reports whether all the process's output arrived (p.mu held).
// Changes come with the exit: Next ends only once they are here too.
func (p *Proc) complete() bool {
	return p.exit != nil && p.received == p.exit.Output && p.changes != nil
}

// Next returns the next piece of output: its stream (1 stdout, 2 stderr)
// and data, valid until the next call. It blocks until there is output,
// the end (io.EOF once the offset reaches Exited.Output), or the link's
// end: then every byte already received is still returned, and only then
// an *OutputCutError with the link's error (io.EOF for a process whose
// output had all arrived). Once the link ended Next never blocks.
//
// Calling Next again says the caller has taken (recorded and handed on)
// the previous data: only then is it acknowledged, in batches (each
// quarter window, and before Next blocks). A consumer that stops calling
// Next stops acknowledging: the warden stops reading that process only.
func (p *Proc) Next() (stream byte, data []byte, err error) {
	p.nextMu.Lock()
	defer p.nextMu.Unlock()
	l := p.link
	p.mu.Lock()
	if p.held > 0 {
		p.q.pop(p.held)
		p.consumed += uint64(p.held)
		p.held = 0
	}
	for {
		switch {
		case p.closed:
			p.mu.Unlock()
			return 0, nil, ErrProcClosed
		case p.q.n > 0:
			// Also once the link ended: what was received is handed on
			// (to be recorded and counted) before the link's error.
			if p.consumed-p.acked >= l.ackEvery && !p.forgotten && !l.ended() {
				if err := p.ack(); err != nil {
					return 0, nil, err
				}
				continue
			}
			stream, data = p.q.peek(l.chunk)
			p.held = len(data)
			p.mu.Unlock()
			return stream, data, nil
		case p.complete():
			p.q.release()
			p.mu.Unlock()
			return 0, nil, io.EOF
		case l.ended():
			p.q.release()
			p.mu.Unlock()
			return 0, nil, &OutputCutError{Err: l.Err()}
		case p.forgotten:
			p.mu.Unlock()
			return 0, nil, ErrForgotten
		case p.consumed > p.acked:
			if err := p.ack(); err != nil {
				return 0, nil, err
			}
			continue
		}
		p.mu.Unlock()
		select {
		case <-p.outReady:
		case <-l.done:
		}
		p.mu.Lock()
	}
}

// ack acknowledges the consumed offset: called and returns with p.mu held
// on success, without it on error.
func (p *Proc) ack() error {
	off := p.consumed
	p.acked = off // before the Ack leaves: the warden may answer at once
	p.mu.Unlock()
	if err := p.link.sent(p.link.w.WriteOffset(wire.TAck, p.Channel, off)); err != nil {
		return err
	}
	p.mu.Lock()
	return nil
}

// Offset returns the output offset consumed so far: just past the data the
// last Next returned (from, for a resumed Proc that has not returned
// data yet).
func (p *Proc) Offset() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.consumed + uint64(p.held)
}

// Write writes b to the process's stdin. It splits b into frames of at
// most MaxData bytes and never has more than the stdin window sent beyond
// the warden's last InAck: it blocks for credit. It fails after
// CloseStdin, once the process exited, or when the link ends.
func (p *Proc) Write(b []byte) (int, error) {
	if !p.stdin {
		return 0, ErrNoStdin
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	l := p.link
	n := 0
	for len(b) > 0 {
		p.mu.Lock()
		var k int
		for {
			var err error
			switch {
			case l.ended():
				err = l.Err()
			case p.forgotten:
				err = ErrForgotten
			case p.stdinClosed:
				err = ErrStdinClosed
			case p.exit != nil:
				err = ErrExited
			}
			if err != nil {
				p.mu.Unlock()
				return n, err
			}
			if inflight := p.inSent - p.inAcked; inflight < l.stdinWindow {
				k = int(min(uint64(len(b)), uint64(wire.MaxData), l.stdinWindow-inflight))
				break
			}
			p.mu.Unlock()
			select {
			case <-p.inReady:
			case <-l.done:
			}
			p.mu.Lock()
		}
		p.inSent += uint64(k)
		p.mu.Unlock()
		if err := l.sent(l.w.Write(wire.TIn, p.Channel, b[:k])); err != nil {
			return n, err
		}
		n += k
		b = b[k:]
	}
	return n, nil
}

// CloseStdin sends CloseIn: the warden closes the process's stdin once
// what was written reached it. A Write blocked for credit returns
// ErrStdinClosed.
func (p *Proc) CloseStdin() error {
	if !p.stdin {
		if !p.resumed {
			return ErrNoStdin
		}
	} else {
		p.mu.Lock()
		closed := p.stdinClosed
		p.stdinClosed = true
		p.mu.Unlock()
		if closed {
			return ErrStdinClosed
		}
		wake(p.inReady)
		p.wmu.Lock() // after the last In frame
		defer p.wmu.Unlock()
	}
	return p.send(func() error { return p.link.w.Write(wire.TCloseIn, p.Channel) })
}

// send writes a frame for the process unless it was forgotten or the link
// ended.
func (p *Proc) send(write func() error) error {
	p.mu.Lock()
	forgotten := p.forgotten
	p.mu.Unlock()
	if forgotten {
		return ErrForgotten
	}
	if p.link.ended() {
		return p.link.Err()
	}
	return p.link.sent(write())
}

// Signal sends sig to the process's group.
func (p *Proc) Signal(sig syscall.Signal) error {
	return p.send(func() error { return p.link.w.WriteSignal(p.Channel, int(sig)) })
}

// Resize sets the size of the process's terminal.
func (p *Proc) Resize(rows, cols uint16) error {
	return p.send(func() error { return p.link.w.WriteResize(p.Channel, rows, cols) })
}

// Exited is closed when the process's Exited arrived, or when the link
// ended or the Proc was forgotten without it (then Exit returns ok false).
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Exit returns the process's Exited and true once it arrived.
func (p *Proc) Exit() (wire.Exited, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exit == nil {
		return wire.Exited{}, false
	}
	return *p.exit, true
}

// Forget sends Forget: the runtime has journaled the end and read all
// output, and the warden drops the process. The channel is free then;
// frames still in flight for it are ignored. Forget before the warden
// reported the process reaped (Reaped) makes the warden kill its group and
// drop it once reaped.
func (p *Proc) Forget() error {
	p.mu.Lock()
	if p.forgotten {
		p.mu.Unlock()
		return ErrForgotten
	}
	p.forgotten = true
	if p.held == 0 {
		p.q.release()
	} else {
		p.q.drop()
	}
	p.consumed += uint64(p.held)
	p.held = 0
	p.endExited()
	p.endReaped()
	p.mu.Unlock()
	wake(p.outReady)
	wake(p.inReady)
	l := p.link
	l.mu.Lock()
	if l.procs[p.Channel] == p {
		delete(l.procs, p.Channel)
		l.retire(p.Channel)
	}
	l.mu.Unlock()
	if l.ended() {
		return l.Err()
	}
	return l.sent(l.w.Write(wire.TForget, p.Channel))
}

// Close says the consumer is gone: Next returns ErrProcClosed from now on,
// and the output is no longer acknowledged (its window fills and the
// warden blocks that process only). The process is not signalled: the
// caller decides.
func (p *Proc) Close() {
	p.mu.Lock()
	p.closed = true
	if p.held > 0 {
		// The data the last Next returned may still be in use: its
		// buffer goes to the garbage collector, not to the pool.
		p.q.drop()
	} else {
		p.q.release()
	}
	p.consumed += uint64(p.held)
	p.held = 0
	p.mu.Unlock()
	wake(p.outReady)
}
