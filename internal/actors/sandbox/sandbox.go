package sandbox

import (
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/trace"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/internal/actors"
	"github.com/stockade/stockade/internal/actors/process"
	"github.com/stockade/stockade/internal/failpoint"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// engine is the part of the Docker seam a sandbox actor uses.
type engine interface {
	dockerio.Sandboxes
	dockerio.Files
	dockerio.Workspaces
	dockerio.Wardens
	dockerio.Egress
	dockerio.Meters
	InspectSandbox(ctx context.Context, sb dockerio.Sandbox) (dockerio.Observed, error)
	SignalGroup(ctx context.Context, sb dockerio.Sandbox, pgid int, sig syscall.Signal) error
}

// Props returns the props of a sandbox actor.
func Props(d *actors.Deps, p Params) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return newActor(d, p)
	}, actor.WithSupervisor(actors.FailureStrategy()))
}

// Messages the core posts to itself (its goroutines, its timer).
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
		use  *dockerio.CgroupSample // the run's last sample (nil: none)
	}
	removedMsg struct{ err error }
	ttlMsg     struct{}
	// egressReadyLate: the create's wait for the egress proxy ran out.
	egressReadyLate struct{}
	deadSeen        struct {
		obs dockerio.Observed
		err error
	}
)

// sandboxActor is the core of a sandbox actor: the sandbox's lifecycle
// (create, start, launch, stop, remove, each journaled by the write-ahead
// rule), its process actors (processes.go), the asks it holds (asks.go),
// and its parts, one per concern (parts.go), each offered the messages the
// core does not take.
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

	procs children    // its process actors (processes.go)
	end   ending      // where its stop and removal stand
	ttl   *time.Timer // the sandbox's deadline
	asks  ledger      // what was asked and is not answered yet (asks.go)

	warden      wardenPart     // warden.go, warden_reattach.go
	egress      egressPart     // egress.go
	copies      copyPart       // copies.go
	pool        poolPart       // pool.go
	rollback    rollbackPart   // rollback.go
	checkpoints checkpointPart // checkpoint.go
	recovery    recoveryPart   // recover.go
	usage       usagePart      // usage.go
	parts       []part         // the above, in the order they are offered a message

	// secrets are the values of the sandbox's secret variables, by name:
	// in memory only (secrets.go).
	secrets map[string]string
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
	// holdingCreate: the create waits for the egress proxy's first link;
	// egressWaited: it waits no more (the link came, failed, or the wait
	// ran out); createAnswered: Created was sent.
	holdingCreate, egressWaited, createAnswered bool
}

// newActor makes a sandbox actor's core and its parts.
func newActor(d *actors.Deps, p Params) *sandboxActor {
	a := &sandboxActor{deps: d, engine: d.Engine, p: p, procs: newChildren()}
	if p.Recover == nil {
		// The values are held here only: nothing journaled, listed or
		// handed to Docker carries them. A recovering actor has none (its
		// spec is the journal's): they are given again (SetSecrets).
		a.secrets = valuesOf(p.Spec.Secrets)
	}
	a.p.Spec.Secrets = spec.WithoutSecretValues(p.Spec.Secrets)
	a.warden.a, a.egress.a, a.copies.a, a.pool.a = a, a, a, a
	a.rollback.a, a.checkpoints.a, a.recovery.a, a.usage.a = a, a, a, a
	a.parts = []part{&a.warden, &a.egress, &a.copies, &a.pool, &a.rollback, &a.checkpoints, &a.recovery, &a.usage}
	return a
}

func (a *sandboxActor) send(msg any) { a.sys.Root.Send(a.self, msg) }

// traced is ctx under the create's span, if it has one.
func (a *sandboxActor) traced(ctx context.Context) context.Context {
	if a.p.Span == nil {
		return ctx
	}
	return trace.ContextWithSpan(ctx, a.p.Span)
}

// DockerSandbox names a journaled sandbox's Docker resources: what its folded
// state knows of them (the ids once created; else only the owner, id and
// spec, by which its resources are labelled and named).
func DockerSandbox(owner string, s lifecycle.Sandbox) dockerio.Sandbox {
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
	a.pool.onRecorded(ev)
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

// running: the workload runs and no stop is under way.
func (a *sandboxActor) running() bool {
	return a.state.Phase == lifecycle.PhaseStarted && a.end.stopReason == "" && !a.end.exitDead
}

// Receive handles the lifecycle's messages; what the process actors report
// is fromProcess's (processes.go), and every other message is offered to
// the parts in turn, the first whose handle takes it.
func (a *sandboxActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.self, a.sys = ctx.Self(), ctx.ActorSystem()
		a.state.ID = a.p.ID
		if a.p.Recover != nil {
			a.recovery.start(ctx)
			a.usage.start()
			return
		}
		a.usage.start()
		a.create()
	case createdMsg:
		a.onCreated(m)
	case startedMsg:
		a.onStarted(m)
	case Launch:
		a.openLaunch(m)
		a.launch(ctx, m)
	case verifiedMsg:
		a.onVerified(m)
	case Stop:
		a.end.stopWaiters = append(a.end.stopWaiters, m.Reply)
		a.stop(lifecycle.ReasonStopped, nil)
	case Remove:
		a.end.removeWaiters = append(a.end.removeWaiters, m.Reply)
		a.remove()
	case Inspect:
		m.Reply <- a.snapshot()
	case SetSecrets:
		m.Reply <- a.setSecrets(m)
	case stoppedMsg:
		a.onStopped(m)
	case removedMsg:
		a.onRemoved(m)
	case egressReadyLate:
		a.releaseCreate()
	case ttlMsg:
		a.stop(lifecycle.ReasonTimeout, spec.Errorf(spec.CodeTimeout, "sandbox", "sandbox %s outlived its TTL", a.p.ID))
	case WorkloadDied:
		a.onWorkloadDied()
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
		a.warden.close()
		a.egress.stop()
		a.usage.close()
		a.answerOpenAsks()
	case *actor.Stopped:
		a.recovery.settle(spec.Errorf(spec.CodeInternal, "sandbox", "sandbox %s's actor stopped before recovery settled it", a.p.ID))
		if a.p.Gone != nil {
			a.p.Gone()
		}
	default:
		if a.fromProcess(ctx, m) {
			return
		}
		for _, p := range a.parts {
			if p.handle(ctx, m) {
				return
			}
		}
	}
}

// snapshot is the sandbox's folded state and its live processes.
func (a *sandboxActor) snapshot() Snapshot {
	snap := Snapshot{State: a.state}
	for id := range a.procs.live {
		snap.Processes = append(snap.Processes, id)
	}
	return snap
}

// armTTL stops the sandbox at deadline.
func (a *sandboxActor) armTTL(deadline time.Time) {
	a.ttl = time.AfterFunc(time.Until(deadline), func() { a.send(ttlMsg{}) })
}

// onWorkloadDied checks a die event of the workload against what Docker
// shows now (onDeadSeen).
func (a *sandboxActor) onWorkloadDied() {
	if a.rollback.holdsWorkload() {
		return // the rollback stopped it, and starts it again
	}
	if a.state.Phase == lifecycle.PhaseStarted && a.end.stopReason == "" && !a.end.exitDead {
		sb := a.sb
		a.goDocker(func(ctx context.Context) any {
			obs, err := a.engine.InspectSandbox(ctx, sb)
			return deadSeen{obs: obs, err: err}
		})
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
		sb, err := a.engine.CreateSandbox(a.traced(ctx), req)
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
	a.goDocker(func(ctx context.Context) any { return startedMsg{err: a.engine.StartSandbox(a.traced(ctx), sb)} })
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
	a.usage.runStarted()
	a.egress.start(false)
	// The create answers once the warden is up: the first process does
	// not wait for it, and a warden that cannot start fails the create
	// (rolled back) rather than every later launch.
	if a.warden.startForCreate() {
		return
	}
	a.createdDone()
}

// releaseCreate ends a create's wait for the egress proxy (it answered,
// failed, or the wait ran out): a create held for it is answered, one not
// there yet (its warden still starting) will not wait for it.
func (a *sandboxActor) releaseCreate() {
	a.end.egressWaited = true
	if a.end.holdingCreate {
		a.createdDone()
	}
}

// egressReadyWait bounds how long a create waits for its allowlist
// sandbox's proxy to answer (past it the create is answered; the proxy
// may then refuse a first connection while it starts).
const egressReadyWait = 10 * time.Second

// createdDone answers a create whose sandbox runs: for an allowlist
// sandbox, once its proxy answered its first control link (it listens for
// the sandbox's clients before it serves that link), so a first command's
// connection finds it listening.
func (a *sandboxActor) createdDone() {
	if a.end.createAnswered {
		return
	}
	if a.sb.Egress != "" && !a.egress.linked() && !a.end.egressWaited {
		if !a.end.holdingCreate {
			a.end.holdingCreate = true
			time.AfterFunc(egressReadyWait, func() { a.send(egressReadyLate{}) })
		}
		return
	}
	a.end.holdingCreate, a.end.createAnswered = false, true
	if !a.p.Deadline.IsZero() {
		a.armTTL(a.p.Deadline)
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
	if a.state.Admits() && a.end.stopReason == "" && a.copies.holdLaunch(m) {
		// Docker refuses execs into a paused container: launches wait for
		// the thaw (and, once a freeze is asked, for it to come and go).
		return
	}
	if err := a.pool.pooledErr(); err != nil {
		a.answerLaunch(m, process.Launch{Err: err})
		return
	}
	if !a.state.Admits() || a.end.stopReason != "" || a.rollback.active() {
		a.answerLaunch(m, process.Launch{Err: spec.Errorf(spec.CodeAdmissionClosed, "sandbox", "sandbox %s is %s and admits no process", a.p.ID, a.phaseName())})
		return
	}
	if err := a.missingSecrets(); err != nil {
		a.answerLaunch(m, process.Launch{Err: err})
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
	if a.warden.hold(m) {
		return
	}
	var deadline time.Time
	if m.Spec.Timeout > 0 {
		deadline = a.deps.Now().Add(m.Spec.Timeout)
	}
	// With a warden, its live link stands for the active check: the link
	// was made after the workload was verified, and lives only while that
	// same container runs (an exec dies with its container).
	link, _ := a.warden.linkNow()
	props := process.Props(a.deps, process.Params{ID: m.ID, Sandbox: a.sb, Spec: m.Spec, Secrets: a.processSecrets(), Deadline: deadline, Launched: m.Reply, Gated: link == nil, Link: link})
	pid, err := ctx.SpawnNamed(props, "process-"+m.ID)
	if err != nil {
		a.answerLaunch(m, process.Launch{Err: spec.Wrap(spec.CodeConflict, "sandbox", err, "spawning process %s", m.ID)})
		return
	}
	a.handedOn(m)
	a.procs.add(m.ID, pid)
	a.copies.launched(m.ID)
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
	if a.rollback.active() {
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
		if a.rollback.deferStop(reason, cause) {
			// The rollback has the workload stopped and starts it again:
			// the stop goes on once it is done (a stop now would be
			// undone by that start).
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
	a.egress.stop()
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
		a.recovery.settle(m.err)
		return
	}
	a.end.downExit = &m.exit
	failpoint.Hit(failpoint.SandboxStopCall)
	a.usage.onStop(m.use)
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
	a.recovery.settle(nil)
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
		a.recovery.settle(err)
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
		sb = DockerSandbox(a.deps.Config.Owner, a.state)
	}
	a.egress.stop()
	loopDone := a.egress.loopDone()
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
		a.recovery.settle(m.err)
		return
	}
	failpoint.Hit(failpoint.SandboxRemoveCall)
	if err := a.record(lifecycle.SandboxRemoved{}); err != nil {
		a.answerRemove(err)
		a.recovery.settle(err)
		return
	}
	a.answerRemove(nil)
	a.recovery.settle(nil)
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
		a.recovery.settle(err)
	}
}

// finishStop is the tail of stop: the stopping intent is already journaled.
func (a *sandboxActor) finishStop() {
	a.end.stopInFlight = true
	a.stopProcesses(spec.Errorf(spec.CodeCancelled, "process", "sandbox %s stopped", a.p.ID))
	sb, grace := a.sb, a.deps.Config.StopGrace
	a.goDocker(func(ctx context.Context) any {
		use := lastSample(ctx, a.engine, sb)
		exit, err := a.engine.StopSandbox(ctx, sb, grace)
		return stoppedMsg{exit: exit, err: err, use: use}
	})
}

// onDeadSeen checks a die event against what Docker shows now.
func (a *sandboxActor) onDeadSeen(m deadSeen) {
	if m.err != nil || m.obs.Running || a.state.Phase != lifecycle.PhaseStarted || a.end.stopReason != "" || a.end.exitDead || a.rollback.holdsWorkload() {
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
	a.usage.onStop(nil) // the cgroup went with the workload: the last sample stands
	a.stopProcesses(spec.Errorf(spec.CodeCancelled, "process", "the workload of sandbox %s died", a.p.ID))
	a.maybeExited()
}
