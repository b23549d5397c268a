package process

import (
	"context"
	"fmt"
	"syscall"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/recorder"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/warden/link"
)

// Recovery of a warden's process (the recovery table of docs/design.md, warden rows):
// the sandbox reattached to its warden and read its process table; the
// process is
//   - listed: re-adopted WITH its streams, from the offset its recording
//     holds (the warden kept every unacknowledged byte), so the recording
//     ends complete; if it ended while the runtime was down its code is
//     the warden's;
//   - not listed, or the warden is gone (or of another version): its group
//     is killed through Docker and it ends lost.

// wardenResumed: the warden sends the process's output again from from,
// to be appended to rec.
type wardenResumed struct {
	proc *link.Proc
	err  error
	rec  *recorder.Recording
	from int64
}

// adopt settles a journaled warden process.
func (w *wardenTransport) adopt() {
	a := w.a
	e := a.p.Entry
	switch {
	case a.p.WardenGone != nil:
		w.adoptLost(fmt.Sprintf("the warden is gone: %v", a.p.WardenGone))
		return
	case e == nil:
		w.adoptLost("the warden does not know it")
		return
	}
	seen := fmt.Sprintf("warden: pid %d, pgid %d, running %v, output %d, acked %d", e.PID, e.PGID, e.Running, e.Output, e.Acked)
	if e.Exit != nil {
		seen += fmt.Sprintf(", exit code %d signal %d", e.Exit.Code, e.Exit.Signal)
	}
	if !a.decided("re-adopt with streams", seen) {
		return
	}
	if a.state.Phase == lifecycle.PhaseReserved {
		// Spawned, but started was never journaled: the warden's table
		// says it ran.
		if err := a.record(lifecycle.ProcessStarted{Group: e.PGID, PID: e.PID, ByWarden: true}); err != nil {
			a.abandonJournal(err)
			return
		}
	}
	if !a.state.Adopted || a.state.Detached != a.p.Detach {
		if err := a.record(lifecycle.Adopted{Detached: a.p.Detach}); err != nil {
			a.abandonJournal(err)
			return
		}
	}
	// The recording resumes where it stands; the warden sends again from
	// there. No consumer reads a re-adopted process (its output goes to
	// the recorder only: `stockade logs -f` follows it), so nothing holds
	// its window.
	var rec *recorder.Recording
	var off int64
	var err error
	if a.deps.Recorder != nil {
		rec, off, err = a.deps.Recorder.Resume(a.p.ID, a.p.Spec.Record)
	}
	if err != nil {
		a.deps.Log.Warn("the recording of a re-adopted process cannot be resumed; its output goes unrecorded", "process", a.p.ID, "err", err)
		rec, off = nil, int64(e.Acked)
	}
	from := uint64(off)
	if rec == nil || from < e.Acked {
		from = e.Acked // recorded less than the warden was told: those bytes are gone
	}
	if from > e.Output {
		a.suspendRecording(rec) // not complete: its exit is not journaled
		w.adoptLost(fmt.Sprintf("its recording holds %d bytes, the warden read only %d", from, e.Output))
		return
	}
	if rec != nil && uint64(off) < from {
		// The warden dropped bytes it had been told were recorded (a
		// crash cut their writes before they reached the disk): the gap
		// goes into the recording and the journal where it happens, not
		// spliced over.
		why := fmt.Sprintf("recovery: the recording held %d bytes, the warden had been told %d were recorded and holds only what follows", off, e.Acked)
		if _, err := rec.Gap(int64(from) - off); err != nil {
			a.deps.Log.Warn("recording an output gap failed", "process", a.p.ID, "err", err)
		}
		if err := a.record(lifecycle.OutputGap{From: off, To: int64(from), Why: why}); err != nil {
			a.suspendRecording(rec)
			a.abandonJournal(err)
			return
		}
	}
	link, entry := w.link, *e
	bg := a.bg
	go func() {
		rctx, cancel := context.WithTimeout(bg, a.deps.Config.DockerTimeout)
		defer cancel()
		p, err := link.Resume(rctx, entry, from)
		a.send(wardenResumed{proc: p, err: err, rec: rec, from: int64(from)})
	}()
}

func (w *wardenTransport) onResumed(ctx actor.Context, m wardenResumed) {
	a := w.a
	if a.done {
		if m.proc != nil {
			m.proc.Close()
		}
		a.suspendRecording(m.rec) // the runtime is closing: the next one resumes it
		return
	}
	if m.err != nil {
		a.suspendRecording(m.rec) // not complete: its exit is not journaled
		w.adoptLost(fmt.Sprintf("resuming its output failed: %v", m.err))
		return
	}
	p := m.proc
	w.proc = p
	a.exit.oomBase = a.state.OOMKills
	w.watchReap(p)
	a.streams.att = &wardenAttachment{p: p}
	out := a.newOutput(a.streams.att, m.rec)
	out.nOut.Store(m.from) // the split by stream comes with the exit
	if !a.spawnOutput(ctx, out) {
		return
	}
	switch {
	case a.p.Entry.Exit != nil || !a.p.Entry.Running:
		// It ended while the runtime was down: its code is the warden's.
	case a.state.Phase == lifecycle.PhaseStopping:
		a.signalGroup(syscall.SIGKILL, nil) // a stop was under way: its grace is over
	case !a.p.Detach:
		a.stop(lifecycle.ReasonCancelled, spec.Errorf(spec.CodeCancelled, "process", "recovered: process %s stopped by the recovery option", a.p.ID))
	}
	a.armDeadline()
	a.sys.Root.Send(a.parent, AdoptSettled{ID: a.p.ID})
}

// adoptLost ends a warden process recovery cannot re-adopt: its group (if
// journaled) is killed through a Docker exec, and it ends lost.
func (w *wardenTransport) adoptLost(why string) {
	a := w.a
	if !a.decided("lost", why) {
		return
	}
	a.stopping.reason = lifecycle.ReasonLost
	a.stopping.err = spec.Errorf(spec.CodeStreamFailure, "process", "recovered: process %s: %s", a.p.ID, why)
	a.exit.state = &dockerio.ExecState{Known: true, ExitCode: -1}
	w.killGroupByDocker()
	a.maybeFinish()
}

// suspendRecording suspends a re-adopted process's recording (nil: none)
// that no read loop took over; a later Resume continues it.
func (a *processActor) suspendRecording(rec *recorder.Recording) {
	if err := rec.Suspend(); err != nil {
		a.deps.Log.Warn("suspending the output recording failed", "process", a.p.ID, "err", err)
	}
}
