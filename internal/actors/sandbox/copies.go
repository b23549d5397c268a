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

// The copy part: copies into and out of the workspace (Put, Get), and the
// freeze a consistent copy holds. A consistent Get of a running workload
// freezes it: the freeze is journaled (the pausing intent before the pause,
// the fact after the unpause) and shared by every consistent copy open at
// the time; the workload thaws when the last of them is closed or its
// context ends. Docker refuses execs into a paused workload: launches wait
// for the thaw, and a freeze waits for the launched processes' starts.
//
// What it adds to the core:
//   - its messages: Put, Get, and its own pausedMsg, unpausedMsg,
//     pauseReleased (a consistent copy closed), retryThaw;
//   - hooks: holdLaunch (a launch waits for the thaw), launched and
//     startSettled (a freeze waits for launched processes to start),
//     thawFound (recovery found the workload frozen);
//   - for the other parts: thawed, idle and freezeCount (a rollback waits
//     for the thaw; a warden probe a freeze overlapped proves nothing).
//
// Once thawed with nobody waiting it lets the held launches go and tells
// the rollback part (rollbackPart.onThawed).

// Put extracts a tar stream under /workspace/<Dir>. Ctx bounds the copy:
// once it ends, the caller's reader is no longer read. A running workload
// is frozen for it (the consistent copies' freeze, shared with them): the
// daemon extracts as root, and PutArchive's read-back of the directories
// it passes through must still hold when it extracts, which no process of
// the sandbox can change while frozen.
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

// copyPart is the workspace's copies and the freeze for the consistent
// ones.
type copyPart struct {
	a *sandboxActor
	// pause is where the freeze stands, pauseHolds counts the open
	// consistent copies, pauseWait the ones waiting for the freeze,
	// heldLaunches the launches waiting for the thaw.
	pause        pauseState
	pauseHolds   int
	pauseWait    []frozenWork
	heldLaunches []Launch
	starting     map[string]bool // launched processes not yet past their start
	freezes      int             // the workload's freezes so far
}

// frozenWork is a copy waiting for the freeze: a consistent Get, or a Put.
type frozenWork struct {
	get *Get
	put *Put
}

// start does the copy; held: it holds the freeze until it is done (a Get:
// until its stream is closed).
func (c *copyPart) start(w frozenWork, live, held bool) {
	if w.get != nil {
		c.copyOut(*w.get, live, held)
		return
	}
	c.putIn(*w.put, held)
}

func (w frozenWork) fail(err error) {
	if w.get != nil {
		w.get.Reply <- GetResult{Err: err}
		return
	}
	w.put.Reply <- err
}

// handle takes the copy part's messages.
func (c *copyPart) handle(ctx actor.Context, msg any) bool {
	switch m := msg.(type) {
	case Put:
		c.put(ctx, m)
	case Get:
		c.get(ctx, m)
	case pausedMsg:
		c.onPaused(ctx, m)
	case pauseReleased:
		c.pauseHolds--
		c.maybeThaw()
	case unpausedMsg:
		c.onUnpaused(ctx, m)
	case retryThaw:
		c.maybeThaw()
	default:
		return false
	}
	return true
}

// thawed: the workload is not frozen, nor being frozen or thawed.
func (c *copyPart) thawed() bool { return c.pause == thawed }

// idle: thawed, and no consistent copy waits for a freeze.
func (c *copyPart) idle() bool { return c.pause == thawed && len(c.pauseWait) == 0 }

// freezeCount is how many times the workload was frozen.
func (c *copyPart) freezeCount() int { return c.freezes }

// holdLaunch holds a launch until the workload thaws (and, once a freeze
// is asked, until it has come and gone); false: it need not wait.
func (c *copyPart) holdLaunch(m Launch) bool {
	if c.idle() {
		return false
	}
	c.heldLaunches = append(c.heldLaunches, m)
	return true
}

// launched notes a process launched and not yet past its start.
func (c *copyPart) launched(id string) {
	if c.starting == nil {
		c.starting = map[string]bool{}
	}
	c.starting[id] = true
}

// thawFound (recovery): the workload was found frozen (a crash during a
// consistent Get, or someone froze it): it is thawed, whatever the
// decision.
func (c *copyPart) thawFound() {
	c.pause = frozen
	c.maybeThaw()
}

// put extracts a tar stream into the workspace, off the mailbox.
func (c *copyPart) put(ctx actor.Context, m Put) {
	a := c.a
	if a.sb.ID == "" || a.state.Phase == lifecycle.PhaseRemoving || a.state.Phase == lifecycle.PhaseRemoved {
		m.Reply <- spec.Errorf(spec.CodeNotFound, "sandbox", "sandbox %s has no workspace (%s)", a.p.ID, a.state.Phase)
		return
	}
	if err := a.pool.pooledErr(); err != nil {
		m.Reply <- err
		return
	}
	if err := a.rollback.rollingBackErr(); err != nil {
		m.Reply <- err // a put beside the exchange would land half in each tree
		return
	}
	if !a.running() {
		c.putIn(m, false)
		return
	}
	c.pauseWait = append(c.pauseWait, frozenWork{put: &m})
	c.pump(ctx)
}

// putIn extracts off the mailbox; a held put releases the freeze once the
// extraction is done.
func (c *copyPart) putIn(m Put, held bool) {
	a := c.a
	sb := a.sb
	go func() {
		err := a.engine.PutArchive(m.Ctx, sb, m.Dir, m.Tar)
		if held {
			a.send(pauseReleased{})
		}
		m.Reply <- err
	}()
}

// get reads a tar stream of the workspace. A consistent copy (Pause) of a
// running workload freezes it: the freeze is journaled (intent before the
// pause, fact after the unpause) and shared by every consistent copy open
// at the time; the workload thaws when the last of them is closed or its
// context ends. A copy without Pause, or of a workload that does not run,
// freezes nothing (Live says whether it was taken from a running workload).
func (c *copyPart) get(ctx actor.Context, m Get) {
	a := c.a
	if a.sb.ID == "" || a.state.Phase == lifecycle.PhaseRemoving || a.state.Phase == lifecycle.PhaseRemoved {
		m.Reply <- GetResult{Err: spec.Errorf(spec.CodeNotFound, "sandbox", "sandbox %s has no workspace (%s)", a.p.ID, a.state.Phase)}
		return
	}
	if err := a.pool.pooledErr(); err != nil {
		m.Reply <- GetResult{Err: err}
		return
	}
	if running := a.running(); !m.Pause || !running {
		c.copyOut(m, running, false)
		return
	}
	if err := a.rollback.rollingBackErr(); err != nil {
		// A freeze would stop the rollback's execs (Docker refuses an
		// exec into a paused workload) halfway.
		m.Reply <- GetResult{Err: err}
		return
	}
	c.pauseWait = append(c.pauseWait, frozenWork{get: &m})
	c.pump(ctx)
}

// pump moves the freeze on: freeze for waiting copies (once no
// launched process is still starting: Docker refuses to start an exec in a
// paused workload), hand them out once frozen, and let held launches go
// once thawed with nobody waiting.
func (c *copyPart) pump(ctx actor.Context) {
	a := c.a
	switch c.pause {
	case thawed:
		if len(c.pauseWait) > 0 && !a.running() {
			// Stopped while they waited: nothing runs to freeze.
			for _, w := range c.pauseWait {
				c.start(w, false, false)
			}
			c.pauseWait = nil
		}
		if len(c.pauseWait) > 0 {
			if len(c.starting) > 0 {
				return // startSettled pumps again
			}
			err := a.record(lifecycle.SandboxPausing{})
			if err == nil {
				c.pause = freezing
				c.tellFreeze(true)
				sb := a.sb
				a.goDocker(func(ctx context.Context) any { return pausedMsg{err: a.engine.PauseSandbox(ctx, sb)} })
				return
			}
			c.failWaiting(err)
		}
		held := c.heldLaunches
		c.heldLaunches = nil
		for _, l := range held {
			a.launch(ctx, l)
		}
		a.rollback.onThawed()
	case frozen:
		for _, w := range c.pauseWait {
			c.pauseHolds++
			c.start(w, false, true)
		}
		c.pauseWait = nil
		c.maybeThaw()
	case freezing, thawing:
		// A pause or unpause call is out: its answer (onPaused,
		// onUnpaused) pumps again.
	}
}

// startSettled notes that a launched process is past its start (running,
// or ended); a freeze waiting for the starts goes on once none is left.
func (c *copyPart) startSettled(ctx actor.Context, id string) {
	if !c.starting[id] {
		return
	}
	delete(c.starting, id)
	if len(c.starting) == 0 {
		c.pump(ctx)
	}
}

func (c *copyPart) onPaused(ctx actor.Context, m pausedMsg) {
	c.pause = frozen
	if m.err != nil {
		// The pause may or may not have happened: fail the copies and
		// thaw, which settles the journal either way.
		c.failWaiting(m.err)
	}
	c.pump(ctx)
}

func (c *copyPart) failWaiting(err error) {
	for _, w := range c.pauseWait {
		w.fail(err)
	}
	c.pauseWait = nil
}

// maybeThaw unpauses once no consistent copy is open or waiting.
func (c *copyPart) maybeThaw() {
	a := c.a
	if c.pause != frozen || c.pauseHolds > 0 || len(c.pauseWait) > 0 {
		return
	}
	c.pause = thawing
	sb := a.sb
	a.goDocker(func(ctx context.Context) any { return unpausedMsg{err: a.engine.UnpauseSandbox(ctx, sb)} })
}

func (c *copyPart) onUnpaused(ctx actor.Context, m unpausedMsg) {
	a := c.a
	if m.err != nil {
		a.deps.Log.Warn("unpausing the workload failed; trying again", "sandbox", a.p.ID, "err", m.err)
		c.pause = frozen
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
	c.pause = thawed
	c.tellFreeze(false)
	c.pump(ctx)
}

// tellFreeze tells every process that the workload is being frozen, or
// was thawed: their stop timers do not count frozen time (a frozen warden
// can neither kill nor report a reap).
func (c *copyPart) tellFreeze(frozen bool) {
	if frozen {
		c.freezes++
	}
	c.a.tellProcesses(process.Freeze{Frozen: frozen})
}

// copyOut reads the archive off the mailbox. A held copy (one of a freeze)
// releases its hold when closed or when its context ends, exactly once.
func (c *copyPart) copyOut(m Get, live, held bool) {
	a := c.a
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
