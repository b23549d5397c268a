package process

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/internal/failpoint"
	"github.com/stockade/stockade/recorder"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/warden/link"
)

// output is the stream actor that owns a process's read loop. The loop is a
// goroutine (a blocking socket read must never sit in Receive); it pulls the
// next frame from dockerio only after the previous one was taken by the
// consumer's pipe, so an unread pipe stops the socket reads.
type output struct {
	att            dockerio.Attachment
	stdout, stderr *pipe // nil: discard
	quota          int64
	// The recording: made by the read loop (off the mailbox) from store,
	// id and bounds; nil records nothing.
	store  *recorder.Store
	id     string
	bounds spec.Record
	// rec is made by the loop, or given (a re-adopted process's resumed
	// recording).
	rec *recorder.Recording
	log *slog.Logger
	// loops counts running read loops (the runtime's Close waits).
	loops *sync.WaitGroup
	// Bytes taken so far, readable by the process actor while the loop
	// runs (it reports them if it must abandon the loop).
	nOut, nErr atomic.Int64
	// detaching: the runtime is letting go of the process (it closes);
	// a warden's process goes on, so its recording is suspended, not
	// ended, for the next runtime to resume.
	detaching atomic.Bool

	// endMu orders the two ends of the recording: the read loop's (it
	// stops writing: loopEnded) and the process actor's decision (fate):
	// the end record is written only once the exit is journaled
	// (fateSeal, by the actor, after the loop ended); any other end
	// suspends the recording for the next runtime to resume.
	endMu     sync.Mutex
	loopEnded bool
	fate      recFate
}

// recFate is what becomes of a recording when its read loop is over.
type recFate int

const (
	fateUndecided recFate = iota
	// fateSeal: the exit is journaled: write the end record.
	fateSeal
	// fateSuspend: the process is left running (or its end is not
	// journaled): no end record; a later Resume continues it.
	fateSuspend
)

// outputDone is posted to the process actor when the read loop ends. err is
// nil at a clean end of the output.
type outputDone struct {
	stdout, stderr int64
	err            error
	quotaHit       bool
	// panicked: the read loop itself failed (a bug of ours, not a bad
	// stream): the process fails, the sandbox is not failed closed.
	panicked bool
	// head is the first output bytes (both streams, in arrival order):
	// where Docker or the exec wrapper says a command could not start.
	head []byte
}

// headBytes bounds outputDone.head.
const headBytes = 512

func (o *output) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		parent, sys := ctx.Parent(), ctx.ActorSystem()
		if o.loops != nil {
			o.loops.Add(1)
		}
		go func() {
			if o.loops != nil {
				defer o.loops.Done()
			}
			d := o.run()
			sys.Root.Send(parent, d)
		}()
	case *actor.Stopping:
		// Unblock a read loop parked in a socket read; the loop reports
		// how the stream ended.
		_ = o.att.Close()
	}
}

// run is the read loop. A panic in it fails the process, not the runtime.
func (o *output) run() (d outputDone) {
	defer func() {
		d.stdout, d.stderr = o.nOut.Load(), o.nErr.Load()
		if r := recover(); r != nil {
			d.err = spec.Errorf(spec.CodeStreamFailure, "process.output", "read loop panicked: %v", r)
			d.panicked = true
		}
		o.closePipes(d.err)
		// The recording is synced before outputDone reaches the process
		// actor, which journals the exit only after it: an exit in the
		// journal implies its output on disk. Its end record waits for
		// that exit (sealRecording); a runtime letting go suspends it. A
		// failure is logged; the process's outcome is not the recorder's
		// to change.
		o.endMu.Lock()
		o.loopEnded = true
		fate := o.fate
		o.endMu.Unlock()
		switch {
		case fate == fateSeal:
			o.seal()
			return
		case fate == fateSuspend || o.detaching.Load() || errors.Is(d.err, link.ErrLinkClosed):
			o.suspend()
			return
		}
		if err := o.rec.Sync(); err != nil {
			o.log.Warn("syncing the output recording failed", "process", o.id, "err", err)
		}
	}()
	if o.store != nil && o.rec == nil {
		rec, err := o.store.Create(o.id, o.bounds)
		if err != nil {
			o.log.Warn("the output cannot be recorded; the process runs unrecorded", "process", o.id, "err", err)
		}
		o.rec = rec
	}
	for {
		id, p, err := o.att.Next()
		if errors.Is(err, io.EOF) {
			return d
		}
		if err != nil {
			d.err = err
			return d
		}
		if total := o.nOut.Load() + o.nErr.Load() + int64(len(p)); total > o.quota {
			d.err = spec.Errorf(spec.CodeOutputLimit, "process.output", "combined output exceeded its quota of %d bytes", o.quota)
			d.quotaHit = true
			return d
		}
		// Recorded as the loop takes it, before the consumer's pipe: the
		// recorder never buffers beyond this chunk, so backpressure is
		// the pipe's alone. A write error never stops the process.
		if err := o.rec.Write(byte(id), p); err != nil {
			o.log.Warn("recording output failed; the recording is incomplete, the process goes on", "process", o.id, "err", err)
		} else if o.rec != nil && o.nOut.Load()+o.nErr.Load() > 0 {
			failpoint.Hit(failpoint.RecorderChunkWritten) // not the first chunk; its ack is the next Next
		}
		if len(d.head) < headBytes {
			d.head = append(d.head, p[:min(len(p), headBytes-len(d.head))]...)
		}
		dst, n := o.stdout, &o.nOut
		if id == 2 {
			dst, n = o.stderr, &o.nErr
		}
		if n.Add(int64(len(p))) == int64(len(p)) && id == 1 {
			failpoint.Hit(failpoint.ProcessMidStream) // the first stdout bytes
		}
		if dst != nil {
			if _, err := dst.Write(p); err != nil {
				d.err = err
				return d
			}
		}
	}
}

// sealRecording ends the recording with its end record: called by the
// process actor once the process's exit is journaled (the read loop has
// ended by then: the exit waits for its outputDone).
func (o *output) sealRecording() { o.settle(fateSeal) }

// settle decides the recording's fate (the first decision stands) and
// carries it out now if the read loop is over; else the loop does as it
// ends.
func (o *output) settle(want recFate) {
	if o == nil {
		return
	}
	o.endMu.Lock()
	ended := o.loopEnded
	if o.fate == fateUndecided {
		o.fate = want
	}
	fate := o.fate
	o.endMu.Unlock()
	switch {
	case !ended || fate != want:
	case fate == fateSeal:
		o.seal()
	default:
		o.suspend()
	}
}

func (o *output) seal() {
	if t, ok := o.att.(interface{ totals() (int64, int64, bool) }); ok && o.rec != nil {
		if so, se, ok := t.totals(); ok {
			o.rec.SetTotals(so, se)
		}
	}
	if err := o.rec.Close(); err != nil {
		o.log.Warn("the output recording is incomplete", "process", o.id, "err", err)
	}
}

// leaveRecording suspends the recording (no end record) when the process
// actor ends without journaling the exit (the journal failed, the runtime
// closes): now if the read loop is over, else when it ends. A later
// Resume continues the recording.
func (o *output) leaveRecording() { o.settle(fateSuspend) }

func (o *output) suspend() {
	if err := o.rec.Suspend(); err != nil {
		o.log.Warn("suspending the output recording failed", "process", o.id, "err", err)
	}
}

func (o *output) closePipes(err error) {
	for _, p := range []*pipe{o.stdout, o.stderr} {
		if p != nil {
			p.CloseWrite(err)
		}
	}
}

func (d outputDone) String() string {
	return fmt.Sprintf("stdout %d, stderr %d, err %v", d.stdout, d.stderr, d.err)
}
