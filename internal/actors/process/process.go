package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/internal/actors"
	"github.com/stockade/stockade/internal/failpoint"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/recorder"
	"github.com/stockade/stockade/spec"
)

// cutGrace is how long a stopping process's output may take to reach its
// end after the exec ended, before the streams are cut.
const cutGrace = time.Second

// engine is what a process actor asks of Docker: its exec (the exec
// transport; the warden transport signals a group through it when the link
// is gone) and a readback of its sandbox, nothing of the sandbox's own life.
type engine interface {
	dockerio.Execs
	VerifySandbox(ctx context.Context, sb dockerio.Sandbox) error
}

// Props returns the props of a process actor.
func Props(d *actors.Deps, p Params) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &processActor{deps: d, engine: d.Engine, p: p}
	}, actor.WithSupervisor(actors.FailureStrategy()))
}

// Messages the actor posts to itself (its timers, its goroutines); the
// transports' own are in exec.go, warden.go and doubts.go.
type (
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
	abandoned struct{}
)

// processActor is one process's lifecycle: reserved → started → stopping →
// exited (or lost), each step journaled in write-ahead order, with stop,
// kill, deadline, freeze and the recording's settling. How the process
// runs and how its end is learned is its transport's (transport.go).
type processActor struct {
	deps   *actors.Deps
	engine engine // deps.Engine, seen through the roles a process uses
	p      Params
	self   *actor.PID
	parent *actor.PID
	sys    *actor.ActorSystem
	state  lifecycle.Process
	tr     transport
	bg     context.Context // background Docker work; cancelled at stop
	cancel context.CancelFunc

	started time.Time
	// done: the actor has ended the process (journaled, abandoned or
	// detached) and does nothing more; launched: the launch is answered;
	// verified: the sandbox passed its check before launch.
	done, launched, verified bool
	// abandoned: the journal could not take the process's events;
	// journalErr is the failure it gave up on.
	abandoned  bool
	journalErr error

	streams  streams
	stopping stopping
	exit     ending
	timers   // embedded: freeze.go (and its test) use its thawed timers
}

// streams is the process's output and input once it runs.
type streams struct {
	handle  *Handle
	att     dockerio.Attachment
	out     *output
	outPID  *actor.PID
	outDone *outputDone // the read loop's end, once reported
	// cut: the streams were cut by us (see maybeFinish); cutArmed: the
	// cut is due after cutGrace.
	cut, cutArmed bool
	// stdin records what the caller wrote to stdin (nil: no stdin, or no
	// recorder); closed before the exit is journaled.
	stdin *recorder.StdinRecording
}

// stopping is what was asked of the process: a stop (its reason and the
// typed error the result carries), signals, a KILL.
type stopping struct {
	reason lifecycle.Reason
	err    error
	// signalled: the caller signalled the group; killSent: stockade
	// itself sent the group SIGKILL.
	signalled, killSent bool
	graceGen            int // the current stop's grace timer
}

// ending is what is known of the process's end.
type ending struct {
	state *dockerio.ExecState // the end, once known
	// codeUnknown: the end is known, its code is not (doubts.go).
	codeUnknown bool
	// oomBase is the sandbox's OOM kill count at the start (-1: unknown);
	// oom is the count after a SIGKILL nobody of ours sent (checked once,
	// off the mailbox: oomAsked).
	oomBase  int64
	oom      *oomChecked
	oomAsked bool
}

// timers are the actor's timers, all stopped when it stops.
type timers struct {
	all []*time.Timer // the deadline, the cut
	// stopTimers count thawed time only; frozen: the workload is frozen
	// for a consistent copy (freeze.go).
	stopTimers []*thawedTimer
	frozen     bool
	recheck    *time.Timer // an exec's next inspect (exec.go)
}

func (a *processActor) send(msg any) { a.sys.Root.Send(a.self, msg) }

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

// Receive handles the lifecycle; every other message is its transport's.
func (a *processActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.self, a.parent, a.sys = ctx.Self(), ctx.Parent(), ctx.ActorSystem()
		a.state.ID = a.p.ID
		a.bg, a.cancel = context.WithCancel(context.Background())
		a.exit.oomBase = -1
		a.tr = a.newTransport()
		if a.p.Adopt != nil {
			a.adopt()
			return
		}
		a.start()
	case Verified:
		a.onVerified(m)
	case outputDone:
		a.onOutputDone(m)
	case oomChecked:
		a.exit.oom = &m
		a.maybeFinish()
	case Stop:
		a.stop(m.Reason, m.Err)
		m.Reply <- a.journalErr
	case Signal:
		a.signal(m)
	case signalled:
		m.reply <- m.err
	case GetHandle:
		a.sys.Root.Send(a.parent, HandleMade{ID: a.p.ID, Handle: a.handleFor()})
	case stdinClose:
		m.reply <- a.closeStdin()
	case Resize:
		a.resize(m)
	case cutStreams:
		a.cutStreams()
	case Freeze:
		a.onFreeze(m)
	case graceExpired:
		if m.gen == a.stopping.graceGen && !a.done && !a.heldByFreeze(m) {
			a.signalGroup(syscall.SIGKILL, nil)
			a.tr.killed(m.gen)
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
		for _, t := range a.all {
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
		if a.streams.att != nil {
			_ = a.streams.att.Close() // the actor stops: only the connection's close error could come back
		}
	default:
		a.tr.receive(ctx, m)
	}
}

// start journals the reservation, then has the transport launch the
// process.
func (a *processActor) start() {
	a.started = a.deps.Now()
	if err := a.record(lifecycle.ProcessReserved{Sandbox: a.p.Sandbox.ID, Spec: a.p.Spec, Deadline: a.p.Deadline}); err != nil {
		a.answer(Launch{Err: err})
		a.done = true
		a.sys.Root.Stop(a.self)
		return
	}
	failpoint.Hit(failpoint.ProcessReserved)
	a.armDeadline()
	a.tr.launch()
}

// armDeadline posts deadlineHit at the process's deadline, if it has one.
func (a *processActor) armDeadline() {
	if !a.p.Deadline.IsZero() {
		a.all = append(a.all, time.AfterFunc(time.Until(a.p.Deadline), func() { a.send(deadlineHit{}) }))
	}
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
	a.tr.proceed()
}

// running takes the attachment of a process that runs (its transport
// started it): started is journaled (ev: what the transport knows of it,
// completed with the group and the OOM count), the streams are set up and
// the launch answered.
func (a *processActor) running(ctx actor.Context, att dockerio.Attachment, ev lifecycle.ProcessStarted) {
	a.streams.att = att
	if a.done {
		_ = att.Close() // nobody reads it now: only the connection's close error could come back
		return
	}
	failpoint.Hit(failpoint.ProcessAttached)
	oom := att.OOMKills()
	a.exit.oomBase = oom
	ev.Group, ev.OOMKills = att.Group(), &oom
	if err := a.record(ev); err != nil {
		// No kill without a journaled intent: the process runs on, its
		// output discarded (the attachment is closed), and the journal,
		// which holds its exec, lets the next recovery settle it.
		a.abandonJournal(err)
		return
	}
	hwm := a.deps.Config.HighWaterMark
	out := a.newOutput(att, nil)
	h := &Handle{ID: a.p.ID, pid: a.self, sys: a.sys, done: make(chan struct{})}
	// A stream closed unread stops the process only when it is tied to
	// its caller; else the caller detaches and the process runs on.
	var notify func()
	if a.p.Spec.StopWithCaller {
		notify = func() { a.send(abandoned{}) }
	}
	if a.p.Spec.Stdout == spec.Pipe {
		out.stdout = newPipe(hwm, notify)
		h.stdout = out.stdout
	}
	if a.p.Spec.Stderr == spec.Pipe {
		out.stderr = newPipe(hwm, notify)
		h.stderr = out.stderr
	}
	if a.p.Spec.Stdin {
		sw := &stdinWriter{w: att.Stdin(), h: h}
		if a.deps.Recorder != nil {
			rec, err := a.deps.Recorder.RecordStdin(a.p.ID)
			if err != nil {
				a.deps.Log.Warn("the process's stdin is not recorded: a re-run will not have it", "process", a.p.ID, "err", err)
			}
			sw.rec, a.streams.stdin = rec, rec
		}
		h.stdin = sw
	}
	a.streams.handle = h
	a.sys.Root.Send(a.parent, HandleMade{ID: a.p.ID, Handle: h})
	if !a.spawnOutput(ctx, out) {
		return
	}
	a.answer(Launch{Handle: h})
	if a.stopping.reason != "" { // a stop arrived while launching
		reason, err := a.stopping.reason, a.stopping.err
		a.stopping.reason = ""
		a.stop(reason, err)
	}
}

// runSpec is the process as it is run: its journaled Spec with the
// sandbox's secret variables in its environment (below its own).
func (a *processActor) runSpec() spec.Process {
	s := a.p.Spec
	s.Env = spec.SecretEnv(a.p.Secrets, s.Env)
	return s
}

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
	a.streams.out = out
	pid, err := ctx.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return out }), "output")
	if err != nil {
		a.fail(spec.Wrap(spec.CodeStreamFailure, "process", err, "spawning the output stream actor"))
		return false
	}
	a.streams.outPID = pid
	return true
}

func (a *processActor) onOutputDone(m outputDone) {
	a.streams.outDone = &m
	if a.done {
		return
	}
	if a.tr.closing(m.err) {
		return // the runtime is closing: the detach follows, nothing is journaled
	}
	switch {
	case m.err == nil:
	case a.streams.cut:
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
	default:
		a.tr.streamFailed(m.err)
	}
	a.tr.awaitExit()
	a.maybeFinish()
}

// cutStreams cuts the output of a stopping process whose end is known, for
// a consumer that no longer reads.
func (a *processActor) cutStreams() {
	if a.done || a.streams.outDone != nil || a.streams.out == nil {
		return
	}
	a.streams.cut = true
	err := a.stopping.err
	if err == nil {
		err = spec.Errorf(spec.CodeCancelled, "process", "process %s was stopped; its output was cut", a.p.ID)
	}
	a.streams.out.closePipes(err)
	_ = a.streams.att.Close() // outputDone follows promptly; a close error changes nothing then
}

// stop starts stopping the process: the stopping intent is journaled, then
// TERM goes to the group and KILL follows after the grace period. If the
// intent cannot be journaled nothing is signalled: the actor gives up
// (journalErr) and leaves the process to the next recovery.
func (a *processActor) stop(reason lifecycle.Reason, err error) {
	if a.done || a.stopping.reason != "" {
		return
	}
	a.stopping.reason, a.stopping.err = reason, err
	if a.state.Phase != lifecycle.PhaseStarted {
		a.tr.proceed() // an exec waiting to start now never will
		return         // otherwise the launch path honours the stop
	}
	if jerr := a.record(lifecycle.ProcessStopping{Reason: reason}); jerr != nil {
		a.abandonJournal(jerr)
		return
	}
	failpoint.Hit(failpoint.ProcessStopping)
	a.signalGroup(syscall.SIGTERM, nil)
	a.stopping.graceGen++
	gen := a.stopping.graceGen
	a.after(a.deps.Config.StopGrace, graceExpired{gen: gen})
	a.tr.awaitExit()
}

// kill stops the group at once (output limit, failure): no grace.
func (a *processActor) kill(reason lifecycle.Reason, err error) {
	if a.done {
		return
	}
	if a.stopping.reason == "" {
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
	a.stopping.signalled = true
	a.signalGroup(m.Sig, m.Reply)
}

// signalGroup signals the process group through the transport, off the
// mailbox; the reply (if any) arrives through a signalled message.
func (a *processActor) signalGroup(sig syscall.Signal, reply chan<- error) {
	if sig == syscall.SIGKILL {
		a.stopping.killSent = true
	}
	a.tr.signal(sig, reply)
}

// group is the process's group id: the attachment's, else the journaled
// one.
func (a *processActor) group() int {
	if a.streams.att != nil {
		return a.streams.att.Group()
	}
	return a.state.Group
}

func (a *processActor) resize(m Resize) {
	switch {
	case !a.p.Spec.TTY:
		m.Reply <- spec.Errorf(spec.CodeInvalidArgument, "process", "process %s has no terminal to resize", a.p.ID)
	case a.done:
		m.Reply <- a.notRunning()
	default:
		a.tr.resize(m)
	}
}

func (a *processActor) notRunning() error {
	return spec.Errorf(spec.CodeNotFound, "process", "process %s is not running", a.p.ID)
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

// abandonJournal ends the actor when the journal cannot take its events:
// nothing is reported done, and the entity stays live in the journal for
// the next recovery to settle. The parent is told it was abandoned, not
// that it exited, so the sandbox does not journal its own exit over it.
func (a *processActor) abandonJournal(err error) {
	a.abandoned, a.journalErr = true, err
	a.streams.out.leaveRecording() // no exit journaled: not complete, resumable
	if a.streams.att != nil {
		_ = a.streams.att.Close() // the process runs on; Docker discards its output
	}
	a.end(spec.Result{ExitCode: -1, Reason: string(lifecycle.ReasonFailed), Err: err, Started: a.started, Ended: a.deps.Now()})
}

// detach lets go of a process that is still running because the runtime
// is closing: nothing is journaled (the process stays live in the journal
// for the next runtime), and the caller's streams and Wait end with a
// cancelled error instead of hanging.
func (a *processActor) detach() {
	a.done = true
	out := a.streams.out
	if out != nil {
		out.detaching.Store(true)
	}
	out.leaveRecording()
	err := spec.Errorf(spec.CodeCancelled, "process", "the process actor stopped (the runtime closed, or the actor failed) before process %s ended; it is left to its sandbox and the next recovery", a.p.ID)
	if out != nil {
		out.closePipes(err)
	}
	if !a.launched {
		a.answer(Launch{Err: err})
	}
	if h := a.streams.handle; h != nil {
		h.result = spec.Result{ExitCode: -1, Err: err, Started: a.started, Ended: a.deps.Now()}
		close(h.done)
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
	if a.streams.att == nil || a.done {
		return a.notRunning()
	}
	if a.state.StdinClosed {
		return nil
	}
	if err := a.streams.att.CloseStdin(); err != nil {
		return err
	}
	if rec := a.streams.stdin; rec != nil {
		if err := rec.Close(); err != nil {
			a.deps.Log.Warn("the process's stdin recording is incomplete", "process", a.p.ID, "err", err)
		}
	}
	return a.record(lifecycle.StdinClosed{})
}

var _ io.Writer = (*stdinWriter)(nil)

// handleFor returns the process's handle, making one for a process that
// has none (a re-adopted one): it can be signalled, stopped and waited for
// like any other.
func (a *processActor) handleFor() *Handle {
	if a.done {
		return nil
	}
	if a.streams.handle == nil {
		a.streams.handle = &Handle{ID: a.p.ID, pid: a.self, sys: a.sys, done: make(chan struct{})}
	}
	return a.streams.handle
}

// adopt settles a process an earlier runtime left live, by docs/design.md's
// recovery table (its transport's rows: exec.go, warden_adopt.go). No exit
// code is ever invented.
func (a *processActor) adopt() {
	a.state = *a.p.Adopt
	a.state.ID = a.p.ID
	if a.state.Phase != lifecycle.PhaseReserved {
		a.exit.oomBase = a.state.OOMKills
	}
	a.started = a.state.Reserved
	a.launched = true // nobody waits for a launch
	if a.state.Phase == lifecycle.PhaseStopping {
		a.stopping.reason = a.state.Stopping
	}
	a.tr.adopt()
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
