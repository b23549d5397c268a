package sandbox

import (
	"syscall"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade/stockade/internal/actors"
	"github.com/stockade/stockade/internal/actors/process"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// The core's process actors: the sandbox is their parent. It spawns them
// (launch, and recovery's spawnAdopted), tracks what they report of their
// journaled phase, forwards what Docker's events say of them, and learns
// their end; the sandbox is exited only once every one has ended
// (maybeExited).

// ProcessHandle asks for a live process's handle (nil when it is not live
// in this sandbox). Reply must be buffered.
type ProcessHandle struct {
	ID    string
	Reply chan<- *process.Handle
}

// children are the sandbox's live process actors.
type children struct {
	live  map[string]*actor.PID // by process id
	byPID map[string]string     // actor id → process id
	// tracked is what the process actors reported of their journaled
	// phase and group, so a failed process actor can still be settled.
	tracked map[string]process.Tracked
	// abandoned: a process's end could not be journaled: the sandbox may
	// not be journaled exited over it (the next recovery settles both).
	abandoned bool
	// handles are the live processes' handles, as their actors made them;
	// asked are the callers waiting for one not made yet. Each is answered
	// by the handle, or nil at the process's end: an actor that stopped
	// before it saw the request answers nothing.
	handles map[string]*process.Handle
	asked   map[string][]chan<- *process.Handle
}

func newChildren() children {
	return children{live: map[string]*actor.PID{}, byPID: map[string]string{},
		handles: map[string]*process.Handle{}, asked: map[string][]chan<- *process.Handle{}}
}

// add enters a spawned process actor.
func (c *children) add(id string, pid *actor.PID) {
	c.live[id] = pid
	c.byPID[pid.GetId()] = id
}

// remove forgets a process actor that ended; whoever still waits for its
// handle is answered nil (not live).
func (c *children) remove(id string) {
	c.handleMade(id, nil)
	delete(c.handles, id)
	delete(c.tracked, id)
	if pid, ok := c.live[id]; ok {
		delete(c.byPID, pid.GetId())
		delete(c.live, id)
	}
}

// handleMade keeps a live process's handle and answers whoever waits for
// it, once each (their replies are buffered: the actor never blocks).
func (c *children) handleMade(id string, h *process.Handle) {
	if _, live := c.live[id]; live && h != nil {
		c.handles[id] = h
	}
	for _, r := range c.asked[id] {
		select {
		case r <- h:
		default:
		}
	}
	delete(c.asked, id)
}

// track notes what a process actor reported of its journaled phase.
func (c *children) track(t process.Tracked) {
	if c.tracked == nil {
		c.tracked = map[string]process.Tracked{}
	}
	c.tracked[t.ID] = t
}

// idOf is the process id of a live process actor.
func (c *children) idOf(pid *actor.PID) (string, bool) {
	id, ok := c.byPID[pid.GetId()]
	return id, ok
}

func (c *children) count() int { return len(c.live) }

// each calls f with every live process actor.
func (c *children) each(f func(pid *actor.PID)) {
	for _, pid := range c.live {
		f(pid)
	}
}

// tellProcesses sends msg to every live process actor.
func (a *sandboxActor) tellProcesses(msg any) {
	a.procs.each(func(pid *actor.PID) { a.sys.Root.Send(pid, msg) })
}

// fromProcess handles what the process actors (and Docker's events about
// them) report; false: msg is not theirs.
func (a *sandboxActor) fromProcess(ctx actor.Context, msg any) bool {
	switch m := msg.(type) {
	case ProcessHandle:
		pid, ok := a.procs.live[m.ID]
		switch h := a.procs.handles[m.ID]; {
		case !ok:
			m.Reply <- nil
		case h != nil:
			m.Reply <- h
		default:
			a.procs.asked[m.ID] = append(a.procs.asked[m.ID], m.Reply)
			a.sys.Root.Send(pid, process.GetHandle{})
		}
	case process.HandleMade:
		a.procs.handleMade(m.ID, m.Handle)
	case ExecDied:
		a.tellProcesses(m)
	case process.Tracked:
		a.procs.track(m)
		if m.Phase != lifecycle.PhaseReserved {
			a.copies.startSettled(ctx, m.ID)
		}
	case process.Exited:
		a.processGone(m.ID)
		a.recovery.adopted(m.ID)
		a.copies.startSettled(ctx, m.ID)
	case process.Abandoned:
		// Its outcome is not journaled: the sandbox may not be journaled
		// exited over it (the next recovery settles both).
		a.procs.abandoned = true
		a.processGone(m.ID)
		a.recovery.adopted(m.ID)
		a.copies.startSettled(ctx, m.ID)
	case actors.ChildFailed:
		if id, ok := a.procs.idOf(m.Child); ok {
			defer a.copies.startSettled(ctx, id)
		}
		a.processFailed(m)
	default:
		return false
	}
	return true
}

// processGone forgets a process actor that ended: the sandbox may now be
// exited, or a rollback go on.
func (a *sandboxActor) processGone(id string) {
	a.procs.remove(id)
	a.maybeExited()
	a.rollback.proceed()
}

// stopProcesses tells every live process its sandbox is going away.
func (a *sandboxActor) stopProcesses(cause error) {
	a.procs.each(func(pid *actor.PID) {
		a.sys.Root.Send(pid, process.Stop{Reason: lifecycle.ReasonSandboxStopped, Err: cause, Reply: make(chan error, 1)})
	})
}

// processFailed settles a process whose actor panicked (a bug of ours): its
// end is journaled — only if its journaled phase admits one — and its group
// killed if known, the stopping intent journaled before the kill. So the
// process fails, never the sandbox or the runtime. If the journal refuses,
// nothing is signalled and the process is left to the next recovery.
func (a *sandboxActor) processFailed(m actors.ChildFailed) {
	id, ok := a.procs.idOf(m.Child)
	if !ok {
		return
	}
	t := a.procs.tracked[id]
	err := spec.Errorf(spec.CodeInternal, "process", "process actor %s failed: %v", id, m.Reason)
	switch t.Phase {
	case lifecycle.PhaseStarted, lifecycle.PhaseStopping:
		if t.Phase == lifecycle.PhaseStarted {
			if _, jerr := a.deps.Record(journal.KindProcess, id, a.p.ID, lifecycle.ProcessStopping{Reason: lifecycle.ReasonFailed}); jerr != nil {
				a.procs.abandoned = true
				break
			}
		}
		if t.Group > 1 {
			sb, pgid := a.sb, t.Group
			go func() {
				ctx, cancel := a.deps.DockerContext()
				defer cancel()
				if err := a.engine.SignalGroup(ctx, sb, pgid, syscall.SIGKILL); err != nil && !spec.IsCode(err, spec.CodeNotFound) {
					a.deps.Log.Warn("killing a failed process's group failed", "sandbox", a.p.ID, "process", id, "err", err)
				}
			}()
		}
		a.recordFailed(id, err)
	case lifecycle.PhaseReserved:
		a.recordFailed(id, err)
	case lifecycle.PhaseNone: // never journaled: nothing to settle
	case lifecycle.PhaseExited: // its exit is journaled: nothing to settle
	case lifecycle.PhaseRemoving, lifecycle.PhaseRemoved, lifecycle.PhasePooled:
		// A sandbox's phases, never a process's.
	}
	a.processGone(id)
	a.recovery.adopted(id)
}

// recordFailed journals a failed process actor's process exited, failed.
func (a *sandboxActor) recordFailed(id string, err error) {
	ev := lifecycle.ProcessExited{Reason: lifecycle.ReasonFailed, Error: spec.CodeInternal, Message: err.Error()}
	if _, jerr := a.deps.Record(journal.KindProcess, id, a.p.ID, ev); jerr != nil {
		a.procs.abandoned = true
	}
}
