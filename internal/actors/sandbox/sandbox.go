package sandbox

import (
	"context"
	"errors"
	"io"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/internal/actors"
	"github.com/stockade/stockade/internal/actors/process"
	"github.com/stockade/stockade/internal/failpoint"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// Params is what a sandbox actor is spawned with.
type Params struct {
	ID       string
	Spec     spec.Sandbox
	Deadline time.Time
	// Created receives the outcome of the create, exactly once.
	Created chan<- error
	// Gone, if set, is called when the actor has stopped (removed, or given
	// up because the journal failed): requests to it are no longer answered.
	Gone func()
	// Recover, if set, makes this a recovering actor: it takes over a
	// sandbox an earlier runtime left live instead of creating one.
	Recover *Recover
	// Pool, if set, makes the sandbox for this warm pool: once started it
	// admits no process until a Claim hands it to a caller.
	Pool string
	// Unready, if set, is called once when a pooled sandbox (made for a
	// pool, or recovered as one) can no longer be claimed: it stops, its
	// workload died, or its warden is lost.
	Unready func()
	// Unanswered, if set, is called when the actor stops after its
	// sandbox was removed with asks still open (asks.go): each was then
	// answered with an internal error.
	Unanswered func(asks []string)
}

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

// Launch asks for a new process.
type Launch struct {
	ID    string
	Spec  spec.Process
	Reply chan<- process.Launch
}

// Stop asks the sandbox to stop (exited, resources kept). Reply gets the
// outcome once the sandbox is exited.
type Stop struct{ Reply chan<- error }

// Remove asks for every resource to be deleted (stopping first if needed).
type Remove struct{ Reply chan<- error }

// Inspect asks for a snapshot of the sandbox's state.
type Inspect struct{ Reply chan<- Snapshot }

// Put extracts a tar stream under /workspace/<Dir>. Ctx bounds the copy:
// once it ends, the caller's reader is no longer read.
type Put struct {
	Ctx   context.Context
	Dir   string
	Tar   io.Reader
	Reply chan<- error
}

// Get reads a tar stream of /workspace/<Path>. Ctx bounds the stream's
// whole life (a paused workload is unpaused when it ends or the stream is
// closed).
type Get struct {
	Ctx   context.Context
	Path  string
	Pause bool
	Reply chan<- GetResult
}

// GetResult answers Get.
type GetResult struct {
	Tar  io.ReadCloser
	Live bool
	Err  error
}

// ExecDied carries Docker's exec_die event of this sandbox's workload to
// its processes; the one whose exec it is confirms its end.
type ExecDied = process.ExecDied

// EventsResumed tells the sandbox that the runtime's Docker event stream
// broke and was subscribed again: events may have been missed, so every
// process whose end is awaited inspects its exec again.
type EventsResumed struct{}

// WorkloadDied tells the sandbox that Docker reported its workload
// container dead (a die event): the sandbox checks, and if so records its
// exit (with Docker's code and OOM flag) once its processes have ended.
type WorkloadDied struct{ ExitCode int }

// Snapshot is the sandbox's folded state and its live processes.
type Snapshot struct {
	State     lifecycle.Sandbox
	Processes []string
}

// engine is the part of the Docker seam a sandbox actor uses.
type engine interface {
	dockerio.Sandboxes
	dockerio.Files
	dockerio.Workspaces
	dockerio.Wardens
	dockerio.Egress
	InspectSandbox(ctx context.Context, sb dockerio.Sandbox) (dockerio.Observed, error)
	SignalGroup(ctx context.Context, sb dockerio.Sandbox, pgid int, sig syscall.Signal) error
}

// Props returns the props of a sandbox actor.
func Props(d *actors.Deps, p Params) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &sandboxActor{deps: d, engine: d.Engine, p: p, procs: newChildren()}
	}, actor.WithSupervisor(actors.FailureStrategy()))
}

type (
	createdMsg struct {
		sb  dockerio.Sandbox
		err error
	}
	startedMsg  struct{ err error }
	verifiedMsg struct{ err error }
	stoppedMsg  struct {
		exit dockerio.ContainerExit
		err  error
	}
	removedMsg struct{ err error }
	ttlMsg     struct{}
	deadSeen   struct {
		obs dockerio.Observed
		err error
	}
)

type sandboxActor struct {
	deps *actors.Deps
	// engine is deps.Engine seen through the roles a sandbox uses: its
	// container's life, its inventory at reconcile, its files, its warden,
	// its egress, and its processes' groups at a stop (not exec itself:
	// that is the process actor's).
	engine engine
	p      Params
	self   *actor.PID
	sys    *actor.ActorSystem
	state  lifecycle.Sandbox
	sb     dockerio.Sandbox

	procs children // its process actors (processes.go)

	end      ending // where its stop and removal stand
	ttl      *time.Timer
	decision Decision
	observed string // what recovery saw, as journaled with the decision
	settled  bool
	changed  bool            // recovery journaled a new decision
	adopting map[string]bool // recovering processes not yet settled

	// A consistent Get freezes the workload (see pause.go): pause is where
	// the freeze stands, pauseHolds counts the open consistent copies,
	// pauseWait the ones waiting for the freeze, heldLaunches the launches
	// waiting for the thaw.
	pause        pauseState
	starting     map[string]bool // launched processes not yet past their start
	pauseHolds   int
	pauseWait    []Get
	heldLaunches []Launch

	// claiming: a claim is journaled and its caller not yet answered
	// (the warden's rekey, the rules): no work is admitted meanwhile.
	// unreadyTold: Params.Unready was called.
	claiming    bool
	unreadyTold bool

	rb *rollbackState // a rollback under way (rollback.go)
	// rbHeld: a rollback waiting for a consistent copy's thaw (the
	// rbHeldN'th held).
	rbHeld  *Rollback
	rbHeldN int
	// rbStopped: recovery found the workload stopped by an unsettled
	// rollback; it is started again once the rollback is settled.
	rbStopped bool
	// stopAfter: a stop asked while a rollback held the workload stopped
	// (workloadHeld), made once it runs again.
	stopAfter *deferredStop

	asks ledger // what was asked and is not answered yet (asks.go)

	w wardenState // the sandbox's warden (warden.go)
	e egressState // an allowlist sandbox's proxy link (egress.go)
}

// ending is where the sandbox's end stands: the stop and the removal asked,
// their Docker calls out, and what Docker reported.
type ending struct {
	createErr     error // a failed create, answered once rolled back
	stopReason    lifecycle.Reason
	stopErr       error
	stopWaiters   []chan<- error
	removeWaiters []chan<- error
	removeAfter   bool
	pendingStop   bool // a stop asked while the create was in flight
	downExit      *dockerio.ContainerExit
	removing      bool
	// exitDead: the workload died on its own (found so by recovery): the
	// sandbox is exited without a stopping intent once processes settle.
	exitDead     bool
	stopInFlight bool
}

func (a *sandboxActor) send(msg any) { a.sys.Root.Send(a.self, msg) }

// Handle names a journaled sandbox's Docker resources: what its folded
// state knows of them (the ids once created; else only the owner, id and
// spec, by which its resources are labelled and named).
func Handle(owner string, s lifecycle.Sandbox) dockerio.Sandbox {
	h := dockerio.Sandbox{Owner: owner, ID: s.ID, Spec: s.Spec, Revision: s.Revision}
	if c := s.Created; c != nil {
		h.Workload, h.Export, h.Volume, h.Network = c.Workload, c.Export, c.Volume, c.Network
		h.Egress, h.Outside, h.Proxy = c.Egress, c.Outside, c.Proxy
	}
	h.RulesVersion = s.RulesVersion
	return h
}

// record journals ev and folds it (actors.RecordFolded: an event the fold
// refuses is never journaled; a stream that moved on is caught up with).
func (a *sandboxActor) record(ev lifecycle.Event) error {
	next, _, err := actors.RecordFolded(a.deps, journal.KindSandbox, a.p.ID, "", a.state, sandboxSeq, lifecycle.ApplySandbox, ev)
	a.state = next
	a.checkPooled(ev)
	if err != nil {
		var illegal *lifecycle.IllegalTransition
		if errors.As(err, &illegal) {
			// Nothing was journaled: the sandbox actor stays panic-free (a
			// restart would lose its children); the operation fails, loudly.
			a.deps.Log.Error("an event the fold refuses was not journaled", "sandbox", a.p.ID, "event", ev.Type(), "err", err)
		}
	}
	return err
}

func sandboxSeq(s lifecycle.Sandbox) uint64 { return s.Seq }

func (a *sandboxActor) goDocker(f func(ctx context.Context) any) {
	go func() {
		ctx, cancel := a.deps.DockerContext()
		defer cancel()
		a.send(f(ctx))
	}()
}

func (a *sandboxActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.self, a.sys = ctx.Self(), ctx.ActorSystem()
		a.state.ID = a.p.ID
		if a.p.Recover != nil {
			a.recover(ctx)
			return
		}
		a.create()
	case createdMsg:
		a.onCreated(m)
	case startedMsg:
		a.onStarted(m)
	case Launch:
		a.openLaunch(m)
		a.launch(ctx, m)
	case wardenUp:
		a.onWardenUp(ctx, m)
	case wardenDown:
		a.onWardenDown(m)
	case SetEgress:
		a.setEgress(m)
	case Claim:
		a.claim(m)
	case claimRekeyed:
		a.onClaimRekeyed(m)
	case claimDone:
		a.onClaimDone(m)
	case egressUp:
		a.onEgressUp(m)
	case egressDown:
		a.onEgressDown(m)
	case egressGaveUp:
		a.onEgressGaveUp(m)
	case egressFailed:
		a.onEgressFailed(m)
	case egressReplaced:
		a.onEgressReplaced(m)
	case egressApplied:
		a.onEgressApplied(m)
	case reattached:
		a.onReattached(ctx, m)
	case process.WardenUnanswered:
		a.probeWarden(m)
	case wardenProbed:
		a.onWardenProbed(ctx, m)
	case verifiedMsg:
		a.onVerified(m)
	case Stop:
		a.end.stopWaiters = append(a.end.stopWaiters, m.Reply)
		a.stop(lifecycle.ReasonStopped, nil)
	case Remove:
		a.end.removeWaiters = append(a.end.removeWaiters, m.Reply)
		a.remove()
	case Inspect:
		snap := Snapshot{State: a.state}
		for id := range a.procs.live {
			snap.Processes = append(snap.Processes, id)
		}
		m.Reply <- snap
	case Rollback:
		a.onRollback(m)
	case rollbackThawLate:
		a.onRollbackThawLate(m)
	case rollbackDone:
		a.onRollbackDone(m)
	case rollbackSettled:
		a.onRollbackSettled(m)
	case rollbackCleaned:
		a.onRollbackCleaned()
	case retrySettle:
		a.settleRollback()
	case RecordCheckpoint:
		a.onRecordCheckpoint(m)
	case Put:
		a.put(m)
	case Get:
		a.get(ctx, m)
	case pausedMsg:
		a.onPaused(ctx, m)
	case pauseReleased:
		a.pauseHolds--
		a.maybeThaw()
	case unpausedMsg:
		a.onUnpaused(ctx, m)
	case retryThaw:
		a.maybeThaw()
	case stoppedMsg:
		a.onStopped(m)
	case removedMsg:
		a.onRemoved(m)
	case ttlMsg:
		a.stop(lifecycle.ReasonTimeout, spec.Errorf(spec.CodeTimeout, "sandbox", "sandbox %s outlived its TTL", a.p.ID))
	case process.AdoptSettled:
		a.adoptedOne(m.ID)
	case WorkloadDied:
		if a.workloadHeld() {
			break // the rollback stopped it, and starts it again
		}
		if a.state.Phase == lifecycle.PhaseStarted && a.end.stopReason == "" && !a.end.exitDead {
			sb := a.sb
			a.goDocker(func(ctx context.Context) any {
				obs, err := a.engine.InspectSandbox(ctx, sb)
				return deadSeen{obs: obs, err: err}
			})
		}
	case deadSeen:
		a.onDeadSeen(m)
	case EventsResumed:
		a.tellProcesses(process.Recheck{})
		if a.state.Phase == lifecycle.PhaseStarted {
			a.send(WorkloadDied{ExitCode: -1}) // inspected before anything is concluded
		}
	case process.FailClosed:
		a.stop(lifecycle.ReasonFailed, m.Err)
	case *actor.Stopping:
		if a.ttl != nil {
			a.ttl.Stop()
		}
		a.closeWarden()
		a.stopEgress()
		a.answerOpenAsks()
	case *actor.Stopped:
		a.settle(spec.Errorf(spec.CodeInternal, "sandbox", "sandbox %s's actor stopped before recovery settled it", a.p.ID))
		if a.p.Gone != nil {
			a.p.Gone()
		}
	default:
		a.fromProcess(ctx, m)
	}
}

// create journals the reservation, then makes the resources off the mailbox.
func (a *sandboxActor) create() {
	ev := lifecycle.SandboxReserved{Owner: a.deps.Config.Owner, Spec: a.p.Spec, Profile: a.deps.Config.Profile,
		Revision: a.deps.Config.Revision, Deadline: a.p.Deadline, Pool: a.p.Pool}
	if err := a.record(ev); err != nil {
		a.p.Created <- err
		a.sys.Root.Stop(a.self)
		return
	}
	failpoint.Hit(failpoint.SandboxReserved)
	req := dockerio.SandboxRequest{Owner: a.deps.Config.Owner, ID: a.p.ID, Spec: a.p.Spec}
	a.goDocker(func(ctx context.Context) any {
		sb, err := a.engine.CreateSandbox(ctx, req)
		return createdMsg{sb: sb, err: err}
	})
}

func (a *sandboxActor) onCreated(m createdMsg) {
	if m.err != nil {
		a.createFailed(m.err)
		return
	}
	a.sb = m.sb
	failpoint.Hit(failpoint.SandboxCreateCall)
	if err := a.record(lifecycle.SandboxCreated{Workload: m.sb.Workload, Export: m.sb.Export, Volume: m.sb.Volume, Network: m.sb.Network,
		Egress: m.sb.Egress, Outside: m.sb.Outside, Proxy: m.sb.Proxy}); err != nil {
		a.p.Created <- err
		a.sys.Root.Stop(a.self) // the reservation stays live: recovery rolls it back
		return
	}
	failpoint.Hit(failpoint.SandboxCreated)
	sb := a.sb
	a.goDocker(func(ctx context.Context) any { return startedMsg{err: a.engine.StartSandbox(ctx, sb)} })
}

func (a *sandboxActor) onStarted(m startedMsg) {
	if m.err != nil {
		a.createFailed(m.err)
		return
	}
	failpoint.Hit(failpoint.SandboxStartCall)
	if err := a.record(lifecycle.SandboxStarted{}); err != nil {
		a.p.Created <- err
		a.sys.Root.Stop(a.self)
		return
	}
	a.startEgress(false)
	if a.deps.Config.Warden {
		// The create answers once the warden is up: the first process
		// does not wait for it, and a warden that cannot start fails the
		// create (rolled back) rather than every later launch.
		a.w.creating = true
		a.startWarden(false)
		return
	}
	a.createdDone()
}

// createdDone answers a create whose sandbox runs.
func (a *sandboxActor) createdDone() {
	if !a.p.Deadline.IsZero() {
		a.ttl = time.AfterFunc(time.Until(a.p.Deadline), func() { a.send(ttlMsg{}) })
	}
	if a.p.Pool != "" {
		failpoint.Hit(failpoint.PoolFilled)
	}
	a.p.Created <- nil
	if a.end.pendingStop {
		a.stop(lifecycle.ReasonStopped, nil)
	}
}

// createFailed records the failed create (exited, failed) and rolls back
// whatever exists through the journaled removal (removing, then removed).
// The caller hears of the failure only once the rollback is done: nothing
// is left behind, or the error says what could not go.
func (a *sandboxActor) createFailed(cause error) {
	ev := lifecycle.SandboxExited{Reason: lifecycle.ReasonFailed, Error: spec.CodeOf(cause), Message: cause.Error()}
	if err := a.record(ev); err != nil {
		a.p.Created <- errors.Join(cause, err)
		a.sys.Root.Stop(a.self)
		return
	}
	a.end.createErr = cause
	a.answerStop(nil)
	a.remove()
}

// launch admits a process. The sandbox asserts it is still active (the
// workload container running, with the same identity and revision) before
// the process runs — concurrently with the process's reservation and exec
// create, which start nothing: the process actor holds its attach (the call
// that starts it) until the verification has passed.
func (a *sandboxActor) launch(ctx actor.Context, m Launch) {
	if (a.pause != thawed || len(a.pauseWait) > 0) && a.state.Admits() && a.end.stopReason == "" {
		// Docker refuses execs into a paused container: launches wait for
		// the thaw (and, once a freeze is asked, for it to come and go).
		a.heldLaunches = append(a.heldLaunches, m)
		return
	}
	if err := a.pooledErr(); err != nil {
		a.answerLaunch(m, process.Launch{Err: err})
		return
	}
	if !a.state.Admits() || a.end.stopReason != "" || a.rb != nil {
		a.answerLaunch(m, process.Launch{Err: spec.Errorf(spec.CodeAdmissionClosed, "sandbox", "sandbox %s is %s and admits no process", a.p.ID, a.phaseName())})
		return
	}
	// The sandbox's env and dir (set at create or at a pool's claim) go
	// before the process's own, and the whole is judged again: together
	// they may pass a bound neither passes alone.
	m.Spec = a.state.Spec.ProcessDefaults(m.Spec)
	if err := m.Spec.Validate(); err != nil {
		a.answerLaunch(m, process.Launch{Err: err})
		return
	}
	if a.wardenHold(m) {
		return
	}
	var deadline time.Time
	if m.Spec.Timeout > 0 {
		deadline = a.deps.Now().Add(m.Spec.Timeout)
	}
	// With a warden, its live link stands for the active check: the link
	// was made after the workload was verified, and lives only while that
	// same container runs (an exec dies with its container).
	link := a.w.link
	props := process.Props(a.deps, process.Params{ID: m.ID, Sandbox: a.sb, Spec: m.Spec, Deadline: deadline, Launched: m.Reply, Gated: link == nil, Link: link})
	pid, err := ctx.SpawnNamed(props, "process-"+m.ID)
	if err != nil {
		a.answerLaunch(m, process.Launch{Err: spec.Wrap(spec.CodeConflict, "sandbox", err, "spawning process %s", m.ID)})
		return
	}
	a.handedOn(m)
	a.procs.add(m.ID, pid)
	if a.starting == nil {
		a.starting = map[string]bool{}
	}
	a.starting[m.ID] = true
	if link != nil {
		return
	}
	sb, sys := a.sb, a.sys
	a.goDocker(func(ctx context.Context) any {
		err := a.engine.VerifySandbox(ctx, sb)
		sys.Root.Send(pid, process.Verified{Err: err})
		return verifiedMsg{err: err}
	})
}

func (a *sandboxActor) phaseName() string {
	if a.end.stopReason != "" && a.state.Phase == lifecycle.PhaseStarted {
		return "stopping"
	}
	if rb := a.state.RollingBack; rb != nil {
		return "rolling back to " + rb.Checkpoint
	}
	if a.rb != nil {
		return "finishing a rollback"
	}
	return string(a.state.Phase)
}

// onVerified fails the sandbox closed when it is no longer the sandbox we
// made (the process that asked has been told by the verification itself).
func (a *sandboxActor) onVerified(m verifiedMsg) {
	if spec.IsCode(m.err, spec.CodeUnsupported) || spec.IsCode(m.err, spec.CodeConflict) {
		a.stop(lifecycle.ReasonFailed, m.err)
	}
}

// stop closes admission (the stopping intent), stops every process with
// reason sandbox_stopped and the workload container.
func (a *sandboxActor) stop(reason lifecycle.Reason, cause error) {
	switch a.state.Phase {
	case lifecycle.PhaseReserved:
		a.end.pendingStop = true
		return
	case lifecycle.PhaseStarted:
		if a.end.exitDead {
			return // the workload died: its exit is being recorded as Docker reported it
		}
		if a.workloadHeld() {
			// The rollback has the workload stopped and starts it again:
			// the stop goes on once it is done (a stop now would be
			// undone by that start).
			if a.stopAfter == nil {
				a.stopAfter = &deferredStop{reason: reason, cause: cause}
			}
			return
		}
	case lifecycle.PhaseStopping:
		if !a.end.stopInFlight && !a.end.exitDead {
			a.finishStop() // the last stop call failed: try again
		}
		return
	default: // exited, removing, removed: nothing runs
		a.answerStop(nil)
		return
	}
	if err := a.record(lifecycle.SandboxStopping{Reason: reason}); err != nil {
		a.answerStop(err)
		return
	}
	a.end.stopReason, a.end.stopErr = reason, cause
	a.stopEgress()
	failpoint.Hit(failpoint.SandboxStopping)
	a.finishStop()
}

func (a *sandboxActor) onStopped(m stoppedMsg) {
	a.end.stopInFlight = false
	if a.state.Phase != lifecycle.PhaseStopping {
		return // a late answer to a retried stop: the sandbox has moved on
	}
	if m.err != nil {
		a.deps.Log.Warn("stopping the workload failed", "sandbox", a.p.ID, "err", m.err)
		a.answerStop(m.err) // stays stopping: a later Stop or recovery retries
		a.settle(m.err)
		return
	}
	a.end.downExit = &m.exit
	failpoint.Hit(failpoint.SandboxStopCall)
	a.maybeExited()
}

// maybeExited journals exited once the workload is down and every process is
// terminal.
func (a *sandboxActor) maybeExited() {
	stopping := a.state.Phase == lifecycle.PhaseStopping || a.end.exitDead && a.state.Phase == lifecycle.PhaseStarted
	if !stopping || a.end.downExit == nil || a.procs.count() > 0 {
		return
	}
	if a.procs.abandoned {
		err := spec.Errorf(spec.CodeJournal, "sandbox", "sandbox %s: a process's end could not be journaled; the sandbox is left stopping for recovery", a.p.ID)
		a.answerStop(err)
		return
	}
	ev := lifecycle.SandboxExited{Reason: a.end.stopReason, OOM: a.end.downExit.OOMKilled, Error: spec.CodeOf(a.end.stopErr)}
	if code := a.end.downExit.ExitCode; code >= 0 { // -1: Docker reported none
		ev.ExitCode = &code
	}
	if a.end.stopErr != nil {
		ev.Message = a.end.stopErr.Error()
	}
	if err := a.record(ev); err != nil {
		a.answerStop(err)
		return
	}
	failpoint.Hit(failpoint.SandboxExited)
	a.answerStop(nil)
	if a.end.removeAfter {
		a.remove()
		return
	}
	a.settle(nil)
}

func (a *sandboxActor) answerStop(err error) {
	for _, w := range a.end.stopWaiters {
		w <- err
	}
	a.end.stopWaiters = nil
	if err != nil && a.end.removeAfter {
		a.answerRemove(err)
	}
	if err != nil {
		a.settle(err)
	}
}

func (a *sandboxActor) remove() {
	switch a.state.Phase {
	case lifecycle.PhaseReserved, lifecycle.PhaseStarted, lifecycle.PhaseStopping:
		a.end.removeAfter = true
		a.stop(lifecycle.ReasonStopped, nil)
		return
	case lifecycle.PhaseRemoved:
		a.answerRemove(nil)
		return
	case lifecycle.PhaseNone, lifecycle.PhaseExited, lifecycle.PhaseRemoving, lifecycle.PhasePooled:
		// Nothing runs: removed below (once: a removal under way is not
		// started again). PhasePooled is only shown, never a fold's phase.
	}
	if a.end.removing {
		return
	}
	if err := a.record(lifecycle.SandboxRemoving{}); err != nil {
		a.answerRemove(err)
		return
	}
	a.end.removing = true
	failpoint.Hit(failpoint.SandboxRemoving)
	sb := a.sb
	if sb.ID == "" { // the create failed before it returned a handle
		sb = Handle(a.deps.Config.Owner, a.state)
	}
	a.stopEgress()
	loopDone := a.e.done
	a.goDocker(func(ctx context.Context) any {
		// An egress loop making a new egress container must not race the
		// removal's listing of the sandbox's resources.
		if loopDone != nil {
			select {
			case <-loopDone:
			case <-ctx.Done():
			}
		}
		return removedMsg{err: a.engine.RemoveSandbox(ctx, sb)}
	})
}

func (a *sandboxActor) onRemoved(m removedMsg) {
	a.end.removing = false
	if m.err != nil {
		a.answerRemove(m.err) // stays removing: Remove again or recovery finishes it
		a.settle(m.err)
		return
	}
	failpoint.Hit(failpoint.SandboxRemoveCall)
	if err := a.record(lifecycle.SandboxRemoved{}); err != nil {
		a.answerRemove(err)
		a.settle(err)
		return
	}
	a.answerRemove(nil)
	a.settle(nil)
	a.sys.Root.Stop(a.self)
}

func (a *sandboxActor) answerRemove(err error) {
	for _, w := range a.end.removeWaiters {
		w <- err
	}
	a.end.removeWaiters = nil
	if a.end.createErr != nil { // a failed create's rollback ended
		if err != nil {
			err = spec.Wrap(spec.CodeOf(err), "sandbox", err, "rolling back sandbox %s left resources behind; the next Open removes them", a.p.ID)
		}
		a.p.Created <- errors.Join(a.end.createErr, err)
		a.end.createErr = nil
	}
	if err != nil {
		a.settle(err)
	}
}

func (a *sandboxActor) put(m Put) {
	if a.sb.ID == "" || a.state.Phase == lifecycle.PhaseRemoving || a.state.Phase == lifecycle.PhaseRemoved {
		m.Reply <- spec.Errorf(spec.CodeNotFound, "sandbox", "sandbox %s has no workspace (%s)", a.p.ID, a.state.Phase)
		return
	}
	if err := a.pooledErr(); err != nil {
		m.Reply <- err
		return
	}
	if err := a.rollingBackErr(); err != nil {
		m.Reply <- err // a put beside the exchange would land half in each tree
		return
	}
	sb := a.sb
	go func() { m.Reply <- a.engine.PutArchive(m.Ctx, sb, m.Dir, m.Tar) }()
}

// recover takes over a sandbox an earlier runtime left live: it journals the
// decision with what was observed, then carries it out through the same
// paths a live sandbox uses (stop, exited, remove), so a crash midway leaves
// a journal the next recovery continues from.
func (a *sandboxActor) recover(ctx actor.Context) {
	rec := a.p.Recover
	a.state = rec.State
	a.state.ID = a.p.ID
	a.sb = Handle(a.deps.Config.Owner, a.state)
	dec, why := Decide(a.state, rec.Observed, a.deps.Config.Revision)
	a.decision, a.observed = dec, why
	// A warden this sandbox's next start would run beside (one never
	// journaled, or one given up) goes first.
	a.w.retireAll = a.deps.Config.Warden
	if r := (lifecycle.Recovered{Decision: string(dec), Observed: why}); !lifecycle.Repeats(a.state.Recovered, r) {
		if err := a.record(r); err != nil {
			a.settle(err)
			a.sys.Root.Stop(a.self)
			return
		}
		a.changed = true
	}
	if a.state.Paused || rec.Observed.Paused {
		// A crash during a consistent Get left the workload frozen (or
		// someone froze it): thaw it, whatever the decision.
		a.pause = frozen
		a.maybeThaw()
	}
	failpoint.Hit(failpoint.RecoveryDecided)
	for _, p := range rec.Processes {
		if p.Terminal() {
			continue
		}
		if !wardenProcess(p, a.state) {
			a.spawnAdopted(ctx, p, a.adoptParams(p))
			continue
		}
		if dec == Readopt && a.state.Warden != nil {
			a.w.pendingAdopt = append(a.w.pendingAdopt, p)
			continue
		}
		params := a.adoptParams(p)
		params.WardenGone = spec.Errorf(spec.CodeStreamFailure, "sandbox", "the warden is lost or its sandbox is not re-adopted (%s)", dec)
		a.spawnAdopted(ctx, p, params)
	}
	if dec == Readopt && a.state.Warden != nil && (len(a.w.pendingAdopt) > 0 || a.state.Pooled()) {
		// A pooled sandbox's warden is reattached now too: a claim
		// rotates its secret over the live link, and waits for no exec.
		// Otherwise settled once the warden's processes are spawned (onReattached).
		// Without any, the warden is reattached at the first launch: a
		// recovery of many idle kept sandboxes makes no exec for them.
		if a.adopting == nil {
			a.adopting = map[string]bool{}
		}
		a.adopting[reattachKey] = true
		a.reattach()
	}
	switch dec {
	case Readopt, RecordExit, FinishStop, Leave:
		// A rollback the runtime before left unsettled: the marker says
		// which workspace is there.
		a.rbStopped = dec == Readopt && !rec.Observed.Running
		a.settleRollback()
	case RollBack, StopRemove, TearDown, FinishRemove:
		// Removed below, its workspace with it: a rollback left unsettled
		// needs nothing.
	}
	switch dec {
	case RollBack:
		ev := lifecycle.SandboxExited{Reason: lifecycle.ReasonFailed, Error: spec.CodeCancelled, Message: "recovered: rolled back a sandbox whose create never finished"}
		if err := a.record(ev); err != nil {
			a.settle(err)
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
				a.settle(err)
				return
			}
		}
		if !a.state.Deadline.IsZero() {
			a.ttl = time.AfterFunc(time.Until(a.state.Deadline), func() { a.send(ttlMsg{}) })
		}
		a.startEgress(true)
		a.adoptedOne("")
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
		a.settle(nil)
	}
}

// adoptParams are a recovering process actor's parameters.
func (a *sandboxActor) adoptParams(p lifecycle.Process) process.Params {
	return process.Params{ID: p.ID, Sandbox: a.sb, Spec: p.Spec, Deadline: p.Deadline,
		Adopt: &p, Detach: a.decision == Readopt && !a.p.Recover.StopProcesses, Launched: make(chan process.Launch, 1)}
}

// spawnAdopted spawns a recovering process actor.
func (a *sandboxActor) spawnAdopted(ctx actor.Context, p lifecycle.Process, params process.Params) {
	a.procs.track(process.Tracked{ID: p.ID, Phase: p.Phase, Group: p.Group})
	pid, err := ctx.SpawnNamed(process.Props(a.deps, params), "process-"+p.ID)
	if err != nil {
		a.deps.Log.Warn("recovering a process failed", "sandbox", a.p.ID, "process", p.ID, "err", err)
		return
	}
	a.procs.add(p.ID, pid)
	if a.pause != thawed {
		a.sys.Root.Send(pid, process.Freeze{Frozen: true}) // recovery thaws it
	}
	if a.adopting == nil {
		a.adopting = map[string]bool{}
	}
	a.adopting[p.ID] = true
}

// finishStop is the tail of stop: the stopping intent is already journaled.
func (a *sandboxActor) finishStop() {
	a.end.stopInFlight = true
	a.stopProcesses(spec.Errorf(spec.CodeCancelled, "process", "sandbox %s stopped", a.p.ID))
	sb, grace := a.sb, a.deps.Config.StopGrace
	a.goDocker(func(ctx context.Context) any {
		exit, err := a.engine.StopSandbox(ctx, sb, grace)
		return stoppedMsg{exit: exit, err: err}
	})
}

// adoptedOne notes a recovering process settled; a re-adopted sandbox is at
// rest once all of them are.
func (a *sandboxActor) adoptedOne(id string) {
	delete(a.adopting, id)
	if a.decision == Readopt && a.state.Adopted && len(a.adopting) == 0 {
		a.settle(nil)
	}
}

// settle tells the recovery that this sandbox is at rest.
func (a *sandboxActor) settle(err error) {
	if a.settled || a.p.Recover == nil || a.p.Recover.Settled == nil {
		return
	}
	a.settled = true
	a.p.Recover.Settled <- Settled{ID: a.p.ID, Decision: a.decision, Observed: a.observed, Phase: a.state.Phase, Err: err, Changed: a.changed}
}

// onDeadSeen checks a die event against what Docker shows now.
func (a *sandboxActor) onDeadSeen(m deadSeen) {
	if m.err != nil || m.obs.Running || a.state.Phase != lifecycle.PhaseStarted || a.end.stopReason != "" || a.end.exitDead || a.workloadHeld() {
		return
	}
	a.workloadDead(m.obs)
}

// workloadDead records a workload that died on its own (a die event, or
// recovery finding it dead): admission closes, the processes are told (their
// execs died with it), and the sandbox is exited with what Docker reports —
// its code and OOM flag, or lost when it reports nothing — once they have
// ended.
func (a *sandboxActor) workloadDead(obs dockerio.Observed) {
	exit := dockerio.ContainerExit{ExitCode: -1}
	a.end.stopReason = lifecycle.ReasonLost
	if obs.Exit != nil {
		exit = *obs.Exit
		a.end.stopReason = lifecycle.ReasonExited
		if exit.OOMKilled {
			a.end.stopReason = lifecycle.ReasonOOM
		}
	}
	a.end.downExit, a.end.exitDead = &exit, true
	a.stopProcesses(spec.Errorf(spec.CodeCancelled, "process", "the workload of sandbox %s died", a.p.ID))
	a.maybeExited()
}
