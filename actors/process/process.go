package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade/stockade/actors"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/internal/failpoint"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/recorder"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/warden"
)

// cutGrace is how long a stopping process's output may take to reach its
// end after the exec ended, before the streams are cut.
const cutGrace = time.Second

// Params is what a process actor is spawned with.
type Params struct {
	ID       string
	Sandbox  dockerio.Sandbox
	Spec     spec.Process
	Deadline time.Time
	// Launched receives the handle once the process runs, or the error
	// that stopped it from running. It is sent exactly once.
	Launched chan<- Launch
	// Adopt, if set, makes this a recovering actor for a process an
	// earlier runtime left live: it has no streams (an exec cannot be
	// re-attached) and settles the process from what Docker reports.
	Adopt *lifecycle.Process
	// Detach re-adopts a still-running process detached (its exit code is
	// recorded when it ends) instead of stopping it.
	Detach bool
	// Gated: the process may not start (attach) before a Verified message
	// without error arrives: its sandbox is being asserted active.
	Gated bool
	// Link, if set, is the sandbox's warden: the process is spawned by it
	// instead of a Docker exec (see warden.go).
	Link *warden.Link
	// Entry is the warden's table entry for a recovering process (nil: the
	// reattached warden does not know it); WardenGone says why no warden
	// could be reattached (see warden_adopt.go).
	Entry      *warden.Entry
	WardenGone error
}

// Verified tells a gated process whether its sandbox passed the check
// before launch; an error fails the process before it runs.
type Verified struct{ Err error }

// Launch is the answer to a launch.
type Launch struct {
	Handle *Handle
	Err    error
}

// Exited is sent to the parent (the sandbox actor) when the process is
// terminal and journaled so.
type Exited struct {
	ID     string
	Result spec.Result
}

// Abandoned is sent to the parent instead of Exited when the journal could
// not take the process's events: its outcome is not journaled, so its
// sandbox may not be journaled exited either.
type Abandoned struct {
	ID  string
	Err error
}

// Tracked is sent to the parent each time the process's journaled phase
// changes, with its group once known, so the sandbox can settle it (kill the
// group, journal its end) if this actor fails.
type Tracked struct {
	ID    string
	Phase lifecycle.Phase
	Group int
}

// AdoptSettled is sent to the parent when a recovering process actor has
// re-adopted a running exec (detached, or stopping it by option).
type AdoptSettled struct{ ID string }

// FailClosed is sent to the parent when the process's stream shows the
// daemon or the connection cannot be trusted (stream_failure): the whole
// sandbox stops.
type FailClosed struct {
	ID  string
	Err error
}

// Stop asks the process to stop its group: TERM, then KILL after the grace.
type Stop struct {
	Reason lifecycle.Reason
	Err    error // the typed error the result carries, if any
	Reply  chan<- error
}

// ExecDied tells the process that Docker reported an exec ended (an
// exec_die event of its sandbox's workload): if it is this process's exec,
// the actor confirms by inspecting it.
type ExecDied struct {
	ExecID   string
	ExitCode int
}

// Recheck tells a process whose end is awaited to inspect its exec again:
// the event stream broke and events may have been missed.
type Recheck struct{}

// Signal sends a signal to the process group.
type Signal struct {
	Sig   syscall.Signal
	Reply chan<- error
}

// Props returns the props of a process actor.
func Props(d *actors.Deps, p Params) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &processActor{deps: d, p: p}
	}, actor.WithSupervisor(actors.FailureStrategy()))
}

// Messages the actor posts to itself from its goroutines.
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
	oomChecked struct {
		kills int64
		err   error
	}
	graceExpired struct{ gen int }
	cutStreams   struct{}
	deadlineHit  struct{}
	stdinClose   struct{ reply chan<- error }
	signalled    struct {
		reply chan<- error
		err   error
	}
)

type processActor struct {
	deps   *actors.Deps
	p      Params
	self   *actor.PID
	parent *actor.PID
	sys    *actor.ActorSystem
	state  lifecycle.Process

	handle *Handle
	att    dockerio.Attachment
	wproc  *warden.Proc // the warden's process, in warden mode
	// killPending: a Docker-side kill of the group is under way (the
	// warden was lost); the exit is journaled after it.
	killPending bool
	out         *output
	outPID      *actor.PID
	outDone     *outputDone
	exit        *dockerio.ExecState
	// watching: the process's end is awaited (its output ended, or a stop
	// or an adoption asked); confirming: an inspect is in flight, and
	// dirty: an exec_die came meanwhile, so ask again once it answers.
	watching     bool
	diedCode     *int // the exec_die event's exit code, once seen
	awaitedDie   bool // the exec was unknown once and its exec_die awaited
	confirming   bool
	dirty        bool
	recheck      *time.Timer
	recheckGen   int
	recheckDelay time.Duration
	// oomBase is the sandbox's OOM kill count at the start (-1: unknown);
	// killSent: stockade itself sent the group SIGKILL; oom: the OOM
	// killer ended the process (checked once, off the mailbox).
	oomBase    int64
	killSent   bool
	oomChecked *oomChecked
	oomAsked   bool
	// journalErr is the journal failure the actor gave up on.
	journalErr error
	bg         context.Context // background Docker work; cancelled at stop
	cancel     context.CancelFunc

	cut        bool // the streams were cut by us (see maybeFinish)
	cutArmed   bool
	stopReason lifecycle.Reason
	stopErr    error
	signalled  bool
	graceGen   int
	timers     []*time.Timer
	// stopTimers count thawed time only; frozen: the workload is frozen
	// for a consistent copy (freeze.go).
	stopTimers []*thawedTimer
	frozen     bool
	started    time.Time
	launched   bool
	done       bool
	abandoned  bool
	verified   bool // the sandbox passed its check before launch
	attaching  bool
	// attachFailed: the attach failed, perhaps after the exec started;
	// endedUnattached: the exec's end, seen before its group was read;
	// groupReading, groupReads, failedClosed, probing, groupGone,
	// codeUnknown: see doubts.go.
	attachFailed    bool
	endedUnattached *dockerio.ExecState
	groupReading    bool
	groupReads      int
	failedClosed    bool
	probing         bool
	groupGone       bool
	codeUnknown     bool
}

func (a *processActor) send(msg any) { a.sys.Root.Send(a.self, msg) }

// record journals ev for this process and folds it.
// record journals ev and folds it (actors.RecordFolded: an event the fold
// refuses is never journaled; a stream that moved on is caught up with).
func (a *processActor) record(ev lifecycle.Event) error {
	next, _, err := actors.RecordFolded(a.deps, journal.KindProcess, a.p.ID, a.p.Sandbox.ID, a.state, processSeq, lifecycle.ApplyProcess, ev)
	var illegal *lifecycle.IllegalTransition
	if errors.As(err, &illegal) {
		// An event this actor should never ask for: a bug, never hidden
		// (the sandbox settles the process when this actor fails).
		panic(fmt.Sprintf("process %s: an event the fold refuses: %v", a.p.ID, err))
	}
	if next.Phase != a.state.Phase || next.Group != a.state.Group {
		a.sys.Root.Send(a.parent, Tracked{ID: a.p.ID, Phase: next.Phase, Group: next.Group})
	}
	a.state = next
	return err
}

func processSeq(p lifecycle.Process) uint64 { return p.Seq }

func (a *processActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.self, a.parent, a.sys = ctx.Self(), ctx.Parent(), ctx.ActorSystem()
		a.state.ID = a.p.ID
		a.bg, a.cancel = context.WithCancel(context.Background())
		a.oomBase = -1
		if a.p.Adopt != nil {
			a.adopt()
			return
		}
		a.start(a.bg)
	case execCreated:
		a.onExecCreated(ctx, m)
	case wardenSpawned:
		a.onWardenSpawned(ctx, m)
	case spawnLost:
		a.onSpawnLost(m)
	case groupKilled:
		a.killPending = false
		if m.failed != nil && a.stopReason == lifecycle.ReasonLost {
			a.stopErr = spec.Wrap(spec.CodeStreamFailure, "process", m.failed, "process %s: the sandbox's warden was lost, and killing its process group failed (it may run until its sandbox stops)", a.p.ID)
		}
		if m.workloadGone && a.stopReason == lifecycle.ReasonLost {
			// The warden went down with its workload: the sandbox
			// stopped under the process.
			a.stopReason = lifecycle.ReasonSandboxStopped
			a.stopErr = spec.Errorf(spec.CodeCancelled, "process", "process %s: its sandbox's workload stopped", a.p.ID)
		}
		a.maybeFinish()
	case wardenReaped:
		a.onWardenReaped(m)
	case wardenResumed:
		a.onWardenResumed(ctx, m)
	case Resize:
		a.resize(m)
	case Verified:
		a.onVerified(m)
	case attached:
		a.onAttached(ctx, m)
	case outputDone:
		a.onOutputDone(m)
	case exitSeen:
		a.onExitSeen(m)
	case ExecDied:
		if m.ExecID == a.state.ExecID {
			code := m.ExitCode
			a.diedCode = &code
			if a.watching {
				a.confirmExit()
			}
		}
	case Recheck:
		if a.watching {
			a.confirmExit()
		}
	case recheckDue:
		if m.gen == a.recheckGen && a.watching {
			a.confirmExit()
		}
	case oomChecked:
		a.oomChecked = &m
		a.maybeFinish()
	case adoptSeen:
		a.onAdoptSeen(m)
	case groupRead:
		a.onGroupRead(m)
	case startedGroupRead:
		a.onStartedGroupRead(m)
	case groupProbed:
		a.onGroupProbed(m)
	case Stop:
		a.stop(m.Reason, m.Err)
		m.Reply <- a.journalErr
	case Signal:
		a.signal(m)
	case GetHandle:
		m.Reply <- a.handleFor()
	case signalled:
		m.reply <- m.err
	case stdinClose:
		m.reply <- a.closeStdin()
	case cutStreams:
		if !a.done && a.outDone == nil && a.out != nil {
			a.cut = true
			err := a.stopErr
			if err == nil {
				err = spec.Errorf(spec.CodeCancelled, "process", "process %s was stopped; its output was cut", a.p.ID)
			}
			a.out.closePipes(err)
			a.att.Close() // outputDone follows promptly
		}
	case Freeze:
		a.onFreeze(m)
	case graceExpired:
		if m.gen == a.graceGen && !a.done && !a.heldByFreeze(m) {
			a.signalGroup(syscall.SIGKILL, nil)
			if a.wproc != nil && a.exit == nil {
				// A warden that does not report the KILLed process reaped
				// in time (frozen time not counted) is stopped (SIGSTOP)
				// or wedged, or lost track of this one process.
				a.after(a.deps.Config.StopGrace+5*time.Second, killUnseen{gen: m.gen})
			}
		}
	case killUnseen:
		if m.gen == a.graceGen && !a.done && a.exit == nil && a.wproc != nil && !a.heldByFreeze(m) {
			a.giveUp()
		}
	case deadlineHit:
		if !a.done {
			a.stop(lifecycle.ReasonTimeout, spec.Errorf(spec.CodeTimeout, "process", "process %s outlived its timeout of %v", a.p.ID, a.p.Spec.Timeout))
		}
	case abandoned:
		if !a.done {
			a.stop(lifecycle.ReasonCancelled, errAbandoned)
		}
	case actors.ChildFailed:
		// The output stream actor panicked: the process fails, nothing else.
		a.fail(spec.Errorf(spec.CodeStreamFailure, "process", "output stream actor failed: %v", m.Reason))
	case *actor.Stopping:
		for _, t := range a.timers {
			t.Stop()
		}
		a.stopStopTimers()
		if a.recheck != nil {
			a.recheck.Stop()
		}
		a.cancel()
		if !a.done {
			a.detach()
		}
		if a.att != nil {
			a.att.Close()
		}
	}
}

// start journals the reservation and creates the exec.
func (a *processActor) start(bg context.Context) {
	a.started = a.deps.Now()
	if err := a.record(lifecycle.ProcessReserved{Sandbox: a.p.Sandbox.ID, Spec: a.p.Spec, Deadline: a.p.Deadline}); err != nil {
		a.answer(Launch{Err: err})
		a.done = true
		a.sys.Root.Stop(a.self)
		return
	}
	failpoint.Hit(failpoint.ProcessReserved)
	if !a.p.Deadline.IsZero() {
		a.timers = append(a.timers, time.AfterFunc(time.Until(a.p.Deadline), func() { a.send(deadlineHit{}) }))
	}
	if a.p.Link != nil {
		a.spawnWarden(bg)
		return
	}
	sb, req := a.p.Sandbox, dockerio.ExecRequest{ProcessID: a.p.ID, Spec: a.p.Spec}
	go func() {
		ctx, cancel := context.WithTimeout(bg, a.deps.Config.DockerTimeout)
		defer cancel()
		id, err := a.deps.Engine.CreateExec(ctx, sb, req)
		a.send(execCreated{id: id, err: err})
	}()
}

func (a *processActor) onExecCreated(ctx actor.Context, m execCreated) {
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
	if a.stopReason != "" { // stopped (timeout, sandbox stop) before it ran
		a.finish(a.stopReason, -1, a.stopErr)
		return
	}
	a.maybeAttach()
}

func (a *processActor) onVerified(m Verified) {
	if a.done || a.verified {
		return
	}
	if m.Err != nil {
		// The sandbox is not what it was: nothing starts. The exec, if
		// created, never ran: no exit code.
		a.finish(lifecycle.ReasonFailed, -1, m.Err)
		return
	}
	a.verified = true
	a.maybeAttach()
}

// maybeAttach attaches (which starts the process) once the exec is created
// and, for a gated process, the sandbox verified.
func (a *processActor) maybeAttach() {
	if a.done || a.state.ExecID == "" || a.attaching { // the exec is not journaled yet
		return
	}
	if a.stopReason != "" { // stopped before it ran: nothing starts
		a.finish(a.stopReason, -1, a.stopErr)
		return
	}
	if a.p.Gated && !a.verified {
		return
	}
	a.attaching = true
	id := a.state.ExecID
	sb, req := a.p.Sandbox, dockerio.ExecRequest{ProcessID: a.p.ID, Spec: a.p.Spec}
	bg := a.bg
	go func() {
		actx, cancel := context.WithTimeout(bg, a.deps.Config.DockerTimeout)
		defer cancel()
		att, err := a.deps.Engine.AttachExec(actx, sb, id, req)
		if err == nil && bg.Err() != nil {
			att.Close() // the actor is gone: nobody would close it
			return
		}
		a.send(attached{att: att, err: err})
	}()
}

func (a *processActor) onAttached(ctx actor.Context, m attached) {
	if m.err != nil {
		if a.done {
			return
		}
		// The attach may have started the process: learn its fate rather
		// than invent an exit code. A stop already asked keeps its reason.
		if a.stopReason == "" {
			a.stopReason, a.stopErr = lifecycle.ReasonFailed, m.err
		}
		a.attachFailed = true
		a.watchExit()
		return
	}
	a.att = m.att
	if a.done {
		m.att.Close()
		return
	}
	failpoint.Hit(failpoint.ProcessAttached)
	oom := m.att.OOMKills()
	a.oomBase = oom
	started := lifecycle.ProcessStarted{Group: m.att.Group(), OOMKills: &oom}
	if a.wproc != nil {
		started.PID, started.Warden = a.wproc.PID, true
	}
	if err := a.record(started); err != nil {
		// No kill without a journaled intent: the process runs on, its
		// output discarded (the attachment is closed), and the journal,
		// which holds its exec, lets the next recovery settle it.
		a.abandonJournal(err)
		return
	}
	hwm := a.deps.Config.HighWaterMark
	out := a.newOutput(m.att, nil)
	h := &Handle{ID: a.p.ID, pid: a.self, sys: a.sys, done: make(chan struct{})}
	notify := func() { a.send(abandoned{}) }
	if a.p.Spec.Stdout == spec.Pipe {
		out.stdout = newPipe(hwm, notify)
		h.stdout = out.stdout
	}
	if a.p.Spec.Stderr == spec.Pipe {
		out.stderr = newPipe(hwm, notify)
		h.stderr = out.stderr
	}
	if a.p.Spec.Stdin {
		h.stdin = &stdinWriter{w: m.att.Stdin(), h: h}
	}
	a.handle = h
	if !a.spawnOutput(ctx, out) {
		return
	}
	a.answer(Launch{Handle: h})
	if a.stopReason != "" { // a stop arrived while launching
		reason, err := a.stopReason, a.stopErr
		a.stopReason = ""
		a.stop(reason, err)
	}
}

type abandoned struct{}

// newOutput is the stream actor of att; rec is a resumed recording (nil:
// the read loop makes one).
func (a *processActor) newOutput(att dockerio.Attachment, rec *recorder.Recording) *output {
	quota := a.p.Spec.OutputQuota
	if quota <= 0 {
		quota = a.deps.Config.OutputQuota
	}
	return &output{att: att, quota: quota, store: a.deps.Recorder, rec: rec, id: a.p.ID, bounds: a.p.Spec.Record, log: a.deps.Log, loops: a.deps.Loops}
}

// spawnOutput starts the stream actor (its read loop); false: it could not
// be spawned, and the process has failed.
func (a *processActor) spawnOutput(ctx actor.Context, out *output) bool {
	a.out = out
	pid, err := ctx.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return out }), "output")
	if err != nil {
		a.fail(spec.Wrap(spec.CodeStreamFailure, "process", err, "spawning the output stream actor"))
		return false
	}
	a.outPID = pid
	return true
}

func (a *processActor) onOutputDone(m outputDone) {
	a.outDone = &m
	if a.done {
		return
	}
	if a.wproc != nil && errors.Is(m.err, warden.ErrLinkClosed) {
		return // the runtime is closing: the detach follows, nothing is journaled
	}
	switch {
	case m.err == nil:
	case a.cut:
		// We cut the streams of a stopping process whose exec had ended:
		// whatever error the read loop saw is ours, not the daemon's.
	case m.quotaHit:
		if err := a.record(lifecycle.QuotaHit{Bytes: m.stdout + m.stderr}); err != nil {
			a.abandonJournal(err)
			return
		}
		a.kill(lifecycle.ReasonOutputLimit, m.err)
	case spec.IsCode(m.err, spec.CodeOutputLimit):
		a.kill(lifecycle.ReasonOutputLimit, m.err)
	case spec.IsCode(m.err, spec.CodeCancelled):
		a.stop(lifecycle.ReasonCancelled, m.err)
	case m.panicked:
		a.fail(m.err)
	case a.wproc != nil:
		// The warden's link broke (or the warden broke the protocol): not
		// the daemon's stream, so nothing to fail closed; the sandbox
		// replaces its warden.
		a.wardenLost(m.err)
	default:
		// The stream cannot be trusted: fail closed.
		a.fail(m.err)
		a.sys.Root.Send(a.parent, FailClosed{ID: a.p.ID, Err: m.err})
	}
	a.watchExit()
	a.maybeFinish()
}

// stop starts stopping the process: the stopping intent is journaled, then
// TERM goes to the group and KILL follows after the grace period. If the
// intent cannot be journaled nothing is signalled: the actor gives up
// (journalErr) and leaves the process to the next recovery.
func (a *processActor) stop(reason lifecycle.Reason, err error) {
	if a.done || a.stopReason != "" {
		return
	}
	a.stopReason, a.stopErr = reason, err
	if a.state.Phase != lifecycle.PhaseStarted {
		a.maybeAttach() // an exec waiting to start now never will
		return          // otherwise the launch path honours stopReason
	}
	if jerr := a.record(lifecycle.ProcessStopping{Reason: reason}); jerr != nil {
		a.abandonJournal(jerr)
		return
	}
	failpoint.Hit(failpoint.ProcessStopping)
	a.signalGroup(syscall.SIGTERM, nil)
	a.graceGen++
	gen := a.graceGen
	a.after(a.deps.Config.StopGrace, graceExpired{gen: gen})
	a.watchExit()
}

// kill stops the group at once (output limit, failure): no grace.
func (a *processActor) kill(reason lifecycle.Reason, err error) {
	if a.done {
		return
	}
	if a.stopReason == "" {
		if a.stop(reason, err); a.done {
			return
		}
	}
	a.signalGroup(syscall.SIGKILL, nil)
}

// fail ends the process with reason failed and err's code.
func (a *processActor) fail(err error) { a.kill(lifecycle.ReasonFailed, err) }

func (a *processActor) signal(m Signal) {
	if a.done || a.state.Phase != lifecycle.PhaseStarted && a.state.Phase != lifecycle.PhaseStopping {
		m.Reply <- spec.Errorf(spec.CodeNotFound, "process", "process %s is not running", a.p.ID)
		return
	}
	a.signalled = true
	a.signalGroup(m.Sig, m.Reply)
}

// signalGroup signals the process group from a second exec, off the
// mailbox; the reply (if any) arrives through a signalled message.
func (a *processActor) signalGroup(sig syscall.Signal, reply chan<- error) {
	if sig == syscall.SIGKILL {
		a.killSent = true
	}
	if a.wproc != nil {
		a.signalWarden(sig, reply)
		return
	}
	pgid := a.state.Group
	if a.att != nil {
		pgid = a.att.Group()
	}
	if pgid <= 0 {
		if reply != nil {
			reply <- spec.Errorf(spec.CodeNotFound, "process", "process %s has no process group yet", a.p.ID)
		}
		return
	}
	sb, bg := a.p.Sandbox, a.bg
	go func() {
		err := a.whileFrozen(bg, func(ctx context.Context) error { return a.deps.Engine.SignalGroup(ctx, sb, pgid, sig) })
		if err != nil && reply == nil && !spec.IsCode(err, spec.CodeNotFound) {
			a.deps.Log.Warn("signalling a process group failed", "process", a.p.ID, "signal", sig, "err", err)
		}
		if reply != nil {
			a.send(signalled{reply: reply, err: err})
		}
	}()
}

// whileFrozen makes a Docker call that needs an exec, again and again while
// the workload is paused for a consistent copy (Docker refuses execs into
// it), so a signal or a read is delayed by a freeze, never lost. It gives
// up when the actor stops (bg ends).
func (a *processActor) whileFrozen(bg context.Context, call func(context.Context) error) error {
	delay := 50 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(bg, a.deps.Config.DockerTimeout)
		err := call(ctx)
		cancel()
		if !errors.Is(err, dockerio.ErrPaused) || !actors.Sleep(bg, delay) {
			return err
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// watchExit starts waiting, off the mailbox, for the exec's end. The
// output's end is not the process's end (a process may close its stdout and
// go on), so the end is learned from Docker: its exec_die event (forwarded
// by the sandbox as ExecDied) says when, an inspect confirms. One inspect at
// the start catches an exec that already ended; a slow recheck (1 s,
// doubling to 30 s) covers an event the daemon dropped. No polling loop.
func (a *processActor) watchExit() {
	if a.watching || a.state.ExecID == "" {
		return
	}
	a.watching = true
	a.confirmExit()
}

// confirmExit inspects the exec off the mailbox. A daemon that cannot
// answer is asked again (backing off to 5 s) until it can: daemon trouble
// is never taken for the process's end.
func (a *processActor) confirmExit() {
	if a.done {
		return
	}
	if a.confirming {
		a.dirty = true
		return
	}
	a.confirming, a.dirty = true, false
	id, ctx := a.state.ExecID, a.bg
	go func() {
		delay := 100 * time.Millisecond
		for {
			ictx, cancel := context.WithTimeout(ctx, a.deps.Config.DockerTimeout)
			st, err := a.deps.Engine.InspectExec(ictx, id)
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

func (a *processActor) onExitSeen(m exitSeen) {
	a.confirming = false
	if a.done {
		return
	}
	switch {
	case m.state.Known && m.state.Running:
		if a.dirty { // an exec_die arrived while the inspect was out
			a.confirmExit()
			return
		}
		if a.attachFailed && a.state.Phase == lifecycle.PhaseReserved {
			a.readStartedGroup() // it runs, unattached: end it (doubts.go)
			return
		}
		if a.attachFailed && a.state.Phase == lifecycle.PhaseStopping && a.killSent {
			a.signalGroup(syscall.SIGKILL, nil) // the kill may have failed: again
		}
		a.recheckBackoff()
		return
	case !m.state.Known && a.state.Phase != lifecycle.PhaseReserved && a.diedCode != nil:
		// Docker forgets a container's execs when it exits, and any exec's
		// record minutes after it ends: the exec_die event's code (which an
		// image cannot forge: such labels are refused) is the answer.
		m.state = dockerio.ExecState{Known: true, ExitCode: *a.diedCode, Pid: a.state.Group}
	case !m.state.Known && a.state.Phase != lifecycle.PhaseReserved && !a.awaitedDie:
		// Forgotten before its exec_die reached us: wait a moment for the
		// event (or the next inspect) before the outcome is called lost.
		a.awaitedDie = true
		a.armRecheck(time.Second)
		return
	}
	if a.attachFailed && a.state.Phase == lifecycle.PhaseReserved && m.state.Known && !m.state.Running && m.state.Pid != 0 &&
		m.state.ExitCode == 126 && !spec.IsCode(a.stopErr, spec.CodeExecFailed) {
		// Ended 126 after an attach cut past the daemon's start: maybe a
		// phantom while it runs on. Its group decides (doubts.go).
		st := m.state
		a.endedUnattached = &st
		a.readStartedGroup()
		return
	}
	if a.doubt126(&m.state) {
		return
	}
	a.exit = &m.state
	a.maybeFinish()
}

// armRecheck inspects the exec again after d, unless an exec_die comes
// first.
func (a *processActor) armRecheck(d time.Duration) {
	a.recheckGen++
	gen := a.recheckGen
	if a.recheck != nil {
		a.recheck.Stop()
	}
	a.recheck = time.AfterFunc(d, func() { a.send(recheckDue{gen: gen}) })
}

// maybeFinish journals the exit once both the exec's end and the output's
// end are known. A stopping process whose exec ended does not wait for a
// consumer that no longer reads: its streams are cut.
func (a *processActor) maybeFinish() {
	if a.done || a.exit == nil || a.killPending {
		return
	}
	if a.out != nil && a.outDone == nil {
		if a.stopReason == "" || a.cutArmed {
			return // the consumer is still reading what the process wrote
		}
		// Stopping and the exec has ended: give the output a moment to
		// reach its end, then cut it for a consumer that no longer reads.
		a.cutArmed = true
		a.timers = append(a.timers, time.AfterFunc(cutGrace, func() { a.send(cutStreams{}) }))
		return
	}
	code := -1
	if a.exit.Known && a.exit.Pid != 0 && !a.codeUnknown {
		// Pid 0: the exec never started (its ExitCode reads 0 but means
		// nothing): no code is invented.
		code = a.exit.ExitCode
	}
	if a.oomSuspect(code) && a.oomChecked == nil {
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
	return code == 128+int(syscall.SIGKILL) && !a.killSent && !a.signalled && a.stopReason == "" && a.oomBase >= 0
}

// checkOOM reads the sandbox's OOM kill count, off the mailbox.
func (a *processActor) checkOOM() {
	if a.oomAsked {
		return
	}
	a.oomAsked = true
	sb, bg := a.p.Sandbox, a.bg
	go func() {
		var n int64
		err := a.whileFrozen(bg, func(ctx context.Context) (err error) {
			n, err = a.deps.Engine.OOMKills(ctx, sb)
			return err
		})
		a.send(oomChecked{kills: n, err: err})
	}()
}

// outcome decides the exit reason from what was asked and what was seen.
func (a *processActor) outcome(code int) (lifecycle.Reason, error) {
	switch {
	case a.stopReason != "" && a.stopReason != lifecycle.ReasonSignaled:
		return a.stopReason, a.stopErr
	case !a.exit.Known:
		return lifecycle.ReasonLost, spec.Errorf(spec.CodeEngine, "process", "the daemon no longer knows exec %s; its outcome is lost", a.state.ExecID)
	case a.oomChecked != nil && a.oomChecked.err == nil && a.oomChecked.kills > a.oomBase:
		// The sandbox's OOM kill count rose during the process's life and
		// it died of a SIGKILL nobody of ours sent. With several processes
		// in the sandbox the attribution can be wrong (cgroup v1 names no
		// process): README says so.
		return lifecycle.ReasonOOM, nil
	case a.oomChecked != nil && a.oomChecked.err != nil:
		a.deps.Log.Warn("could not read the OOM kill count; the SIGKILL stays unexplained", "process", a.p.ID, "err", a.oomChecked.err)
	case a.stopReason == lifecycle.ReasonSignaled || a.signalled && code > 128:
		return lifecycle.ReasonSignaled, nil
	}
	var head []byte // an adopted process has no output to read
	if a.outDone != nil {
		head = a.outDone.head
	}
	if a.wproc != nil {
		// The warden reports a failed spawn itself: a 126 or 127 here is
		// the program's own exit code.
		head = nil
	}
	if err := dockerio.ExecFailure(code, head); err != nil {
		return lifecycle.ReasonFailed, err
	}
	return lifecycle.ReasonExited, nil
}

// finish journals the exit, tells the waiters and the parent, and stops.
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
	if a.outDone != nil {
		ev.StdoutBytes, ev.StderrBytes = a.outDone.stdout, a.outDone.stderr
	}
	if a.wproc != nil && a.p.Adopt != nil {
		// A re-adopted process's read loop saw only what came after the
		// resume: the warden counted every byte by stream. (A process
		// this runtime read from the start keeps the counts of what it
		// took: with a quota hit, the warden read more than was taken.)
		if ex, ok := a.wproc.Exit(); ok {
			ev.StdoutBytes, ev.StderrBytes = int64(ex.Stdout), int64(ex.Stderr)
		}
	}
	if jerr := a.record(ev); jerr != nil {
		a.abandonJournal(jerr)
		return
	}
	a.out.sealRecording() // the exit is journaled: the recording may say complete
	if a.wproc != nil {
		// Journaled: the warden may drop it (off the mailbox). A lost
		// process's too: one given up alone while its link lives is then
		// killed and dropped by the warden (stockade-warden/3), not left a
		// stray holding a window; on an ended link Forget sends nothing.
		go func(p *warden.Proc) { p.Forget(); failpoint.Hit(failpoint.ProcessForgetSent) }(a.wproc)
	}
	res := spec.Result{ExitCode: code, Reason: string(reason), Err: err, StdoutBytes: ev.StdoutBytes,
		StderrBytes: ev.StderrBytes, Started: a.started, Ended: a.state.At}
	a.end(res)
}

// abandonJournal ends the actor when the journal cannot take its events:
// nothing is reported done, and the entity stays live in the journal for
// the next recovery to settle. The parent is told it was abandoned, not
// that it exited, so the sandbox does not journal its own exit over it.
func (a *processActor) abandonJournal(err error) {
	a.abandoned, a.journalErr = true, err
	a.out.leaveRecording() // no exit journaled: not complete, resumable
	if a.att != nil {
		a.att.Close() // the process runs on; Docker discards its output
	}
	a.end(spec.Result{ExitCode: -1, Reason: string(lifecycle.ReasonFailed), Err: err, Started: a.started, Ended: a.deps.Now()})
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
	if a.handle != nil {
		a.handle.result = res
		close(a.handle.done)
	}
	if a.abandoned {
		a.sys.Root.Send(a.parent, Abandoned{ID: a.p.ID, Err: res.Err})
	} else {
		a.sys.Root.Send(a.parent, Exited{ID: a.p.ID, Result: res})
	}
	a.sys.Root.Stop(a.self)
}

// detach lets go of a process that is still running because the runtime
// is closing: nothing is journaled (the process stays live in the journal
// for the next runtime), and the caller's streams and Wait end with a
// cancelled error instead of hanging.
func (a *processActor) detach() {
	a.done = true
	if a.out != nil {
		a.out.detaching.Store(true)
	}
	a.out.leaveRecording()
	err := spec.Errorf(spec.CodeCancelled, "process", "the process actor stopped (the runtime closed, or the actor failed) before process %s ended; it is left to its sandbox and the next recovery", a.p.ID)
	if a.out != nil {
		a.out.closePipes(err)
	}
	if !a.launched {
		a.answer(Launch{Err: err})
	}
	if a.handle != nil {
		a.handle.result = spec.Result{ExitCode: -1, Err: err, Started: a.started, Ended: a.deps.Now()}
		close(a.handle.done)
	}
}

func (a *processActor) answer(l Launch) {
	if a.launched {
		return
	}
	a.launched = true
	a.p.Launched <- l
}

func (a *processActor) closeStdin() error {
	if a.att == nil || a.done {
		return spec.Errorf(spec.CodeNotFound, "process", "process %s is not running", a.p.ID)
	}
	if a.state.StdinClosed {
		return nil
	}
	if err := a.att.CloseStdin(); err != nil {
		return err
	}
	return a.record(lifecycle.StdinClosed{})
}

var _ io.Writer = (*stdinWriter)(nil)

type (
	adoptSeen struct {
		state dockerio.ExecState
		err   error
	}
	groupRead struct {
		pgid int
		err  error
	}
)

// adopt settles a process an earlier runtime left live, by DESIGN.md's
// recovery table: a running exec is re-adopted detached (or stopped, by
// option); an exec journaled as created that runs has its group read back
// from the sandbox's tmpfs and is journaled started; an exec Docker no
// longer knows ends lost. No exit code is ever invented.
func (a *processActor) adopt() {
	a.state = *a.p.Adopt
	a.state.ID = a.p.ID
	if a.state.Phase != lifecycle.PhaseReserved {
		a.oomBase = a.state.OOMKills
	}
	a.started = a.state.Reserved
	a.launched = true // nobody waits for a launch
	if a.state.Phase == lifecycle.PhaseStopping {
		a.stopReason = a.state.Stopping
	}
	if a.state.Warden || a.state.ExecID == "" && (a.p.Link != nil || a.p.WardenGone != nil) {
		a.adoptWarden()
		return
	}
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
			st, err := a.deps.Engine.InspectExec(ctx, id)
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

func (a *processActor) onAdoptSeen(m adoptSeen) {
	if a.done {
		return
	}
	if m.err != nil && !spec.IsCode(m.err, spec.CodeNotFound) {
		// The daemon cannot say: the process may still run. It stays live
		// (never declared lost on a guess) and is watched until it can.
		if a.decided("unobservable: watching", m.err.Error()) {
			a.watchExit()
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
		a.readAdoptedGroup()
	case !st.Running && st.ExitCode == 126 && a.state.Group > 1:
		// The earlier runtime's attach dropped with it: Docker's 126 may be
		// a phantom while the process runs on (doubts.go). Watch it.
		if a.decided("doubt the 126: watch", seen) {
			a.watchExit()
			a.sys.Root.Send(a.parent, AdoptSettled{ID: a.p.ID})
		}
	case !st.Running:
		reason := lifecycle.ReasonExited
		if a.stopReason != "" {
			reason = a.stopReason
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
		a.readAdoptedGroup()
	default:
		decision := "re-adopt detached"
		if !a.p.Detach {
			decision = "stop"
		}
		if a.decided(decision, seen) {
			a.adoptRunning()
		}
	}
}

// decided journals a recovery decision with what was observed, so History
// explains what recovery did and why. false: the journal failed and the
// actor has given up.
func (a *processActor) decided(decision, observed string) bool {
	r := lifecycle.Recovered{Decision: decision, Observed: observed}
	if lifecycle.Repeats(a.state.Recovered, r) {
		return true // the last recovery decided the same on the same sight
	}
	if err := a.record(r); err != nil {
		a.abandonJournal(err)
		return false
	}
	return true
}

// readGroup reads the process's group back from the sandbox's tmpfs, off
// the mailbox; reply makes the message that brings the answer.
func (a *processActor) readGroup(reply func(pgid int, err error) any) {
	sb, pid, bg := a.p.Sandbox, a.p.ID, a.bg
	go func() {
		ctx, cancel := context.WithTimeout(bg, a.deps.Config.DockerTimeout)
		defer cancel()
		pgid, err := a.deps.Engine.ReadGroup(ctx, sb, pid)
		a.send(reply(pgid, err))
	}()
}

// readAdoptedGroup reads a recovered process's group (groupRead follows).
func (a *processActor) readAdoptedGroup() {
	a.readGroup(func(pgid int, err error) any { return groupRead{pgid: pgid, err: err} })
}

// recheckBackoff inspects the exec again later, each time twice as late
// (1 s to 30 s): a process that runs on is watched ever more lazily.
func (a *processActor) recheckBackoff() {
	a.recheckDelay = min(max(2*a.recheckDelay, time.Second), 30*time.Second)
	a.armRecheck(a.recheckDelay)
}

func (a *processActor) onGroupRead(m groupRead) {
	if a.done {
		return
	}
	if m.err != nil {
		// Running, but its group cannot be known: it cannot be signalled.
		// Keep watching it; the sandbox's stop ends it.
		a.deps.Log.Warn("recovered process has no readable group", "process", a.p.ID, "err", m.err)
		a.watchExit()
		a.sys.Root.Send(a.parent, AdoptSettled{ID: a.p.ID})
		return
	}
	if err := a.record(lifecycle.ProcessStarted{Group: m.pgid}); err != nil {
		a.abandonJournal(err)
		return
	}
	a.adoptRunning()
}

// adoptRunning re-adopts a running exec: detached, or stopped by option.
func (a *processActor) adoptRunning() {
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
	if !a.p.Deadline.IsZero() {
		a.timers = append(a.timers, time.AfterFunc(time.Until(a.p.Deadline), func() { a.send(deadlineHit{}) }))
	}
	a.watchExit()
	a.sys.Root.Send(a.parent, AdoptSettled{ID: a.p.ID})
}
