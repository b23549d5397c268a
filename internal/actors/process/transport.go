package process

import (
	"context"
	"syscall"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// transport is how a process runs and how its end is learned: a Docker
// exec (execTransport, exec.go and doubts.go) or the sandbox's warden over
// its link (wardenTransport, warden.go and warden_adopt.go). The actor
// keeps the lifecycle (what is journaled when, stop, kill, deadline,
// freeze, the recording); a transport starts the process and hands the
// actor its attachment (running), reports its end (exit.state, then
// maybeFinish) and carries signals, stdin's close and resizes.
//
// Its methods run on the actor's mailbox, with the actor's state; its slow
// calls run in goroutines that post their results back, and the actor
// hands those messages to receive.
type transport interface {
	// launch starts the process: its reservation is journaled.
	launch()
	// proceed: the start may go on (the exec is created, the sandbox
	// verified, or a stop came before the process ran).
	proceed()
	// adopt settles a process an earlier runtime left live (the state,
	// its stop, its start time are the journal's already).
	adopt()
	// receive handles a message that is not the lifecycle's.
	receive(ctx actor.Context, msg any)
	// signal signals the process group, off the mailbox; a reply, if
	// asked, comes back through a signalled message.
	signal(sig syscall.Signal, reply chan<- error)
	// killed: the stop's grace (gen) ran out and the group was KILLed.
	killed(gen int)
	// awaitExit: the process's end is awaited now (its output ended, or
	// a stop began).
	awaitExit()
	// resize sets a running TTY process's terminal size.
	resize(m Resize)
	// closing reports whether the output's error says the runtime is
	// letting go of the process (nothing is journaled then).
	closing(err error) bool
	// streamFailed handles an output stream that broke with err (not a
	// quota, a cancel or a panic of ours).
	streamFailed(err error)
	// exitHeld: the end is known but may not be journaled yet.
	exitHeld() bool
	// startFailure is the error of a command that could not start, told
	// by its exit code and its first output bytes; nil if it ran.
	startFailure(code int, head []byte) error
	// exiting completes the exit event before it is journaled; exited
	// follows once it is.
	exiting(ev *lifecycle.ProcessExited)
	exited()
}

// newTransport picks the process's transport: a warden's process is
// spawned (or was, for a recovering one) by its sandbox's warden; any
// other is a Docker exec.
func (a *processActor) newTransport() transport {
	if a.p.testTransport != nil {
		return a.p.testTransport(a)
	}
	viaWarden := a.p.Link != nil
	if ad := a.p.Adopt; ad != nil {
		viaWarden = ad.ByWarden || ad.ExecID == "" && (a.p.Link != nil || a.p.WardenGone != nil)
	}
	if viaWarden {
		return &wardenTransport{a: a, link: a.p.Link}
	}
	return &execTransport{a: a}
}

// signalByDocker signals the process group from a second exec, off the
// mailbox (the exec transport's way, and a warden's process's once its
// warden is gone).
func (a *processActor) signalByDocker(sig syscall.Signal, reply chan<- error) {
	pgid := a.group()
	if pgid <= 0 {
		if reply != nil {
			reply <- spec.Errorf(spec.CodeNotFound, "process", "process %s has no process group yet", a.p.ID)
		}
		return
	}
	sb, bg := a.p.Sandbox, a.bg
	go func() {
		err := a.whileFrozen(bg, func(ctx context.Context) error { return a.engine.SignalGroup(ctx, sb, pgid, sig) })
		if err != nil && reply == nil && !spec.IsCode(err, spec.CodeNotFound) {
			a.deps.Log.Warn("signalling a process group failed", "process", a.p.ID, "signal", sig, "err", err)
		}
		if reply != nil {
			a.send(signalled{reply: reply, err: err})
		}
	}()
}
