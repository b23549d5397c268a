package process

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/internal/actors"
	"github.com/stockade/stockade/internal/failpoint"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// execTransport runs the process as a Docker exec (through dockerio):
// reserved is journaled before the exec is created, exec created {exec
// id} before the attach that starts it, started {group} once attached. Its
// end is learned from Docker: the exec_die event (the sandbox forwards it
// as ExecDied) says when, an inspect confirms (watchExit). A broken stream
// fails the sandbox closed. doubts.go holds what an attach gone wrong
// leaves to doubt.
type execTransport struct {
	a         *processActor
	attaching bool // the attach (which starts the process) is under way
	watch     execWatch
	doubts    execDoubts
}

// execWatch is the wait for the exec's end.
type execWatch struct {
	// watching: the process's end is awaited (its output ended, or a stop
	// or an adoption asked); confirming: an inspect is in flight, and
	// dirty: an exec_die came meanwhile, so ask again once it answers.
	watching, confirming, dirty bool
	diedCode                    *int // the exec_die event's exit code, once seen
	awaitedDie                  bool // the exec was unknown once and its exec_die awaited
	recheckGen                  int
	recheckDelay                time.Duration
}

// Messages the exec transport posts to its actor from its goroutines.
type (
	execCreated struct {
		id  string
		err error
	}
	attached struct {
		att dockerio.Attachment
		err error
	}
	exitSeen   struct{ state dockerio.ExecState }
	recheckDue struct{ gen int }
	adoptSeen  struct {
		state dockerio.ExecState
		err   error
	}
	groupRead struct {
		pgid int
		err  error
	}
)

var _ transport = (*execTransport)(nil)

func (x *execTransport) receive(ctx actor.Context, msg any) {
	a := x.a
	switch m := msg.(type) {
	case execCreated:
		x.onExecCreated(m)
	case attached:
		x.onAttached(ctx, m)
	case exitSeen:
		x.onExitSeen(m)
	case ExecDied:
		if m.ExecID == a.state.ExecID {
			code := m.ExitCode
			x.watch.diedCode = &code
			if x.watch.watching {
				x.confirmExit()
			}
		}
	case Recheck:
		if x.watch.watching {
			x.confirmExit()
		}
	case recheckDue:
		if m.gen == x.watch.recheckGen && x.watch.watching {
			x.confirmExit()
		}
	case adoptSeen:
		x.onAdoptSeen(m)
	case groupRead:
		x.onGroupRead(m)
	case startedGroupRead:
		x.onStartedGroupRead(m)
	case groupProbed:
		x.onGroupProbed(m)
	}
}

// launch creates the exec, off the mailbox.
func (x *execTransport) launch() {
	a := x.a
	sb, req, bg := a.p.Sandbox, dockerio.ExecRequest{ProcessID: a.p.ID, Spec: a.runSpec()}, a.bg
	go func() {
		ctx, cancel := context.WithTimeout(bg, a.deps.Config.DockerTimeout)
		defer cancel()
		id, err := a.engine.CreateExec(ctx, sb, req)
		a.send(execCreated{id: id, err: err})
	}()
}

func (x *execTransport) onExecCreated(m execCreated) {
	a := x.a
	if a.done {
		return
	}
	if m.err != nil {
		a.finish(lifecycle.ReasonFailed, -1, m.err)
		return
	}
	// Write-ahead: the exec id is durable before the attach that starts it.
	if err := a.record(lifecycle.ExecCreated{ExecID: m.id}); err != nil {
		a.abandonJournal(err)
		return
	}
	failpoint.Hit(failpoint.ProcessExecCreated)
	if a.stopping.reason != "" { // stopped (timeout, sandbox stop) before it ran
		a.finish(a.stopping.reason, -1, a.stopping.err)
		return
	}
	x.proceed()
}

// proceed attaches (which starts the process) once the exec is created
// and, for a gated process, the sandbox verified.
func (x *execTransport) proceed() {
	a := x.a
	if a.done || a.state.ExecID == "" || x.attaching { // the exec is not journaled yet
		return
	}
	if a.stopping.reason != "" { // stopped before it ran: nothing starts
		a.finish(a.stopping.reason, -1, a.stopping.err)
		return
	}
	if a.p.Gated && !a.verified {
		return
	}
	x.attaching = true
	id := a.state.ExecID
	sb, req := a.p.Sandbox, dockerio.ExecRequest{ProcessID: a.p.ID, Spec: a.runSpec()}
	bg := a.bg
	go func() {
		actx, cancel := context.WithTimeout(bg, a.deps.Config.DockerTimeout)
		defer cancel()
		att, err := a.engine.AttachExec(actx, sb, id, req)
		if err == nil && bg.Err() != nil {
			_ = att.Close() // the actor is gone: nobody would close it, nor hear of an error
			return
		}
		a.send(attached{att: att, err: err})
	}()
}

func (x *execTransport) onAttached(ctx actor.Context, m attached) {
	a := x.a
	if m.err == nil {
		a.running(ctx, m.att, lifecycle.ProcessStarted{})
		return
	}
	if a.done {
		return
	}
	// The attach may have started the process: learn its fate rather
	// than invent an exit code. A stop already asked keeps its reason.
	if a.stopping.reason == "" {
		a.stopping.reason, a.stopping.err = lifecycle.ReasonFailed, m.err
	}
	x.doubts.attachFailed = true
	x.awaitExit()
}

func (x *execTransport) signal(sig syscall.Signal, reply chan<- error) {
	x.a.signalByDocker(sig, reply)
}

func (x *execTransport) killed(int) {}

func (x *execTransport) resize(m Resize) { m.Reply <- x.a.notRunning() }

func (x *execTransport) closing(error) bool { return false }

// streamFailed: the daemon's stream cannot be trusted: fail closed.
func (x *execTransport) streamFailed(err error) {
	a := x.a
	a.fail(err)
	a.sys.Root.Send(a.parent, FailClosed{ID: a.p.ID, Err: err})
}

func (x *execTransport) exitHeld() bool { return false }

func (x *execTransport) startFailure(code int, head []byte) error {
	return dockerio.ExecFailure(code, head)
}

func (x *execTransport) exiting(ev *lifecycle.ProcessExited) {
	ev.Changes = &lifecycle.Changes{Untracked: "run by a Docker exec: only the warden tracks changes"}
}

func (x *execTransport) exited() {}

// awaitExit starts waiting, off the mailbox, for the exec's end. The
// output's end is not the process's end (a process may close its stdout and
// go on), so the end is learned from Docker: its exec_die event (forwarded
// by the sandbox as ExecDied) says when, an inspect confirms. One inspect at
// the start catches an exec that already ended; a slow recheck (1 s,
// doubling to 30 s) covers an event the daemon dropped. No polling loop.
func (x *execTransport) awaitExit() {
	if x.watch.watching || x.a.state.ExecID == "" {
		return
	}
	x.watch.watching = true
	x.confirmExit()
}

// confirmExit inspects the exec off the mailbox. A daemon that cannot
// answer is asked again (backing off to 5 s) until it can: daemon trouble
// is never taken for the process's end.
func (x *execTransport) confirmExit() {
	a := x.a
	if a.done {
		return
	}
	if x.watch.confirming {
		x.watch.dirty = true
		return
	}
	x.watch.confirming, x.watch.dirty = true, false
	id, ctx := a.state.ExecID, a.bg
	go func() {
		delay := 100 * time.Millisecond
		for {
			ictx, cancel := context.WithTimeout(ctx, a.deps.Config.DockerTimeout)
			st, err := a.engine.InspectExec(ictx, id)
			cancel()
			if err == nil {
				a.send(exitSeen{state: st})
				return
			}
			if ctx.Err() != nil {
				return
			}
			a.deps.Log.Warn("inspecting an exec failed; asking again", "process", a.p.ID, "exec", id, "err", err)
			if !actors.Sleep(ctx, delay) {
				return
			}
			delay = min(2*delay, 5*time.Second)
		}
	}()
}

func (x *execTransport) onExitSeen(m exitSeen) {
	a := x.a
	x.watch.confirming = false
	if a.done {
		return
	}
	switch {
	case m.state.Known && m.state.Running:
		if x.watch.dirty { // an exec_die arrived while the inspect was out
			x.confirmExit()
			return
		}
		if x.doubts.attachFailed && a.state.Phase == lifecycle.PhaseReserved {
			x.readStartedGroup() // it runs, unattached: end it (doubts.go)
			return
		}
		if x.doubts.attachFailed && a.state.Phase == lifecycle.PhaseStopping && a.stopping.killSent {
			a.signalGroup(syscall.SIGKILL, nil) // the kill may have failed: again
		}
		x.recheckBackoff()
		return
	case !m.state.Known && a.state.Phase != lifecycle.PhaseReserved && x.watch.diedCode != nil:
		// Docker forgets a container's execs when it exits, and any exec's
		// record minutes after it ends: the exec_die event's code (which an
		// image cannot forge: such labels are refused) is the answer.
		m.state = dockerio.ExecState{Known: true, ExitCode: *x.watch.diedCode, Pid: a.state.Group}
	case !m.state.Known && a.state.Phase != lifecycle.PhaseReserved && !x.watch.awaitedDie:
		// Forgotten before its exec_die reached us: wait a moment for the
		// event (or the next inspect) before the outcome is called lost.
		x.watch.awaitedDie = true
		x.armRecheck(time.Second)
		return
	}
	if x.doubts.attachFailed && a.state.Phase == lifecycle.PhaseReserved && m.state.Known && !m.state.Running && m.state.Pid != 0 &&
		m.state.ExitCode == 126 && !spec.IsCode(a.stopping.err, spec.CodeExecFailed) {
		// Ended 126 after an attach cut past the daemon's start: maybe a
		// phantom while it runs on. Its group decides (doubts.go).
		st := m.state
		x.doubts.endedUnattached = &st
		x.readStartedGroup()
		return
	}
	if x.doubt126(&m.state) {
		return
	}
	a.exit.state = &m.state
	a.maybeFinish()
}

// armRecheck inspects the exec again after d, unless an exec_die comes
// first.
func (x *execTransport) armRecheck(d time.Duration) {
	a := x.a
	x.watch.recheckGen++
	gen := x.watch.recheckGen
	if a.recheck != nil {
		a.recheck.Stop()
	}
	a.recheck = time.AfterFunc(d, func() { a.send(recheckDue{gen: gen}) })
}

// recheckBackoff inspects the exec again later, each time twice as late
// (1 s to 30 s): a process that runs on is watched ever more lazily.
func (x *execTransport) recheckBackoff() {
	x.watch.recheckDelay = min(max(2*x.watch.recheckDelay, time.Second), 30*time.Second)
	x.armRecheck(x.watch.recheckDelay)
}

// adopt settles an exec an earlier runtime left live, by docs/design.md's
// recovery table: a running exec is re-adopted detached (or stopped, by
// option); an exec journaled as created that runs has its group read back
// from the sandbox's tmpfs and is journaled started; an exec Docker no
// longer knows ends lost.
func (x *execTransport) adopt() {
	a := x.a
	if a.state.ExecID == "" {
		if a.decided("lost", "no exec was created") {
			a.finish(lifecycle.ReasonLost, -1, spec.Errorf(spec.CodeEngine, "process", "recovered: no exec was created for process %s", a.p.ID))
		}
		return
	}
	id, bg := a.state.ExecID, a.bg
	go func() {
		// A daemon hiccup is not the process's fate: retry with back-off.
		delay := 100 * time.Millisecond
		for attempt := 0; ; attempt++ {
			ctx, cancel := context.WithTimeout(bg, a.deps.Config.DockerTimeout)
			st, err := a.engine.InspectExec(ctx, id)
			cancel()
			if err == nil || spec.IsCode(err, spec.CodeNotFound) || bg.Err() != nil || attempt == 5 {
				a.send(adoptSeen{state: st, err: err})
				return
			}
			if !actors.Sleep(bg, delay) {
				return
			}
			delay *= 2
		}
	}()
}

func (x *execTransport) onAdoptSeen(m adoptSeen) {
	a := x.a
	if a.done {
		return
	}
	if m.err != nil && !spec.IsCode(m.err, spec.CodeNotFound) {
		// The daemon cannot say: the process may still run. It stays live
		// (never declared lost on a guess) and is watched until it can.
		if a.decided("unobservable: watching", m.err.Error()) {
			x.awaitExit()
			a.sys.Root.Send(a.parent, AdoptSettled{ID: a.p.ID})
		}
		return
	}
	st := m.state
	seen := fmt.Sprintf("exec %s: known %v, running %v, pid %d", a.state.ExecID, st.Known, st.Running, st.Pid)
	if st.Known && !st.Running && st.Pid != 0 {
		seen += fmt.Sprintf(", exit code %d", st.ExitCode)
	}
	switch {
	case m.err != nil || !st.Known:
		if a.decided("lost", seen) {
			a.finish(lifecycle.ReasonLost, -1, spec.Errorf(spec.CodeEngine, "process", "recovered: the daemon no longer knows exec %s", a.state.ExecID))
		}
	case !st.Running && st.Pid == 0:
		// Created but never started: ExitCode reads 0 and means nothing.
		if a.decided("lost: never started", seen) {
			a.finish(lifecycle.ReasonLost, -1, spec.Errorf(spec.CodeEngine, "process", "recovered: exec %s was created but never started", a.state.ExecID))
		}
	case !st.Running && st.ExitCode == 126 && st.Pid != 0 && a.state.Phase == lifecycle.PhaseReserved:
		// Started, its start never journaled, and a 126 that may be a
		// phantom (doubts.go): read its group back first, as for one that
		// runs; a group that is gone then shows in the probe.
		if !a.decided("doubt the 126: read group, then re-adopt", seen) {
			return
		}
		x.readAdoptedGroup()
	case !st.Running && st.ExitCode == 126 && a.state.Group > 1:
		// The earlier runtime's attach dropped with it: Docker's 126 may be
		// a phantom while the process runs on (doubts.go). Watch it.
		if a.decided("doubt the 126: watch", seen) {
			x.awaitExit()
			a.sys.Root.Send(a.parent, AdoptSettled{ID: a.p.ID})
		}
	case !st.Running:
		reason := lifecycle.ReasonExited
		if a.stopping.reason != "" {
			reason = a.stopping.reason
		}
		if a.decided("record exit", seen) {
			a.finish(reason, st.ExitCode, nil)
		}
	case a.state.Phase == lifecycle.PhaseReserved:
		if !a.decided("read group, then re-adopt", seen) {
			return
		}
		// Attached (so started) but started was never journaled: read the
		// group id back before anything signals it.
		x.readAdoptedGroup()
	default:
		decision := "re-adopt detached"
		if !a.p.Detach {
			decision = "stop"
		}
		if a.decided(decision, seen) {
			x.adoptRunning()
		}
	}
}

// readGroup reads the process's group back from the sandbox's tmpfs, off
// the mailbox; reply makes the message that brings the answer.
func (x *execTransport) readGroup(reply func(pgid int, err error) any) {
	a := x.a
	sb, pid, bg := a.p.Sandbox, a.p.ID, a.bg
	go func() {
		ctx, cancel := context.WithTimeout(bg, a.deps.Config.DockerTimeout)
		defer cancel()
		pgid, err := a.engine.ReadGroup(ctx, sb, pid)
		a.send(reply(pgid, err))
	}()
}

// readAdoptedGroup reads a recovered process's group (groupRead follows).
func (x *execTransport) readAdoptedGroup() {
	x.readGroup(func(pgid int, err error) any { return groupRead{pgid: pgid, err: err} })
}

func (x *execTransport) onGroupRead(m groupRead) {
	a := x.a
	if a.done {
		return
	}
	if m.err != nil {
		// Running, but its group cannot be known: it cannot be signalled.
		// Keep watching it; the sandbox's stop ends it.
		a.deps.Log.Warn("recovered process has no readable group", "process", a.p.ID, "err", m.err)
		x.awaitExit()
		a.sys.Root.Send(a.parent, AdoptSettled{ID: a.p.ID})
		return
	}
	if err := a.record(lifecycle.ProcessStarted{Group: m.pgid}); err != nil {
		a.abandonJournal(err)
		return
	}
	x.adoptRunning()
}

// adoptRunning re-adopts a running exec: detached, or stopped by option.
func (x *execTransport) adoptRunning() {
	a := x.a
	if !a.state.Adopted || a.state.Detached != a.p.Detach {
		if err := a.record(lifecycle.Adopted{Detached: a.p.Detach}); err != nil {
			a.abandonJournal(err)
			return
		}
	}
	switch {
	case a.state.Phase == lifecycle.PhaseStopping:
		// A stop was under way when the runtime died: its grace is over.
		a.signalGroup(syscall.SIGKILL, nil)
	case !a.p.Detach:
		a.stop(lifecycle.ReasonCancelled, spec.Errorf(spec.CodeCancelled, "process", "recovered: process %s stopped by the recovery option", a.p.ID))
	}
	a.armDeadline()
	x.awaitExit()
	a.sys.Root.Send(a.parent, AdoptSettled{ID: a.p.ID})
}
