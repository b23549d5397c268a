package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/internal/actors/process"
	"github.com/stockade/stockade/internal/failpoint"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/warden/link"
	"github.com/stockade/stockade/warden/wire"
)

// The warden part: the sandbox's warden, started by one Docker exec right
// after the workload (the create answers once it is up), journaled when its
// link is up, and replaced for new work when it is lost. Its processes hold
// the link; the sandbox holds it too, and closes it when the actor stops (a
// runtime that closes leaves the warden and its processes running for the
// next one). warden_reattach.go holds the reattach of a warden an earlier
// runtime left running, and of its processes.
//
// What it adds to the core:
//   - its messages: wardenUp and reattached (a start's or a reattach's
//     outcome), wardenDown (the link ended), wardenProbed (a liveness
//     probe's answer) and process.WardenUnanswered (a process given up
//     unreported, which starts a probe);
//   - hooks: startForCreate (the workload started: the create waits for the
//     warden), hold and linkNow (a launch waits for the link, then runs over
//     it), close (the actor stops), retireAllFirst, awaitReattach and
//     reattach (recovery);
//   - for the other parts: linked and claimable (the pool's claim), abort
//     (a claim's failed rekey), giveUp (a rollback kills every process of
//     the sandbox's user, the warden too).
//
// It reads the freeze's count and state (copyPart.freezeCount, thawed): a
// probe a freeze overlapped proves nothing.

// wardenPart is the sandbox actor's view of its warden.
type wardenPart struct {
	a        *sandboxActor
	link     *link.Link
	gen      int
	starting bool
	held     []Launch // launches waiting for the link
	creating bool     // the first start, part of the create
	// pendingAdopt: recovering warden processes waiting for the reattach.
	pendingAdopt []lifecycle.Process
	// reattachFailed: the journaled warden could not be reattached; new
	// work gets a new warden.
	reattachFailed bool
	// probing: a process was given up unreported and the warden is asked
	// whether it answers at all (launches wait for the answer).
	probing bool
	probe   int // the current probe's number: a late answer is ignored
	// retiring is closed once a warden given up (retire) is killed: a new
	// warden starts after it, never beside it.
	retiring chan struct{}
	// retireAll: the next warden start first retires every warden server
	// in the sandbox (a recovered sandbox may run one the journal never
	// named: a crash between its start and the journal's word).
	retireAll bool
	// strays: the context of the drains of strays (forgetStray), ended
	// when the actor stops.
	strays     context.Context
	stopStrays context.CancelFunc
}

type (
	wardenUp struct {
		gen    int
		link   *link.Link
		hello  wire.Hello
		secret []byte
		err    error
	}
	wardenDown struct {
		gen int
		err error
	}
)

// wardenProbed is the answer to a liveness probe of the warden.
type wardenProbed struct {
	gen, freezes, probe int
	// thawed: the workload was thawed when the probe began (one that
	// began frozen proves nothing about the warden).
	thawed bool
	err    error
}

// handle takes the warden's messages.
func (w *wardenPart) handle(ctx actor.Context, msg any) bool {
	switch m := msg.(type) {
	case wardenUp:
		w.onUp(ctx, m)
	case wardenDown:
		w.onDown(m)
	case reattached:
		w.onReattached(ctx, m)
	case process.WardenUnanswered:
		w.probeLink(m)
	case wardenProbed:
		w.onProbed(ctx, m)
	default:
		return false
	}
	return true
}

// startForCreate starts the warden as the create's last step (the workload
// started): the create is answered once it is up (onUp), and a warden that
// cannot start fails the create (rolled back) rather than every later
// launch. false: the sandbox runs no warden.
func (w *wardenPart) startForCreate() bool {
	if !w.a.deps.Config.WardensDelivered {
		return false
	}
	w.creating = true
	w.start(false)
	return true
}

// linkNow is the warden's live link (nil: none) and its generation.
func (w *wardenPart) linkNow() (*link.Link, int) { return w.link, w.gen }

// linked: a link is up and no probe doubts it.
func (w *wardenPart) linked() bool { return w.link != nil && !w.probing }

// claimable: linked, and no start under way.
func (w *wardenPart) claimable() bool { return w.link != nil && !w.starting && !w.probing }

// abort gives up the link of generation gen, if it is still the live one:
// its end is taken as a loss (onDown journals it).
func (w *wardenPart) abort(gen int, why error) {
	if gen != w.gen || w.link == nil {
		return
	}
	link := w.link
	link.Abort(why)
	w.onDown(wardenDown{gen: gen, err: link.Err()})
}

// retireAllFirst (recovery): the next warden start first retires every
// warden server in the sandbox, if the runtime runs wardens.
func (w *wardenPart) retireAllFirst() { w.retireAll = w.a.deps.Config.WardensDelivered }

// awaitReattach (recovery): p, a process of a re-adopted sandbox's warden,
// is spawned once the warden is reattached (onReattached).
func (w *wardenPart) awaitReattach(p lifecycle.Process) {
	w.pendingAdopt = append(w.pendingAdopt, p)
}

// reattachAwaited: a process waits for the reattach.
func (w *wardenPart) reattachAwaited() bool { return len(w.pendingAdopt) > 0 }

// start starts a warden off the mailbox. ensure checks the delivered
// binary first (a Put since the delivery could have changed it).
func (w *wardenPart) start(ensure bool) {
	a := w.a
	w.gen++
	w.starting = true
	gen, sb, eng, log := w.gen, a.sb, a.engine, a.deps.Log
	id, retiring, retireAll := a.p.ID, w.retiring, w.retireAll
	w.retireAll = false
	a.goDocker(func(ctx context.Context) any {
		if retiring != nil {
			select {
			case <-retiring:
			case <-ctx.Done():
				return wardenUp{gen: gen, err: spec.Wrap(spec.CodeTimeout, "sandbox.warden", ctx.Err(), "sandbox %s: waiting for the warden given up to be killed", id)}
			}
		}
		if retireAll {
			if err := eng.RetireWarden(ctx, sb, 0, ""); err != nil {
				log.Warn("the wardens of a recovered sandbox could not be retired before a new one", "sandbox", id, "err", err)
			}
		}
		secret := make([]byte, wire.SecretSize)
		rand.Read(secret)
		if ensure {
			if err := eng.EnsureWarden(ctx, sb); err != nil {
				return wardenUp{gen: gen, err: err}
			}
		}
		conn, err := eng.StartWarden(ctx, sb, wardenStderr(log, id, "warden"))
		if err != nil {
			return wardenUp{gen: gen, err: err}
		}
		link, hello, err := link.Open(ctx, conn.R, conn.W, conn.C, link.Handshake{Secret: secret})
		if err != nil {
			return wardenUp{gen: gen, err: spec.Wrap(spec.CodeStreamFailure, "sandbox.warden", err, "sandbox %s: the warden's first link", id)}
		}
		return wardenUp{gen: gen, link: link, hello: hello, secret: secret}
	})
}

func (w *wardenPart) onUp(ctx actor.Context, m wardenUp) {
	a := w.a
	if m.gen != w.gen {
		if m.link != nil {
			_ = m.link.Close() // a stale link, dropped
		}
		return
	}
	w.starting = false
	if m.err == nil && (a.state.Phase != lifecycle.PhaseStarted || a.end.stopReason != "") {
		// A stop came while the warden started: it is not journaled
		// (it goes with its workload); a create that waited for it is
		// answered (the sandbox was made, and is stopping).
		_ = m.link.Close() // dropped: only its connection's close error could come back
		held := w.held
		w.held = nil
		for _, l := range held {
			a.launch(ctx, l) // refused: admission is closed
		}
		if w.creating {
			w.creating = false
			a.p.Created <- nil
		}
		return
	}
	err := m.err
	if err == nil {
		failpoint.Hit(failpoint.WardenStarted)
		ev := lifecycle.WardenStarted{PID: m.hello.PID, Socket: m.hello.Socket, Secret: hex.EncodeToString(m.secret), Version: m.hello.Version}
		if err = a.record(ev); err != nil {
			_ = m.link.Close() // the journal's error is the one to report
		}
	}
	creating := w.creating
	w.creating = false
	held := w.held
	w.held = nil
	if err != nil {
		a.deps.Log.Warn("the sandbox's warden did not start", "sandbox", a.p.ID, "err", err)
		for _, l := range held {
			a.answerLaunch(l, launchFailed(l, err))
		}
		if creating {
			a.createFailed(err)
		}
		return
	}
	w.link = m.link
	gen, link := m.gen, m.link
	go func() {
		<-link.Done()
		a.send(wardenDown{gen: gen, err: link.Err()})
	}()
	if creating {
		a.createdDone()
	}
	for _, l := range held {
		a.launch(ctx, l)
	}
}

// onDown journals a lost warden while the sandbox serves: its
// processes learn it from their own streams and end; a new warden is
// started at the next launch (not at once: a workload that kills every
// warden must not make the runtime spin).
func (w *wardenPart) onDown(m wardenDown) {
	a := w.a
	if m.gen != w.gen || w.link == nil {
		return
	}
	w.link = nil
	if a.state.Phase != lifecycle.PhaseStarted || a.end.stopReason != "" || a.end.exitDead || a.state.Warden == nil {
		return // the workload is stopping: its warden goes with it
	}
	reason := "the link ended"
	if m.err != nil {
		reason = m.err.Error()
	}
	a.deps.Log.Warn("the sandbox's warden was lost", "sandbox", a.p.ID, "reason", reason)
	if err := a.record(lifecycle.WardenLost{Reason: reason}); err != nil {
		a.deps.Log.Warn("journaling the warden's loss failed", "sandbox", a.p.ID, "err", err)
	}
}

// hold holds a launch until the link is up, starting a warden if
// none is coming. false: the launch goes on with the link.
func (w *wardenPart) hold(m Launch) bool {
	a := w.a
	if !a.deps.Config.WardensDelivered || w.link != nil && !w.probing {
		return false
	}
	w.held = append(w.held, m)
	switch {
	case w.starting, w.probing:
	case a.state.Warden != nil && !w.reattachFailed:
		// A re-adopted sandbox's warden, not reattached yet: reattach it
		// (a failure journals it lost; the next launch starts a new one).
		w.reattach()
	default:
		w.start(true)
	}
	return true
}

// probeLink asks the warden for its table after one of its processes
// was given up unreported (the process actor has settled that one alone).
// A warden that answers serves on; one that does not answer within the
// grace, while the workload was not frozen, is stopped or wedged: it is
// given up, and its processes with it.
func (w *wardenPart) probeLink(m process.WardenUnanswered) {
	a := w.a
	a.deps.Log.Warn("a process was given up: its warden did not report it reaped", "sandbox", a.p.ID, "process", m.ID, "err", m.Err)
	if w.link == nil || w.probing {
		return
	}
	w.probing = true
	w.probe++
	probe := wardenProbed{gen: w.gen, freezes: a.copies.freezeCount(), probe: w.probe, thawed: a.copies.thawed()}
	link, wait := w.link, a.deps.Config.StopGrace+5*time.Second
	// The deadline is the actor's own: a wedged warden stops reading, and
	// the List's request write can then block past any context.
	ctx, cancel := context.WithCancel(context.Background())
	t := time.AfterFunc(wait, func() {
		cancel() // the List's wait, if its write got through
		late := probe
		late.err = context.DeadlineExceeded
		a.send(late)
	})
	go func() {
		defer cancel()
		_, err := link.List(ctx)
		if t.Stop() {
			answer := probe
			answer.err = err
			a.send(answer)
		}
	}()
}

func (w *wardenPart) onProbed(ctx actor.Context, m wardenProbed) {
	a := w.a
	if !w.probing || m.probe != w.probe {
		return // an answer after the deadline, or of an earlier probe
	}
	w.probing = false
	if m.gen == w.gen && w.link != nil && errors.Is(m.err, context.DeadlineExceeded) && m.thawed && m.freezes == a.copies.freezeCount() && a.copies.thawed() {
		link := w.link
		link.Abort(fmt.Errorf("the warden did not answer a list within %v, after one of its processes went unreported", a.deps.Config.StopGrace+5*time.Second))
		ws := a.state.Warden
		w.onDown(wardenDown{gen: m.gen, err: link.Err()})
		if ws != nil {
			w.retire(*ws) // wedged, not dead: killed before another starts
		}
	}
	held := w.held
	w.held = nil
	for _, l := range held {
		a.launch(ctx, l)
	}
}

// close lets go of the link as the actor stops (the runtime closes):
// the warden and its processes stay for the next runtime. The link's end
// is not a loss (a stopping actor still takes messages: the generation
// moves on so it is ignored).
func (w *wardenPart) close() {
	if w.stopStrays != nil {
		w.stopStrays()
	}
	w.gen++
	if w.link != nil {
		_ = w.link.Close() // given up on: only its connection's close error could come back
		w.link = nil
	}
}

// retire kills a warden given up (off the mailbox; a failure is
// logged): the next warden starts once it is done.
func (w *wardenPart) retire(ws lifecycle.WardenStarted) {
	a := w.a
	if !a.running() || ws.PID <= 1 {
		return // the workload stops: the warden goes with it
	}
	done := make(chan struct{})
	prev := w.retiring
	w.retiring = done
	sb, eng, log, id := a.sb, a.engine, a.deps.Log, a.p.ID
	go func() {
		defer close(done)
		if prev != nil {
			<-prev
		}
		ctx, cancel := a.deps.DockerContext()
		defer cancel()
		if err := eng.RetireWarden(ctx, sb, ws.PID, ws.Socket); err != nil {
			log.Warn("a warden given up could not be killed", "sandbox", id, "pid", ws.PID, "err", err)
		}
	}()
}

// giveUp lets go of the sandbox's warden before it is killed (a
// rollback kills every process of the sandbox's user): journaled lost
// first, so the journal never names as live a warden the runtime gave up
// on; a start or probe in flight is forgotten, and launches held for the
// link are refused (nothing is admitted meanwhile).
func (w *wardenPart) giveUp(reason string) error {
	a := w.a
	w.gen++ // a link's end from now on is not a loss
	if w.link != nil {
		_ = w.link.Close() // given up on: only its connection's close error could come back
		w.link = nil
	}
	w.starting, w.probing, w.reattachFailed = false, false, false
	w.probe++
	held := w.held
	w.held = nil
	for _, l := range held {
		a.answerLaunch(l, process.Launch{Err: spec.Errorf(spec.CodeAdmissionClosed, "sandbox", "process %s: sandbox %s %s", l.ID, a.p.ID, reason)})
	}
	if a.state.Warden == nil {
		return nil
	}
	return a.record(lifecycle.WardenLost{Reason: reason})
}

func launchFailed(l Launch, err error) process.Launch {
	return process.Launch{Err: spec.Wrap(spec.CodeStreamFailure, "sandbox", err, "process %s: the sandbox's warden is not available", l.ID)}
}

// wardenStderr logs what a warden exec writes on stderr, a line at a time
// and at most 100 lines (the sandbox writes it).
func wardenStderr(log *slog.Logger, sandbox, what string) *dockerio.LineLog {
	return &dockerio.LineLog{Max: 100, Log: func(line string) { log.Warn(what, "sandbox", sandbox, "line", line) }}
}
