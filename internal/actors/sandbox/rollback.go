package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/internal/actors/process"
	"github.com/stockade/stockade/internal/failpoint"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// The rollback part: a checkpoint restored into /workspace/work, and the
// settling of a rollback an earlier runtime left unsettled. (Rollback's
// comment says how it goes and why a kill at any point leaves the old or
// the new workspace, never a mix.)
//
// What it adds to the core:
//   - its messages: Rollback, and its own rollbackThawLate, rollbackDone,
//     rollbackCleaned, rollbackSettled, retrySettle;
//   - hooks: proceed (a process actor ended: the Docker work starts once
//     none is left), recovered (settle what an earlier runtime left),
//     onThawed (a rollback waiting for a consistent copy's thaw goes on);
//   - for the core and the other parts: active and rollingBackErr (what
//     must not run beside a rollback: a launch, a Put, a consistent copy),
//     holdsWorkload and deferStop (the workload it stopped is not dead,
//     and a stop waits for its start).
//
// It asks the warden part to give its warden up (giveUp) before every
// process of the sandbox's user is killed, waits for the copy part's thaw
// (idle), and holds a recovery's settling (recoveryPart.await) until the
// marker is read.

// Rollback restores a checkpoint into /workspace/work, write-ahead: the
// intent (lifecycle.RollingBack) closes admission, the sandbox's processes
// are stopped (each journaled), its warden is journaled lost and every
// process of the sandbox's user is killed (a setsid or double-forked one
// outlives the runtime's view of it), the workload is frozen, the
// checkpoint is written beside the workspace with root's marker in it, the
// two directories are exchanged in one rename by a one-off container, the
// workload is thawed, and the fact is journaled. A kill at any point
// leaves the old or the new workspace, never a mix: recovery reads where
// root's marker is (rollbackPart.settle), a proof the sandbox's user cannot
// forge (dockerio/rollback.go).
type Rollback struct {
	Checkpoint string
	// Write writes the checkpoint as a tar stream with every entry under
	// the directory root (the store's Restore).
	Write func(w io.Writer, root string) error
	// Restore: a create's From (journaled sandbox.restored after).
	Restore bool
	Reply   chan<- error
}

// rollbackPart is the sandbox's rollbacks.
type rollbackPart struct {
	a  *sandboxActor
	rb *rollbackState // a rollback under way
	// held: a rollback waiting for a consistent copy's thaw (the heldN'th
	// held).
	held  *Rollback
	heldN int
	// stopped: recovery found the workload stopped by an unsettled
	// rollback; it is started again once the rollback is settled.
	stopped bool
	// stopAfter: a stop asked while a rollback held the workload stopped
	// (holdsWorkload), made once it runs again.
	stopAfter *deferredStop
}

// handle takes the rollback part's messages.
func (r *rollbackPart) handle(_ actor.Context, msg any) bool {
	switch m := msg.(type) {
	case Rollback:
		r.start(m)
	case rollbackThawLate:
		r.onThawLate(m)
	case rollbackDone:
		r.onDone(m)
	case rollbackSettled:
		r.onSettled(m)
	case rollbackCleaned:
		r.onCleaned()
	case retrySettle:
		r.settle()
	default:
		return false
	}
	return true
}

// active: a rollback is under way in this actor (its processes being
// stopped, its Docker work out, or its old tree being emptied).
func (r *rollbackPart) active() bool { return r.rb != nil }

// recovered (recovery) settles a rollback an earlier runtime left
// unsettled; stopped: the workload was found stopped by it.
func (r *rollbackPart) recovered(stopped bool) {
	r.stopped = stopped
	r.settle()
}

// deferStop keeps a stop for later while the rollback holds the workload
// stopped (holdsWorkload): a stop now would be undone by its start. false:
// the stop goes on now.
func (r *rollbackPart) deferStop(reason lifecycle.Reason, cause error) bool {
	if !r.holdsWorkload() {
		return false
	}
	if r.stopAfter == nil {
		r.stopAfter = &deferredStop{reason: reason, cause: cause}
	}
	return true
}

// rollbackState is a rollback under way: its processes being stopped, or
// its Docker work out.
type rollbackState struct {
	m       Rollback
	staging string
	marker  string
	docker  bool // the Docker work is out
	// restarting: the workload is stopped for the rollback, and started
	// again before rollbackDone: its death is the rollback's, not news.
	restarting bool
	// cleaning: journaled rolled back, the old tree being emptied before
	// the caller is answered.
	cleaning bool
}

// rollingBackErr refuses what must not run beside a rollback: a Put (it
// would land half in each tree) and a consistent copy (its freeze stops
// the rollback's execs).
func (r *rollbackPart) rollingBackErr() error {
	a := r.a
	if r.rb != nil || a.state.RollingBack != nil {
		return spec.Errorf(spec.CodeConflict, "sandbox", "sandbox %s: a rollback is under way", a.p.ID)
	}
	return nil
}

// deferredStop is a stop asked while a rollback had the workload stopped
// (live, or found so by recovery): a stop then would be undone by the
// rollback's start of the workload, so it is made once that is done.
type deferredStop struct {
	reason lifecycle.Reason
	cause  error
}

// holdsWorkload: a rollback has the workload stopped and will start it
// again; its death is the rollback's, and a stop waits.
func (r *rollbackPart) holdsWorkload() bool {
	return r.rb != nil && r.rb.restarting || r.stopped
}

// stopDeferred makes the stop asked while the workload was held.
func (r *rollbackPart) stopDeferred() {
	a := r.a
	if st := r.stopAfter; st != nil && !r.holdsWorkload() {
		r.stopAfter = nil
		a.stop(st.reason, st.cause)
	}
}

// rollbackThawWait bounds how long a rollback waits for a consistent
// copy's thaw before it is refused.
const rollbackThawWait = 30 * time.Second

// rollbackThawLate ends the wait of held rollback n.
type rollbackThawLate struct{ n int }

// onThawLate refuses a rollback still waiting for the thaw.
func (r *rollbackPart) onThawLate(m rollbackThawLate) {
	a := r.a
	if r.held == nil || m.n != r.heldN {
		return
	}
	held := *r.held
	r.held = nil
	a.closeAsk(rollbackAsk)
	held.Reply <- spec.Errorf(spec.CodeConflict, "sandbox", "sandbox %s: a consistent copy held the workload frozen for %v; roll back once it is closed", a.p.ID, rollbackThawWait)
}

// onThawed goes on with a rollback that waited for the thaw.
func (r *rollbackPart) onThawed() {
	a := r.a
	if r.held == nil || !a.copies.idle() {
		return
	}
	held := *r.held
	r.held = nil
	a.closeAsk(rollbackAsk)
	r.start(held)
}

// retrySettle reads an unsettled rollback's marker again.
type retrySettle struct{}

type rollbackDone struct {
	exchanged bool
	unknown   bool // whether the exchange happened could not be read
	err       error
	// restartErr: the workload, stopped for the rollback, did not start
	// again (the sandbox then ends as its workload died).
	restartErr error
	// stopped: the workload was stopped for the rollback (its run
	// ended); use is its last reading before (nil: none), so the run is
	// whole in the usage ledger.
	stopped bool
	use     *dockerio.CgroupSample
}

// rollbackCleaned: the old tree and the marker are gone (or could not be).
type rollbackCleaned struct{}

// rollbackAsk is a rollback's entry in the ask ledger.
const rollbackAsk = "rollback"

// answer answers the caller of a rollback and closes its entry.
func (r *rollbackPart) answer(rb *rollbackState, err error) {
	a := r.a
	a.closeAsk(rollbackAsk)
	rb.m.Reply <- err
}

func (r *rollbackPart) onCleaned() {
	rb := r.rb
	if rb == nil || !rb.cleaning {
		return
	}
	r.rb = nil
	r.answer(rb, nil)
}

type rollbackSettled struct {
	intent lifecycle.RollingBack
	has    bool
	err    error
	// started: the workload, found stopped by the rollback, was started
	// again (startErr: it did not start).
	started  bool
	startErr error
}

// start begins a rollback: its intent journaled, the sandbox's processes
// stopped (proceed goes on once they have ended).
func (r *rollbackPart) start(m Rollback) {
	a := r.a
	if err := a.pool.pooledErr(); err != nil {
		m.Reply <- err
		return
	}
	switch {
	case r.rb != nil || a.state.RollingBack != nil:
		m.Reply <- spec.Errorf(spec.CodeConflict, "sandbox", "sandbox %s: a rollback is already under way", a.p.ID)
		return
	case !a.running() || !a.state.Admits():
		m.Reply <- spec.Errorf(spec.CodeAdmissionClosed, "sandbox", "sandbox %s does not run (%s): a rollback needs a running sandbox; make a new one from the checkpoint (sandbox create --from)", a.p.ID, a.phaseName())
		return
	case !a.copies.idle():
		// A consistent copy holds the workload frozen (a checkpoint just
		// taken thaws it a moment after it returns): the rollback waits
		// for the thaw, a bounded while.
		if r.held != nil {
			m.Reply <- spec.Errorf(spec.CodeConflict, "sandbox", "sandbox %s: a rollback already waits for the workload's thaw", a.p.ID)
			return
		}
		r.heldN++
		r.held = &m
		a.openAsk(rollbackAsk, func(err error) { m.Reply <- err })
		n := r.heldN
		time.AfterFunc(rollbackThawWait, func() { a.send(rollbackThawLate{n: n}) })
		return
	}
	// The marker's name is not guessable: no file the workspace holds can
	// pass for it.
	var nonce [8]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		m.Reply <- spec.Wrap(spec.CodeInternal, "sandbox", err, "naming a rollback's marker")
		return
	}
	n := strconv.FormatUint(a.state.Seq+1, 10)
	intent := lifecycle.RollingBack{Checkpoint: m.Checkpoint, Staging: ".rollback-" + n, Marker: dockerio.MarkerPrefix + hex.EncodeToString(nonce[:])}
	if err := a.record(intent); err != nil {
		m.Reply <- err
		return
	}
	failpoint.Hit(failpoint.RollbackIntent)
	r.rb = &rollbackState{m: m, staging: intent.Staging, marker: intent.Marker}
	a.openAsk(rollbackAsk, func(err error) { m.Reply <- err })
	cause := spec.Errorf(spec.CodeCancelled, "process", "stopped for the rollback of sandbox %s to checkpoint %s", a.p.ID, m.Checkpoint)
	a.procs.each(func(pid *actor.PID) {
		a.sys.Root.Send(pid, process.Stop{Reason: lifecycle.ReasonStopped, Err: cause, Reply: make(chan error, 1)})
	})
	r.proceed()
}

// proceed starts the Docker work once no tracked process is left.
// The warden goes first, journaled lost; then the workload container is
// killed, which ends every process of the sandbox's user, tracked or not,
// the container's own init and keeper included (the kernel's proof that
// none is left: nothing of the user's runs while root works in the
// workspace); the staging directory is made with root's marker in it,
// the checkpoint written into it, and the two trees exchanged (so root's
// marker is in work exactly when the exchange happened; it is removed from
// there only after the fact is journaled); then the workload is started
// again and read back.
func (r *rollbackPart) proceed() {
	a := r.a
	rb := r.rb
	if rb == nil || rb.docker || a.procs.count() > 0 {
		return
	}
	rb.docker = true
	if !a.running() {
		// Stopped (or dying) under the rollback: nothing is staged.
		a.send(rollbackDone{err: spec.Errorf(spec.CodeAdmissionClosed, "sandbox", "sandbox %s stopped before its workspace was exchanged", a.p.ID)})
		return
	}
	if err := a.warden.giveUp("stopped for the rollback to " + rb.m.Checkpoint); err != nil {
		a.send(rollbackDone{err: err})
		return
	}
	rb.restarting = true
	sb, eng := a.sb, a.engine
	a.goDocker(func(ctx context.Context) any {
		var done rollbackDone
		use := lastSample(ctx, eng, sb)
		stopped := false
		if err := eng.KillWorkload(ctx, sb); err != nil {
			done = rollbackDone{err: fmt.Errorf("stopping the workload for the rollback: %w", err)}
		} else {
			done = stageAndExchange(ctx, eng, sb, rb)
			stopped = true
		}
		// A context of its own: the rollback's may be spent by a large
		// checkpoint, and a workload not started again ends the sandbox.
		rctx, cancel := a.deps.DockerContext()
		defer cancel()
		done.restartErr = eng.RestartWorkload(rctx, sb)
		done.stopped, done.use = stopped, use
		return done
	})
}

// stageAndExchange writes the checkpoint beside the workspace (the
// workload stopped) and exchanges the two trees.
func stageAndExchange(ctx context.Context, eng engine, sb dockerio.Sandbox, rb *rollbackState) rollbackDone {
	err := eng.StageRollback(ctx, sb, rb.staging, rb.marker)
	if err == nil {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(rb.m.Write(pw, rb.staging)) }()
		err = eng.PutArchive(ctx, sb, ".", pr)
		pr.CloseWithError(io.ErrClosedPipe) // the writer, if still writing, stops
	}
	if err != nil {
		return rollbackDone{err: fmt.Errorf("writing the checkpoint beside the workspace: %w", err)}
	}
	failpoint.Hit(failpoint.RollbackStaged)
	if err := eng.ExchangeWorkspace(ctx, sb, rb.staging); err != nil {
		// Did it happen? Root's marker says.
		ex, herr := exchanged(ctx, eng, sb, rb.marker)
		switch {
		case herr != nil:
			return rollbackDone{unknown: true, err: err}
		case !ex:
			return rollbackDone{err: err}
		}
	}
	failpoint.Hit(failpoint.RollbackExchanged)
	return rollbackDone{exchanged: true}
}

// exchanged reads whether a rollback's exchange happened: root's marker is
// in work (dockerio.Workspaces.MarkerProof). A look-alike the sandbox's
// user made, or an earlier rollback's marker renamed, reads as not.
func exchanged(ctx context.Context, eng engine, sb dockerio.Sandbox, marker string) (bool, error) {
	return eng.MarkerProof(ctx, sb, "work", marker)
}

func (r *rollbackPart) onDone(m rollbackDone) {
	a := r.a
	rb := r.rb
	r.rb = nil
	if rb != nil {
		rb.restarting = false
		// After the outcome is journaled (deferred calls run last).
		defer r.stopDeferred()
		// The stopped run's ledger closes; the restarted one's begins.
		if m.stopped {
			a.usage.onStop(m.use)
			if m.restartErr == nil {
				a.usage.runStarted()
			}
		}
	}
	if rb == nil || a.state.RollingBack == nil {
		return
	}
	intent := *a.state.RollingBack
	if m.restartErr != nil {
		// Whatever the journal says of the rollback below, the workload
		// is stopped: the sandbox ends as one whose workload died.
		a.deps.Log.Error("the workload stopped for a rollback did not start again", "sandbox", a.p.ID, "err", m.restartErr)
		defer a.send(WorkloadDied{ExitCode: -1})
	}
	switch {
	case m.unknown:
		// Left journaled: admission stays closed until the marker can be
		// read (retried here, and by the next recovery).
		r.answer(rb, spec.Wrap(spec.CodeEngine, "sandbox", m.err, "sandbox %s: whether the rollback to %s happened could not be read yet; it is settled once it can be", a.p.ID, intent.Checkpoint))
		time.AfterFunc(5*time.Second, func() { a.send(retrySettle{}) })
	case m.exchanged:
		err := a.record(lifecycle.RolledBack{Checkpoint: intent.Checkpoint})
		if err == nil && rb.m.Restore {
			err = a.record(lifecycle.Restored{Checkpoint: intent.Checkpoint})
		}
		if err != nil {
			r.answer(rb, err)
			return
		}
		if m.restartErr != nil {
			r.answer(rb, spec.Wrap(spec.CodeOf(m.restartErr), "sandbox", m.restartErr, "sandbox %s was rolled back to %s, but its workload did not start again", a.p.ID, intent.Checkpoint))
			return
		}
		// The marker leaves work and the old tree is emptied before the
		// caller is answered: what it reads next is the checkpoint alone.
		// Admission stays closed meanwhile (rb.cleaning).
		r.rb = rb
		rb.cleaning = true
		sb, eng, log, id := a.sb, a.engine, a.deps.Log, a.p.ID
		a.goDocker(func(ctx context.Context) any {
			if err := eng.EmptyWorkspaceDir(ctx, sb, intent.Staging, "work/"+intent.Marker); err != nil {
				log.Warn("emptying a rollback's old workspace failed", "sandbox", id, "staging", intent.Staging, "err", err)
			}
			return rollbackCleaned{}
		})
	default:
		why := m.err.Error()
		if err := a.record(lifecycle.RollbackAbandoned{Checkpoint: intent.Checkpoint, Why: why}); err != nil {
			r.answer(rb, err)
			return
		}
		r.tidy(intent)
		r.answer(rb, spec.Wrap(spec.CodeOf(m.err), "sandbox", m.err, "sandbox %s: rollback to %s abandoned; the workspace is as it was", a.p.ID, intent.Checkpoint))
	}
}

// tidy empties a rollback's staging directory (and the marker, if the
// exchange left it in work) off the mailbox; best effort: what it leaves
// is in a hidden entry of /workspace.
func (r *rollbackPart) tidy(intent lifecycle.RollingBack) {
	a := r.a
	if !a.running() {
		return // it needs an exec; the volume goes with the sandbox
	}
	sb, eng, log, id := a.sb, a.engine, a.deps.Log, a.p.ID
	go func() {
		ctx, cancel := a.deps.DockerContext()
		defer cancel()
		if has, err := eng.WorkspaceHas(ctx, sb, intent.Staging); err != nil || !has {
			return // never made: nothing to empty
		}
		if err := eng.EmptyWorkspaceDir(ctx, sb, intent.Staging, "work/"+intent.Marker); err != nil {
			log.Warn("emptying a rollback's staging directory failed", "sandbox", id, "staging", intent.Staging, "err", err)
		}
	}()
}

// settle settles a rollback an earlier runtime left unsettled, by
// the marker: in work, the exchange happened. A settled one whose cleanup
// a crash cut short (the marker still in work, the old tree beside it) is
// tidied.
func (r *rollbackPart) settle() {
	a := r.a
	intent := a.state.RollingBack
	if intent == nil && a.state.LastRollback != nil && r.rb == nil {
		r.tidy(*a.state.LastRollback)
		return
	}
	if intent == nil || r.rb != nil {
		return
	}
	sb, eng, in, stopped := a.sb, a.engine, *intent, r.stopped
	// A re-adopted sandbox is at rest only once this is settled: until
	// then it admits nothing.
	a.recovery.await(rollbackKey)
	a.goDocker(func(ctx context.Context) any {
		// Read before the workload runs again: no process of the user's
		// is there to touch the marker meanwhile.
		has, err := exchanged(ctx, eng, sb, in.Marker)
		m := rollbackSettled{intent: in, has: has, err: err}
		if err == nil && stopped {
			m.started = true
			rctx, cancel := a.deps.DockerContext()
			defer cancel()
			m.startErr = eng.RestartWorkload(rctx, sb)
		}
		return m
	})
}

// rollbackKey is the settling of a rollback among a recovery's pending
// adoptions.
const rollbackKey = "\x00rollback"

func (r *rollbackPart) onSettled(m rollbackSettled) {
	a := r.a
	defer a.recovery.adopted(rollbackKey)
	if m.started {
		r.stopped = false
		defer r.stopDeferred() // after the outcome is journaled
		if m.startErr != nil {
			a.deps.Log.Error("a workload its rollback stopped did not start again", "sandbox", a.p.ID, "err", m.startErr)
			defer a.send(WorkloadDied{ExitCode: -1})
		}
	}
	if a.state.RollingBack == nil || *a.state.RollingBack != m.intent {
		return
	}
	if m.err != nil {
		a.deps.Log.Warn("an unsettled rollback could not be read; trying again", "sandbox", a.p.ID, "checkpoint", m.intent.Checkpoint, "err", m.err)
		time.AfterFunc(5*time.Second, func() { a.send(retrySettle{}) })
		return
	}
	var err error
	if m.has {
		err = a.record(lifecycle.RolledBack{Checkpoint: m.intent.Checkpoint})
		if err == nil && a.state.Spec.From == m.intent.Checkpoint && a.state.Restored == "" && a.state.Rollbacks == 1 {
			err = a.record(lifecycle.Restored{Checkpoint: m.intent.Checkpoint})
		}
	} else {
		err = a.record(lifecycle.RollbackAbandoned{Checkpoint: m.intent.Checkpoint, Why: "recovered: the runtime ended before the exchange"})
	}
	if err != nil {
		a.deps.Log.Warn("journaling a recovered rollback failed", "sandbox", a.p.ID, "err", err)
		return
	}
	r.tidy(m.intent)
}
