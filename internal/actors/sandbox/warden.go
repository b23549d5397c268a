package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/internal/actors/process"
	"github.com/stockade/stockade/internal/failpoint"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/recorder"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/warden/link"
	"github.com/stockade/stockade/warden/wire"
)

// The sandbox's warden: started by one Docker exec right after the workload
// (the create answers once it is up), journaled when its link is up, and
// replaced for new work when it is lost. Its processes hold the link; the
// sandbox holds it too, and closes it when the actor stops (a runtime that
// closes leaves the warden and its processes running for the next one).

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

// wardenState is the sandbox actor's view of its warden.
type wardenState struct {
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
	// whether it answers at all (launches wait for the answer); freezes
	// counts the workload's freezes, so a probe a freeze overlapped is
	// not taken for a dead warden.
	probing bool
	freezes int
	probe   int // the current probe's number: a late answer is ignored
	// retiring is closed once a warden given up (retireWarden) is
	// killed: a new warden starts after it, never beside it.
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

// startWarden starts a warden off the mailbox. ensure checks the delivered
// binary first (a Put since the delivery could have changed it).
func (a *sandboxActor) startWarden(ensure bool) {
	a.w.gen++
	a.w.starting = true
	gen, sb, eng, log := a.w.gen, a.sb, a.engine, a.deps.Log
	id, retiring, retireAll := a.p.ID, a.w.retiring, a.w.retireAll
	a.w.retireAll = false
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

func (a *sandboxActor) onWardenUp(ctx actor.Context, m wardenUp) {
	if m.gen != a.w.gen {
		if m.link != nil {
			_ = m.link.Close() // a stale link, dropped
		}
		return
	}
	a.w.starting = false
	if m.err == nil && (a.state.Phase != lifecycle.PhaseStarted || a.end.stopReason != "") {
		// A stop came while the warden started: it is not journaled
		// (it goes with its workload); a create that waited for it is
		// answered (the sandbox was made, and is stopping).
		_ = m.link.Close() // dropped: only its connection's close error could come back
		held := a.w.held
		a.w.held = nil
		for _, l := range held {
			a.launch(ctx, l) // refused: admission is closed
		}
		if a.w.creating {
			a.w.creating = false
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
	creating := a.w.creating
	a.w.creating = false
	held := a.w.held
	a.w.held = nil
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
	a.w.link = m.link
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

// onWardenDown journals a lost warden while the sandbox serves: its
// processes learn it from their own streams and end; a new warden is
// started at the next launch (not at once: a workload that kills every
// warden must not make the runtime spin).
func (a *sandboxActor) onWardenDown(m wardenDown) {
	if m.gen != a.w.gen || a.w.link == nil {
		return
	}
	a.w.link = nil
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

// wardenHold holds a launch until the link is up, starting a warden if
// none is coming. false: the launch goes on with the link.
func (a *sandboxActor) wardenHold(m Launch) bool {
	if !a.deps.Config.Warden || a.w.link != nil && !a.w.probing {
		return false
	}
	a.w.held = append(a.w.held, m)
	switch {
	case a.w.starting, a.w.probing:
	case a.state.Warden != nil && !a.w.reattachFailed:
		// A re-adopted sandbox's warden, not reattached yet: reattach it
		// (a failure journals it lost; the next launch starts a new one).
		a.reattach()
	default:
		a.startWarden(true)
	}
	return true
}

// wardenProbed is the answer to a liveness probe of the warden.
type wardenProbed struct {
	gen, freezes, probe int
	// thawed: the workload was thawed when the probe began (one that
	// began frozen proves nothing about the warden).
	thawed bool
	err    error
}

// probeWarden asks the warden for its table after one of its processes
// was given up unreported (the process actor has settled that one alone).
// A warden that answers serves on; one that does not answer within the
// grace, while the workload was not frozen, is stopped or wedged: it is
// given up, and its processes with it.
func (a *sandboxActor) probeWarden(m process.WardenUnanswered) {
	a.deps.Log.Warn("a process was given up: its warden did not report it reaped", "sandbox", a.p.ID, "process", m.ID, "err", m.Err)
	if a.w.link == nil || a.w.probing {
		return
	}
	a.w.probing = true
	a.w.probe++
	probe := wardenProbed{gen: a.w.gen, freezes: a.w.freezes, probe: a.w.probe, thawed: a.pause == thawed}
	link, wait := a.w.link, a.deps.Config.StopGrace+5*time.Second
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

func (a *sandboxActor) onWardenProbed(ctx actor.Context, m wardenProbed) {
	if !a.w.probing || m.probe != a.w.probe {
		return // an answer after the deadline, or of an earlier probe
	}
	a.w.probing = false
	if m.gen == a.w.gen && a.w.link != nil && errors.Is(m.err, context.DeadlineExceeded) && m.thawed && m.freezes == a.w.freezes && a.pause == thawed {
		link := a.w.link
		link.Abort(fmt.Errorf("the warden did not answer a list within %v, after one of its processes went unreported", a.deps.Config.StopGrace+5*time.Second))
		w := a.state.Warden
		a.onWardenDown(wardenDown{gen: m.gen, err: link.Err()})
		if w != nil {
			a.retireWarden(*w) // wedged, not dead: killed before another starts
		}
	}
	held := a.w.held
	a.w.held = nil
	for _, l := range held {
		a.launch(ctx, l)
	}
}

// closeWarden lets go of the link as the actor stops (the runtime closes):
// the warden and its processes stay for the next runtime. The link's end
// is not a loss (a stopping actor still takes messages: the generation
// moves on so it is ignored).
func (a *sandboxActor) closeWarden() {
	if a.w.stopStrays != nil {
		a.w.stopStrays()
	}
	a.w.gen++
	if a.w.link != nil {
		_ = a.w.link.Close() // given up on: only its connection's close error could come back
		a.w.link = nil
	}
}

// retireWarden kills a warden given up (off the mailbox; a failure is
// logged): the next warden starts once it is done.
func (a *sandboxActor) retireWarden(w lifecycle.WardenStarted) {
	if !a.running() || w.PID <= 1 {
		return // the workload stops: the warden goes with it
	}
	done := make(chan struct{})
	prev := a.w.retiring
	a.w.retiring = done
	sb, eng, log, id := a.sb, a.engine, a.deps.Log, a.p.ID
	go func() {
		defer close(done)
		if prev != nil {
			<-prev
		}
		ctx, cancel := a.deps.DockerContext()
		defer cancel()
		if err := eng.RetireWarden(ctx, sb, w.PID, w.Socket); err != nil {
			log.Warn("a warden given up could not be killed", "sandbox", id, "pid", w.PID, "err", err)
		}
	}()
}

// giveUpWarden lets go of the sandbox's warden before it is killed (a
// rollback kills every process of the sandbox's user): journaled lost
// first, so the journal never names as live a warden the runtime gave up
// on; a start or probe in flight is forgotten, and launches held for the
// link are refused (nothing is admitted meanwhile).
func (a *sandboxActor) giveUpWarden(reason string) error {
	a.w.gen++ // a link's end from now on is not a loss
	if a.w.link != nil {
		_ = a.w.link.Close() // given up on: only its connection's close error could come back
		a.w.link = nil
	}
	a.w.starting, a.w.probing, a.w.reattachFailed = false, false, false
	a.w.probe++
	held := a.w.held
	a.w.held = nil
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

type reattached struct {
	link  *link.Link
	table []wire.Entry
	err   error
}

// reattachKey holds a re-adopted sandbox's settling until its warden's
// processes are spawned.
const reattachKey = "\x00warden"

// wardenProcess reports whether a journaled process is (or may be) the
// warden's: started by it, or reserved in a sandbox with a warden (the
// spawn request may have reached it).
func wardenProcess(p lifecycle.Process, s lifecycle.Sandbox) bool {
	return p.Warden || p.ExecID == "" && p.Phase == lifecycle.PhaseReserved && s.Warden != nil
}

// reattach makes a new link to the warden an earlier runtime left running
// (through `stockade-warden attach` on its socket, authenticated by the
// journaled secret) and reads its process table, off the mailbox.
func (a *sandboxActor) reattach() {
	w := *a.state.Warden
	a.w.gen++
	a.w.starting = true
	sb, eng, log, id := a.sb, a.engine, a.deps.Log, a.p.ID
	a.goDocker(func(ctx context.Context) any {
		secret, err := wire.DecodeHex(w.Secret, wire.SecretSize)
		if err != nil {
			return reattached{err: spec.Wrap(spec.CodeJournal, "sandbox.warden", err, "the journaled warden secret")}
		}
		if err := eng.EnsureWarden(ctx, sb); err != nil {
			return reattached{err: err}
		}
		// The bridge says on stderr why it connected nothing (a listener
		// that is not the warden): that reason, not the EOF the handshake
		// saw, is the warden's loss.
		stderr := wardenStderr(log, id, "warden attach")
		conn, err := eng.AttachWarden(ctx, sb, w.Socket, stderr)
		if err != nil {
			return reattached{err: err}
		}
		link, _, err := link.Open(ctx, conn.R, conn.W, conn.C, link.Handshake{Secret: secret, Reattach: true})
		if err != nil {
			if last := stderr.Last(); last != "" {
				err = fmt.Errorf("%w (the bridge: %s)", err, last)
			}
			return reattached{err: err}
		}
		table, err := link.List(ctx)
		if err != nil {
			_ = link.Close() // the List error is the one to report
			return reattached{err: err}
		}
		return reattached{link: link, table: table}
	})
}

// onReattached spawns the recovering actors of the warden's processes,
// each with its table entry (or why there is none), and keeps the link for
// new work. A warden that cannot be reattached is journaled lost.
func (a *sandboxActor) onReattached(ctx actor.Context, m reattached) {
	a.w.starting = false
	failpoint.Hit(failpoint.RecoveryReattached)
	pending := a.w.pendingAdopt
	a.w.pendingAdopt = nil
	var gone error
	entries := map[string]wire.Entry{}
	if m.err != nil {
		gone = m.err
		a.w.reattachFailed = true
		a.deps.Log.Warn("reattaching the sandbox's warden failed; its processes are lost", "sandbox", a.p.ID, "err", m.err)
		if w := a.state.Warden; w != nil {
			if err := a.record(lifecycle.WardenLost{Reason: "reattach failed: " + m.err.Error()}); err != nil {
				a.deps.Log.Warn("journaling the warden's loss failed", "sandbox", a.p.ID, "err", err)
			}
			// It may still run (it refused the journal's secret: a
			// claim's rekey cut by a crash): a sandbox runs one warden.
			a.retireWarden(*w)
		}
	} else {
		a.w.link = m.link
		gen, link := a.w.gen, m.link
		go func() {
			<-link.Done()
			a.send(wardenDown{gen: gen, err: link.Err()})
		}()
		for _, e := range m.table {
			entries[e.ID] = e
		}
	}
	for _, p := range pending {
		params := a.adoptParams(p)
		if gone != nil {
			params.WardenGone = gone
		} else if e, ok := entries[p.ID]; ok {
			params.Link, params.Entry = m.link, &e
			delete(entries, p.ID)
		} else {
			params.Link = m.link
		}
		a.spawnAdopted(ctx, p, params)
	}
	// Left in the table: processes the journal has already ended (their
	// exit journaled before the warden was told to forget them). Drain and
	// forget them; kill any that still runs.
	if len(entries) > 0 && a.w.strays == nil {
		a.w.strays, a.w.stopStrays = context.WithCancel(context.Background())
	}
	for _, e := range entries {
		go a.forgetStray(a.w.strays, m.link, e)
	}
	a.adoptedOne(reattachKey)
	// The list is taken before the launches go on: one the failed
	// reattach sends to a new warden is held again, in a fresh list.
	held := a.w.held
	a.w.held = nil
	for _, l := range held {
		a.launch(ctx, l)
	}
}

// strayWait bounds how long a stray is drained and awaited.
const strayWait = time.Minute

// forgetStray settles a process the warden still lists but the journal has
// already ended (its exit was journaled before the warden was told to
// forget it): it is killed if it runs, what it printed since its
// recording's end is recorded like any process's output (resumed from the
// recording's offset, at most the output quota), and the warden forgets
// it once it reports the exit. It gives up when ctx ends (the actor
// stops), after strayWait, or at the quota; a recording not ended then is
// suspended, not called complete.
func (a *sandboxActor) forgetStray(ctx context.Context, link *link.Link, e wire.Entry) {
	ctx, cancel := context.WithTimeout(ctx, strayWait)
	defer cancel()
	log := a.deps.Log.With("sandbox", a.p.ID, "process", e.ID)
	var rec *recorder.Recording
	from := e.Acked
	if a.deps.Recorder != nil {
		r, off, err := a.deps.Recorder.Resume(e.ID, spec.Record{})
		switch {
		case err != nil:
			log.Warn("the recording of a stray process cannot be resumed; what it printed since goes unrecorded", "err", err)
		case uint64(off) > e.Output:
			log.Warn("the recording of a stray process holds more than the warden read; it is left as it is", "recorded", off, "warden", e.Output)
			if err := r.Suspend(); err != nil {
				log.Warn("suspending a stray process's recording failed", "err", err)
			}
		default:
			rec, from = r, max(from, uint64(off))
			if lost := int64(from) - off; lost > 0 {
				// The warden dropped bytes it was told were recorded and
				// the disk does not hold (a crash cut their write): mark
				// them lost in place, never splice over them. The process
				// is ended in the journal, whose fold takes no gap after
				// the exit: the recording says it.
				log.Warn("a stray's recording lacks bytes its warden dropped; marked lost in place", "recorded", off, "acked", from)
				if _, err := rec.Gap(lost); err != nil {
					log.Warn("marking a stray's lost bytes failed", "err", err)
				}
			}
		}
	}
	p, err := link.Resume(ctx, e, from)
	if err != nil {
		log.Warn("a stray process could not be resumed to be forgotten", "err", err)
		if err := rec.Suspend(); err != nil {
			log.Warn("suspending a stray process's recording failed", "err", err)
		}
		return
	}
	defer p.Close()
	stop := context.AfterFunc(ctx, p.Close) // Next returns once ctx ends
	defer stop()
	if e.Running {
		if err := p.Signal(syscall.SIGKILL); err != nil {
			// The link is gone or ctx ended: Next below returns at once.
			log.Warn("killing a stray process failed", "err", err)
		}
	}
	quota := a.deps.Config.OutputQuota
	var n int64
	for n <= quota {
		stream, data, err := p.Next()
		if err != nil {
			break
		}
		n += int64(len(data))
		if err := rec.Write(stream, data); err != nil {
			log.Warn("recording a stray process's output failed", "err", err)
		}
	}
	if n > quota {
		log.Warn("a stray process printed more than its output quota; the rest is not read", "bytes", n, "quota", quota)
	}
	select {
	case <-p.Exited():
	case <-ctx.Done():
	}
	ex, exited := p.Exit()
	if !exited || ctx.Err() != nil || n > quota {
		// Not drained to its end: the recording is suspended (a later
		// reattach resumes it), and the warden keeps the process.
		log.Warn("a stray process was not drained to its end; the warden keeps it", "exited", exited, "err", ctx.Err())
		if err := rec.Suspend(); err != nil {
			log.Warn("suspending a stray process's recording failed", "err", err)
		}
		return
	}
	rec.SetTotals(int64(ex.Stdout), int64(ex.Stderr))
	if err := rec.Close(); err != nil {
		log.Warn("closing a stray process's recording failed", "err", err)
	}
	if err := p.Forget(); err != nil {
		log.Warn("the warden could not be told to forget a stray process", "err", err)
	}
}

// wardenStderr logs what a warden exec writes on stderr, a line at a time
// and at most 100 lines (the sandbox writes it).
func wardenStderr(log *slog.Logger, sandbox, what string) *dockerio.LineLog {
	return &dockerio.LineLog{Max: 100, Log: func(line string) { log.Warn(what, "sandbox", sandbox, "line", line) }}
}
