package sandbox

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/internal/actors/process"
	"github.com/stockade/stockade/internal/failpoint"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// The recovery part: a recovering actor (Params.Recover) takes over a
// sandbox an earlier runtime left live instead of creating one. It journals
// the decision (decide.go) with what was observed, then carries it out
// through the same paths a live sandbox uses (the core's stop, exited,
// remove), so a crash midway leaves a journal the next recovery continues
// from; and it tells the recovery once the sandbox is at rest (Settled).
//
// What it adds to the core:
//   - its message: process.AdoptSettled (a recovering process settled);
//   - hooks: start (the actor started as a recovering one), adopted (a
//     recovering process ended or settled), settle (the sandbox is at rest,
//     or failed: the core calls it wherever a stop or removal ends);
//   - for the other parts: adoptParams and spawnAdopted (the warden's
//     processes once it is reattached), await and adopted (the settling
//     waits for the warden's reattach and for an unsettled rollback).
//
// It asks the warden part to retire strays and to reattach, the copy part
// to thaw a workload found frozen, the rollback part to settle what an
// earlier runtime left, and the egress part to start its loop.

// Recover is what a recovering sandbox actor starts from.
type Recover struct {
	State     lifecycle.Sandbox
	Processes []lifecycle.Process
	Observed  dockerio.Observed
	// StopProcesses stops the processes of a re-adopted sandbox that still
	// run, instead of re-adopting them detached.
	StopProcesses bool
	// Settled receives the decision and the outcome once the sandbox is at
	// rest (re-adopted, exited and kept, or removed), exactly once.
	Settled chan<- Settled
}

// Settled reports a recovery's outcome for one sandbox.
type Settled struct {
	ID       string
	Decision Decision
	Observed string
	Phase    lifecycle.Phase
	Err      error
	// Changed: the decision was journaled (it differs from the last
	// recovery's); a repeat of the last one is not.
	Changed bool
}

// recoveryPart is a recovering actor's decision and its settling.
type recoveryPart struct {
	a        *sandboxActor
	decision Decision
	observed string // what recovery saw, as journaled with the decision
	settled  bool
	changed  bool            // recovery journaled a new decision
	adopting map[string]bool // recovering processes (and keys) not yet settled
}

// handle takes the recovery part's message.
func (rc *recoveryPart) handle(_ actor.Context, msg any) bool {
	m, ok := msg.(process.AdoptSettled)
	if ok {
		rc.adopted(m.ID)
	}
	return ok
}

// start takes over the sandbox: the decision journaled (unless it repeats
// the last recovery's), the processes re-adopted, then the decision
// carried out.
func (rc *recoveryPart) start(ctx actor.Context) {
	a := rc.a
	rec := a.p.Recover
	a.state = rec.State
	a.state.ID = a.p.ID
	a.sb = DockerSandbox(a.deps.Config.Owner, a.state)
	dec, why := Decide(a.state, rec.Observed, a.deps.Config.Revision)
	rc.decision, rc.observed = dec, why
	// A warden this sandbox's next start would run beside (one never
	// journaled, or one given up) goes first.
	a.warden.retireAllFirst()
	if r := (lifecycle.Recovered{Decision: string(dec), Observed: why}); !lifecycle.Repeats(a.state.Recovered, r) {
		if err := a.record(r); err != nil {
			rc.settle(err)
			a.sys.Root.Stop(a.self)
			return
		}
		rc.changed = true
	}
	if a.state.Paused || rec.Observed.Paused {
		// A crash during a consistent Get left the workload frozen (or
		// someone froze it): thaw it, whatever the decision.
		a.copies.thawFound()
	}
	failpoint.Hit(failpoint.RecoveryDecided)
	rc.adoptProcesses(ctx, dec, rec.Processes)
	switch dec {
	case Readopt, RecordExit, FinishStop, Leave:
		// A rollback the runtime before left unsettled: the marker says
		// which workspace is there.
		a.rollback.recovered(dec == Readopt && !rec.Observed.Running)
	case RollBack, StopRemove, TearDown, FinishRemove:
		// Removed below, its workspace with it: a rollback left unsettled
		// needs nothing.
	}
	rc.carryOut(dec, why)
}

// adoptProcesses spawns the recovering actors of the processes not yet
// ended; a re-adopted sandbox's warden processes wait for its reattach.
func (rc *recoveryPart) adoptProcesses(ctx actor.Context, dec Decision, procs []lifecycle.Process) {
	a := rc.a
	for _, p := range procs {
		if p.Terminal() {
			continue
		}
		if !wardenProcess(p, a.state) {
			rc.spawnAdopted(ctx, p, rc.adoptParams(p))
			continue
		}
		if dec == Readopt && a.state.Warden != nil {
			a.warden.awaitReattach(p)
			continue
		}
		params := rc.adoptParams(p)
		params.WardenGone = spec.Errorf(spec.CodeStreamFailure, "sandbox", "the warden is lost or its sandbox is not re-adopted (%s)", dec)
		rc.spawnAdopted(ctx, p, params)
	}
	if dec == Readopt && a.state.Warden != nil && (a.warden.reattachAwaited() || a.state.Pooled()) {
		// A pooled sandbox's warden is reattached now too: a claim
		// rotates its secret over the live link, and waits for no exec.
		// Otherwise settled once the warden's processes are spawned (onReattached).
		// Without any, the warden is reattached at the first launch: a
		// recovery of many idle kept sandboxes makes no exec for them.
		rc.await(reattachKey)
		a.warden.reattach()
	}
}

// carryOut carries the decision out through the core's paths.
func (rc *recoveryPart) carryOut(dec Decision, why string) {
	a := rc.a
	rec := a.p.Recover
	switch dec {
	case RollBack:
		ev := lifecycle.SandboxExited{Reason: lifecycle.ReasonFailed, Error: spec.CodeCancelled, Message: "recovered: rolled back a sandbox whose create never finished"}
		if err := a.record(ev); err != nil {
			rc.settle(err)
			return
		}
		a.remove()
	case StopRemove:
		a.end.removeAfter = true
		a.stop(lifecycle.ReasonCancelled, spec.Errorf(spec.CodeCancelled, "sandbox", "recovered: the one-shot sandbox's caller is gone"))
	case TearDown:
		a.end.removeAfter = true
		a.stop(lifecycle.ReasonFailed, spec.Errorf(spec.CodeUnsupported, "sandbox", "recovered: %s", why))
	case Readopt:
		if !a.state.Adopted {
			if err := a.record(lifecycle.Adopted{}); err != nil {
				rc.settle(err)
				return
			}
		}
		if !a.state.Deadline.IsZero() {
			a.armTTL(a.state.Deadline)
		}
		a.egress.start(true)
		rc.adopted("")
	case RecordExit:
		a.end.removeAfter = a.state.Spec.Lifetime != spec.Kept || len(rec.Observed.Present) == 0
		a.workloadDead(rec.Observed)
	case FinishStop:
		a.end.removeAfter = a.state.Spec.Lifetime != spec.Kept || removalDecided(a.state)
		a.end.stopReason = a.state.Stopping
		a.finishStop()
	case FinishRemove:
		a.remove()
	case Leave:
		rc.settle(nil)
	}
}

// adoptParams are a recovering process actor's parameters.
func (rc *recoveryPart) adoptParams(p lifecycle.Process) process.Params {
	a := rc.a
	return process.Params{ID: p.ID, Sandbox: a.sb, Spec: p.Spec, Deadline: p.Deadline,
		Adopt: &p, Detach: rc.decision == Readopt && !a.p.Recover.StopProcesses, Launched: make(chan process.Launch, 1)}
}

// spawnAdopted spawns a recovering process actor.
func (rc *recoveryPart) spawnAdopted(ctx actor.Context, p lifecycle.Process, params process.Params) {
	a := rc.a
	a.procs.track(process.Tracked{ID: p.ID, Phase: p.Phase, Group: p.Group})
	pid, err := ctx.SpawnNamed(process.Props(a.deps, params), "process-"+p.ID)
	if err != nil {
		a.deps.Log.Warn("recovering a process failed", "sandbox", a.p.ID, "process", p.ID, "err", err)
		return
	}
	a.procs.add(p.ID, pid)
	if !a.copies.thawed() {
		a.sys.Root.Send(pid, process.Freeze{Frozen: true}) // recovery thaws it
	}
	rc.await(p.ID)
}

// await holds the settling of a re-adopted sandbox until key (a
// recovering process, the warden's reattach, a rollback's settling) is
// settled (adopted).
func (rc *recoveryPart) await(key string) {
	if rc.adopting == nil {
		rc.adopting = map[string]bool{}
	}
	rc.adopting[key] = true
}

// adopted notes a recovering process (or key) settled; a re-adopted
// sandbox is at rest once all of them are.
func (rc *recoveryPart) adopted(id string) {
	delete(rc.adopting, id)
	if rc.decision == Readopt && rc.a.state.Adopted && len(rc.adopting) == 0 {
		rc.settle(nil)
	}
}

// settle tells the recovery that this sandbox is at rest.
func (rc *recoveryPart) settle(err error) {
	a := rc.a
	if rc.settled || a.p.Recover == nil || a.p.Recover.Settled == nil {
		return
	}
	rc.settled = true
	a.p.Recover.Settled <- Settled{ID: a.p.ID, Decision: rc.decision, Observed: rc.observed, Phase: a.state.Phase, Err: err, Changed: rc.changed}
}
