package process

import (
	"context"
	"syscall"
	"time"

	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// A process's end: when every piece of it is in (maybeFinish), what it
// died of (outcome, with the OOM killer named only when stockade and its
// caller sent no SIGKILL), and the exit journaled and handed out (finish,
// end).

// maybeFinish journals the exit once both the process's end and the
// output's end are known. A stopping process whose exec ended does not wait
// for a consumer that no longer reads: its streams are cut.
func (a *processActor) maybeFinish() {
	if a.done || a.exit.state == nil || a.tr.exitHeld() {
		return
	}
	if a.streams.out != nil && a.streams.outDone == nil {
		if a.stopping.reason == "" || a.streams.cutArmed {
			return // the consumer is still reading what the process wrote
		}
		// Stopping and the exec has ended: give the output a moment to
		// reach its end, then cut it for a consumer that no longer reads.
		a.streams.cutArmed = true
		a.all = append(a.all, time.AfterFunc(cutGrace, func() { a.send(cutStreams{}) }))
		return
	}
	code := -1
	if ex := a.exit.state; ex.Known && ex.Pid != 0 && !a.exit.codeUnknown {
		// Pid 0: the exec never started (its ExitCode reads 0 but means
		// nothing): no code is invented.
		code = ex.ExitCode
	}
	if a.oomSuspect(code) && a.exit.oom == nil {
		a.checkOOM()
		return
	}
	reason, err := a.outcome(code)
	a.finish(reason, code, err)
}

// oomSuspect: the process died of a SIGKILL that stockade did not send (nor
// its caller), and its OOM kill count at the start is known. Only then can
// the OOM killer be named.
func (a *processActor) oomSuspect(code int) bool {
	return code == 128+int(syscall.SIGKILL) && !a.stopping.killSent && !a.stopping.signalled && a.stopping.reason == "" && a.exit.oomBase >= 0
}

// checkOOM reads the sandbox's OOM kill count, off the mailbox.
func (a *processActor) checkOOM() {
	if a.exit.oomAsked {
		return
	}
	a.exit.oomAsked = true
	sb, bg := a.p.Sandbox, a.bg
	go func() {
		var n int64
		err := a.whileFrozen(bg, func(ctx context.Context) (err error) {
			n, err = a.engine.OOMKills(ctx, sb)
			return err
		})
		a.send(oomChecked{kills: n, err: err})
	}()
}

// outcome decides the exit reason from what was asked and what was seen.
func (a *processActor) outcome(code int) (lifecycle.Reason, error) {
	oom := a.exit.oom
	switch {
	case a.stopping.reason != "" && a.stopping.reason != lifecycle.ReasonSignaled:
		return a.stopping.reason, a.stopping.err
	case !a.exit.state.Known:
		return lifecycle.ReasonLost, spec.Errorf(spec.CodeEngine, "process", "the daemon no longer knows exec %s; its outcome is lost", a.state.ExecID)
	case oom != nil && oom.err == nil && oom.kills > a.exit.oomBase && a.oomSuspect(code):
		// The sandbox's OOM kill count rose during the process's life and
		// it died of a SIGKILL nobody of ours sent. With several processes
		// in the sandbox the attribution can be wrong (cgroup v1 names no
		// process): README says so.
		return lifecycle.ReasonOOM, nil
	case oom != nil && oom.err != nil && a.oomSuspect(code):
		a.deps.Log.Warn("could not read the OOM kill count; the SIGKILL stays unexplained", "process", a.p.ID, "err", oom.err)
	case a.stopping.reason == lifecycle.ReasonSignaled || a.stopping.signalled && code > 128:
		return lifecycle.ReasonSignaled, nil
	}
	var head []byte // an adopted process has no output to read
	if a.streams.outDone != nil {
		head = a.streams.outDone.head
	}
	if err := a.tr.startFailure(code, head); err != nil {
		return lifecycle.ReasonFailed, err
	}
	return lifecycle.ReasonExited, nil
}

// finish journals the exit, settles the recording, tells the transport,
// the waiters and the parent, and stops.
func (a *processActor) finish(reason lifecycle.Reason, code int, err error) {
	if a.done {
		return
	}
	ev := lifecycle.ProcessExited{Reason: reason, Error: spec.CodeOf(err)}
	if code >= 0 {
		c := code
		ev.ExitCode = &c
	}
	if err != nil {
		ev.Message = err.Error()
	}
	if d := a.streams.outDone; d != nil {
		ev.StdoutBytes, ev.StderrBytes = d.stdout, d.stderr
	}
	a.tr.exiting(&ev)
	if ev.Usage == nil && a.state.Group != 0 {
		// Started, and its transport knows no more than when: the wall
		// time as this runtime saw it.
		ev.Usage = &spec.ProcessUsage{Source: spec.UsageWall, Wall: max(a.deps.Now().Sub(a.started), 0)}
	}
	if rec := a.streams.stdin; rec != nil {
		if err := rec.Close(); err != nil {
			a.deps.Log.Warn("the process's stdin recording is incomplete", "process", a.p.ID, "err", err)
		}
	}
	if jerr := a.record(ev); jerr != nil {
		a.abandonJournal(jerr)
		return
	}
	a.streams.out.sealRecording() // the exit is journaled: the recording may say complete
	a.tr.exited()
	res := spec.Result{ExitCode: code, Reason: string(reason), Err: err, StdoutBytes: ev.StdoutBytes,
		StderrBytes: ev.StderrBytes, Started: a.started, Ended: a.state.At, Usage: ev.Usage}
	a.end(res)
}

func (a *processActor) end(res spec.Result) {
	a.done = true
	if !a.launched {
		err := res.Err
		if err == nil {
			err = spec.Errorf(spec.CodeExecFailed, "process", "process %s ended before it could be attached (exit %d)", a.p.ID, res.ExitCode)
		}
		a.answer(Launch{Err: err})
	}
	if h := a.streams.handle; h != nil {
		h.result = res
		close(h.done)
	}
	if a.abandoned {
		a.sys.Root.Send(a.parent, Abandoned{ID: a.p.ID, Err: res.Err})
	} else {
		a.sys.Root.Send(a.parent, Exited{ID: a.p.ID, Result: res})
	}
	a.sys.Root.Stop(a.self)
}
