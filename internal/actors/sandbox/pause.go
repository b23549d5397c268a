package sandbox

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade/stockade/internal/actors/process"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// pauseState is where a workload's freeze for consistent copies stands.
type pauseState int

const (
	thawed   pauseState = iota
	freezing            // the pausing intent is journaled, the pause call out
	frozen
	thawing // the unpause call is out
)

type (
	pausedMsg     struct{ err error }
	unpausedMsg   struct{ err error }
	pauseReleased struct{}
	retryThaw     struct{}
)

// get reads a tar stream of the workspace. A consistent copy (Pause) of a
// running workload freezes it: the freeze is journaled (intent before the
// pause, fact after the unpause) and shared by every consistent copy open
// at the time; the workload thaws when the last of them is closed or its
// context ends. A copy without Pause, or of a workload that does not run,
// freezes nothing (Live says whether it was taken from a running workload).
func (a *sandboxActor) get(ctx actor.Context, m Get) {
	if a.sb.ID == "" || a.state.Phase == lifecycle.PhaseRemoving || a.state.Phase == lifecycle.PhaseRemoved {
		m.Reply <- GetResult{Err: spec.Errorf(spec.CodeNotFound, "sandbox", "sandbox %s has no workspace (%s)", a.p.ID, a.state.Phase)}
		return
	}
	if err := a.pooledErr(); err != nil {
		m.Reply <- GetResult{Err: err}
		return
	}
	if running := a.running(); !m.Pause || !running {
		a.copyOut(m, running, false)
		return
	}
	if err := a.rollingBackErr(); err != nil {
		// A freeze would stop the rollback's execs (Docker refuses an
		// exec into a paused workload) halfway.
		m.Reply <- GetResult{Err: err}
		return
	}
	a.pauseWait = append(a.pauseWait, m)
	a.pumpPause(ctx)
}

// pumpPause moves the freeze on: freeze for waiting copies (once no
// launched process is still starting: Docker refuses to start an exec in a
// paused workload), hand them out once frozen, and let held launches go
// once thawed with nobody waiting.
func (a *sandboxActor) pumpPause(ctx actor.Context) {
	switch a.pause {
	case thawed:
		if len(a.pauseWait) > 0 && !a.running() {
			// Stopped while they waited: nothing runs to freeze.
			for _, m := range a.pauseWait {
				a.copyOut(m, false, false)
			}
			a.pauseWait = nil
		}
		if len(a.pauseWait) > 0 {
			if len(a.starting) > 0 {
				return // startSettled pumps again
			}
			err := a.record(lifecycle.SandboxPausing{})
			if err == nil {
				a.pause = freezing
				a.tellFreeze(true)
				sb := a.sb
				a.goDocker(func(ctx context.Context) any { return pausedMsg{err: a.engine.PauseSandbox(ctx, sb)} })
				return
			}
			a.failWaiting(err)
		}
		held := a.heldLaunches
		a.heldLaunches = nil
		for _, l := range held {
			a.launch(ctx, l)
		}
		a.releaseHeldRollback()
	case frozen:
		for _, m := range a.pauseWait {
			a.pauseHolds++
			a.copyOut(m, false, true)
		}
		a.pauseWait = nil
		a.maybeThaw()
	case freezing, thawing:
		// A pause or unpause call is out: its answer (onPaused,
		// onUnpaused) pumps again.
	}
}

// running: the workload runs and no stop is under way.
func (a *sandboxActor) running() bool {
	return a.state.Phase == lifecycle.PhaseStarted && a.end.stopReason == "" && !a.end.exitDead
}

// startSettled notes that a launched process is past its start (running,
// or ended); a freeze waiting for the starts goes on once none is left.
func (a *sandboxActor) startSettled(ctx actor.Context, id string) {
	if !a.starting[id] {
		return
	}
	delete(a.starting, id)
	if len(a.starting) == 0 {
		a.pumpPause(ctx)
	}
}

func (a *sandboxActor) onPaused(ctx actor.Context, m pausedMsg) {
	a.pause = frozen
	if m.err != nil {
		// The pause may or may not have happened: fail the copies and
		// thaw, which settles the journal either way.
		a.failWaiting(m.err)
	}
	a.pumpPause(ctx)
}

func (a *sandboxActor) failWaiting(err error) {
	for _, m := range a.pauseWait {
		m.Reply <- GetResult{Err: err}
	}
	a.pauseWait = nil
}

// maybeThaw unpauses once no consistent copy is open or waiting.
func (a *sandboxActor) maybeThaw() {
	if a.pause != frozen || a.pauseHolds > 0 || len(a.pauseWait) > 0 {
		return
	}
	a.pause = thawing
	sb := a.sb
	a.goDocker(func(ctx context.Context) any { return unpausedMsg{err: a.engine.UnpauseSandbox(ctx, sb)} })
}

func (a *sandboxActor) onUnpaused(ctx actor.Context, m unpausedMsg) {
	if m.err != nil {
		a.deps.Log.Warn("unpausing the workload failed; trying again", "sandbox", a.p.ID, "err", m.err)
		a.pause = frozen
		time.AfterFunc(time.Second, func() { a.send(retryThaw{}) })
		return
	}
	if a.state.Paused && a.state.Phase != lifecycle.PhaseRemoved {
		if err := a.record(lifecycle.SandboxUnpaused{}); err != nil {
			// The workload runs; the journal still says paused, and the
			// next recovery thaws (a no-op) and records it.
			a.deps.Log.Warn("journaling the unpause failed", "sandbox", a.p.ID, "err", err)
		}
	}
	a.pause = thawed
	a.tellFreeze(false)
	a.pumpPause(ctx)
}

// tellFreeze tells every process that the workload is being frozen, or
// was thawed: their stop timers do not count frozen time (a frozen warden
// can neither kill nor report a reap).
func (a *sandboxActor) tellFreeze(frozen bool) {
	if frozen {
		a.w.freezes++
	}
	a.tellProcesses(process.Freeze{Frozen: frozen})
}

// copyOut reads the archive off the mailbox. A held copy (one of a freeze)
// releases its hold when closed or when its context ends, exactly once.
func (a *sandboxActor) copyOut(m Get, live, held bool) {
	sb := a.sb
	go func() {
		rc, err := a.engine.GetArchive(m.Ctx, sb, m.Path)
		if !held {
			m.Reply <- GetResult{Tar: rc, Live: live, Err: err}
			return
		}
		var once sync.Once
		release := func() { once.Do(func() { a.send(pauseReleased{}) }) }
		if err != nil {
			release()
			m.Reply <- GetResult{Err: err}
			return
		}
		stop := context.AfterFunc(m.Ctx, release)
		m.Reply <- GetResult{Tar: &heldCopy{ReadCloser: rc, release: func() { stop(); release() }}}
	}()
}

// heldCopy is a consistent copy's stream: closing it releases the freeze.
type heldCopy struct {
	io.ReadCloser
	release func()
}

func (h *heldCopy) Close() error {
	err := h.ReadCloser.Close()
	h.release()
	return err
}
