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
	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/internal/actors"
	"github.com/stockade/stockade/internal/failpoint"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/warden/link"
	"github.com/stockade/stockade/warden/wire"
)

// wardenTransport runs the process through the sandbox's warden, over its
// link (package warden), not by a Docker exec: reserved is journaled
// before the spawn request, started {pid, pgid} once the warden reports
// it, and the end comes from the warden's exited report (no inspect, no
// exec_die). Its process is presented to the actor as an Attachment, so
// everything after the start (streams, recording, stop, quota, timeout) is
// the lifecycle's as for an exec. A link that breaks leaves the outcome
// unknown: the group is killed through Docker and the process ends lost.
// Once the exit is journaled the warden is told to forget the process.
type wardenTransport struct {
	a    *processActor
	link *link.Link // nil: a recovering process whose warden is gone
	proc *link.Proc // the warden's process, once spawned or resumed
	// killPending: a Docker-side kill of the group is under way (the
	// warden was lost); the exit is journaled after it.
	killPending bool
}

var _ transport = (*wardenTransport)(nil)

type (
	wardenSpawned struct {
		proc *link.Proc
		err  error
	}
	wardenReaped struct {
		reap wire.Reaped
		ok   bool
		err  error
	}
	// spawnLost: the link ended before the warden reported a spawn; gone
	// says the workload died meanwhile.
	spawnLost struct {
		gone bool
		err  error
	}
	// groupKilled says the Docker-side kill of a lost warden's process
	// group is done: the process may be journaled ended.
	groupKilled struct {
		// workloadGone: Docker cannot exec into the workload (not
		// running, or gone): the warden died with its sandbox.
		workloadGone bool
		// failed: the kill could not be sent (the process may run on
		// until its sandbox stops).
		failed error
	}
	// killUnseen: the KILL's grace for the warden to report the reap ran
	// out.
	killUnseen struct{ gen int }
)

func (w *wardenTransport) receive(ctx actor.Context, msg any) {
	a := w.a
	switch m := msg.(type) {
	case wardenSpawned:
		w.onSpawned(ctx, m)
	case spawnLost:
		w.onSpawnLost(m)
	case wardenReaped:
		w.onReaped(m)
	case wardenResumed:
		w.onResumed(ctx, m)
	case groupKilled:
		w.killPending = false
		if m.failed != nil && a.stopping.reason == lifecycle.ReasonLost {
			a.stopping.err = spec.Wrap(spec.CodeStreamFailure, "process", m.failed, "process %s: the sandbox's warden was lost, and killing its process group failed (it may run until its sandbox stops)", a.p.ID)
		}
		if m.workloadGone && a.stopping.reason == lifecycle.ReasonLost {
			// The warden went down with its workload: the sandbox
			// stopped under the process.
			a.stopping.reason = lifecycle.ReasonSandboxStopped
			a.stopping.err = spec.Errorf(spec.CodeCancelled, "process", "process %s: its sandbox's workload stopped", a.p.ID)
		}
		a.maybeFinish()
	case killUnseen:
		if m.gen == a.stopping.graceGen && !a.done && a.exit.state == nil && w.proc != nil && !a.heldByFreeze(m) {
			w.giveUp()
		}
	}
}

// launch asks the warden for the process, off the mailbox.
func (w *wardenTransport) launch() {
	a := w.a
	s := spawnRequest(a.p.ID, a.runSpec())
	s.Env = dockerio.ProxyEnv(a.p.Sandbox, a.p.ID, s.Env)
	s.Sent = func() { failpoint.Hit(failpoint.ProcessSpawnSent) }
	link, bg := w.link, a.bg
	go func() {
		ctx, cancel := context.WithTimeout(bg, a.deps.Config.DockerTimeout)
		defer cancel()
		p, err := link.Spawn(ctx, s)
		if err == nil && bg.Err() != nil {
			p.Close() // the actor is gone; the sandbox's stop ends the process
			return
		}
		a.send(wardenSpawned{proc: p, err: err})
	}()
}

// proceed: the warden's process starts with its spawn; nothing waits.
func (w *wardenTransport) proceed() {}

// spawnRequest is the warden's Spawn for a process spec.
func spawnRequest(id string, sp spec.Process) wire.Spawn {
	dir := sp.Dir
	if dir == "" {
		dir = dockerio.WorkDir
	}
	return wire.Spawn{ID: id, Argv: sp.Argv, Env: sp.Env, Dir: dir, Stdin: sp.Stdin, TTY: sp.TTY, Rows: sp.Rows, Cols: sp.Cols, NoChanges: sp.NoChanges}
}

func (w *wardenTransport) onSpawnLost(m spawnLost) {
	a := w.a
	if a.done {
		return
	}
	if m.gone {
		a.finish(lifecycle.ReasonSandboxStopped, -1, spec.Wrap(spec.CodeCancelled, "process", m.err, "process %s: its sandbox's workload stopped before the warden reported the spawn", a.p.ID))
		return
	}
	a.finish(lifecycle.ReasonLost, -1, spec.Wrap(spec.CodeStreamFailure, "process", m.err, "process %s: the sandbox's warden was lost before it reported the spawn", a.p.ID))
}

// workloadDying reports whether the sandbox's workload is gone or goes
// within about a second. A warden that dies with its workload ends its
// link before Docker shows the container stopped: looked at once, a dying
// workload still reads back running.
func (w *wardenTransport) workloadDying(bg context.Context, sb dockerio.Sandbox) bool {
	a := w.a
	pause := 100 * time.Millisecond
	for attempt := 0; ; attempt++ {
		vctx, cancel := context.WithTimeout(bg, a.deps.Config.DockerTimeout)
		gone := a.engine.VerifySandbox(vctx, sb) != nil
		cancel()
		if gone || attempt == 3 || bg.Err() != nil {
			return gone
		}
		if !actors.Sleep(bg, pause) {
			return false
		}
		pause *= 2
	}
}

func (w *wardenTransport) onSpawned(ctx actor.Context, m wardenSpawned) {
	a := w.a
	if m.err != nil {
		if a.done {
			return
		}
		if errors.Is(m.err, link.ErrLinkClosed) {
			// The runtime is closing: the spawn may have happened; the
			// process stays reserved for the next recovery to settle
			// from the warden's table.
			a.detach()
			return
		}
		var se *link.SpawnError
		if errors.As(m.err, &se) {
			// The warden's spawn error names the cause (not found: 127,
			// not executable: 126), as a shell would report it.
			a.finish(lifecycle.ReasonFailed, se.Code, spec.Wrap(spec.CodeExecFailed, "process", m.err, "process %s could not start", a.p.ID))
			return
		}
		if errors.Is(m.err, context.DeadlineExceeded) {
			// No answer to a spawn within the Docker timeout: the warden is
			// frozen or wedged. Give it up (its processes end lost; the
			// next launch gets a new warden).
			w.link.Abort(fmt.Errorf("no answer to the spawn of process %s: %w", a.p.ID, m.err))
		}
		select {
		case <-w.link.Done():
			// The spawn request went out and the link ended: the warden
			// may have started it (it runs on, unreported, until the
			// sandbox stops). Its outcome is lost, not a failure, unless
			// the warden died because its workload did.
			sb, bg, cause := a.p.Sandbox, a.bg, m.err
			go func() { a.send(spawnLost{gone: w.workloadDying(bg, sb), err: cause}) }()
		default:
			a.finish(lifecycle.ReasonFailed, -1, spec.Wrap(spec.CodeStreamFailure, "process", m.err, "process %s: the sandbox's warden did not spawn it", a.p.ID))
		}
		return
	}
	w.proc = m.proc
	if a.done {
		m.proc.Close()
		return
	}
	w.watchReap(m.proc)
	failpoint.Hit(failpoint.ProcessAttached)
	a.running(ctx, &wardenAttachment{p: m.proc, stdin: a.p.Spec.Stdin}, lifecycle.ProcessStarted{PID: m.proc.PID, ByWarden: true})
}

// watchReap waits, off the mailbox, for the warden's report of the
// process's end (its output's totals by stream, which come with Exited,
// are read from p when they are needed: the read loop reaches its end only
// after them).
func (w *wardenTransport) watchReap(p *link.Proc) {
	a := w.a
	link, bg := w.link, a.bg
	go func() {
		select {
		case <-p.Reaped():
		case <-bg.Done():
			return // given up (or the actor stopped): nobody waits
		}
		r, ok := p.Reap()
		a.send(wardenReaped{reap: r, ok: ok, err: link.Err()})
	}()
}

// onReaped takes the warden's report of the end, as an exec_die would be
// (the output may still be draining). A link that ended first leaves the
// outcome unknown: the warden is gone, and with it any way to learn the
// code; the group is killed through Docker and the process ends lost.
func (w *wardenTransport) onReaped(m wardenReaped) {
	a := w.a
	if a.done || a.exit.state != nil {
		return
	}
	if !m.ok {
		w.lost(m.err)
		return
	}
	failpoint.Hit(failpoint.ProcessReapReported)
	code := m.reap.Code
	if m.reap.Signal > 0 {
		code = 128 + m.reap.Signal // as Docker and a shell report it
	}
	a.exit.state = &dockerio.ExecState{Known: true, ExitCode: code, Pid: w.proc.PID}
	a.exit.oom = &oomChecked{kills: m.reap.OOMKills}
	if m.reap.OOMKills < 0 || a.exit.oomBase < 0 {
		a.exit.oom.err = errors.New("the sandbox's OOM kill count is unreadable")
	}
	a.maybeFinish()
}

// lost ends a process whose warden link broke: its group is killed
// through a Docker exec (the warden can no longer do it) and it ends lost.
func (w *wardenTransport) lost(cause error) {
	a := w.a
	if a.done || a.exit.state != nil {
		return
	}
	if errors.Is(cause, link.ErrLinkClosed) {
		// The sandbox let go of the link: the runtime is closing, and
		// this actor stops next (the process is left to the warden and
		// the next recovery).
		return
	}
	if a.stopping.reason == "" || a.stopping.reason == lifecycle.ReasonSignaled {
		a.stopping.reason = lifecycle.ReasonLost
	}
	if a.state.Phase == lifecycle.PhaseStarted {
		// No kill without its intent journaled first.
		if jerr := a.record(lifecycle.ProcessStopping{Reason: lifecycle.ReasonLost}); jerr != nil {
			a.abandonJournal(jerr)
			return
		}
	}
	a.stopping.err = spec.Wrap(spec.CodeStreamFailure, "process", cause, "process %s: the sandbox's warden was lost; the process group was killed", a.p.ID)
	w.killGroupByDocker()
	a.exit.state = &dockerio.ExecState{Known: true, ExitCode: -1}
	// The read loop is not cut here: once the link ended Proc.Next no
	// longer blocks, and hands on every byte the link received before
	// the link's error, so the loop records, counts and delivers them and
	// ends by itself. A consumer that does not read is cut by
	// maybeFinish, as for any stopping process whose end is known.
	a.maybeFinish()
}

// giveUp ends a process whose warden did not report it reaped after its
// group was KILLed (and the grace ran out, frozen time not counted): that
// process alone is given up — its group killed through Docker, its end
// journaled lost — and the link its neighbours use stays up. The sandbox
// is told, and decides from a probe whether the warden still answers.
func (w *wardenTransport) giveUp() {
	a := w.a
	cause := fmt.Errorf("process %s was not reported reaped after its group was killed", a.p.ID)
	a.sys.Root.Send(a.parent, WardenUnanswered{ID: a.p.ID, Err: cause})
	a.stopping.reason = "" // the process's outcome is now lost, whatever stopped it
	w.lost(cause)
}

// killGroupByDocker kills the process's group with a Docker exec (its
// warden can no longer do it); the exit waits for it (exitHeld).
func (w *wardenTransport) killGroupByDocker() {
	a := w.a
	pgid := a.state.Group
	if pgid <= 1 || w.killPending {
		return
	}
	w.killPending = true
	sb, bg := a.p.Sandbox, a.bg
	go func() {
		// A warden often dies with its workload: Docker may then still
		// show the container running for a moment, and either refuse
		// execs into it ("cannot exec in a stopped state") or let the
		// kill through. Either way the workload is watched a moment
		// (workloadDying) before the process is taken for lost.
		kill := func() error {
			err := a.whileFrozen(bg, func(ctx context.Context) error { return a.engine.SignalGroup(ctx, sb, pgid, syscall.SIGKILL) })
			if spec.IsCode(err, spec.CodeNotFound) {
				return nil
			}
			return err
		}
		err := kill()
		if w.workloadDying(bg, sb) {
			a.send(groupKilled{workloadGone: true})
			return
		}
		if err != nil {
			err = kill() // the workload lives: the kill once more
		}
		if err != nil {
			a.deps.Log.Warn("killing the group of a process whose warden was lost failed", "process", a.p.ID, "err", err)
		}
		a.send(groupKilled{failed: err})
	}()
}

// signal signals the group through the warden, off the mailbox (a frozen
// warden must not block the actor); through Docker for a recovering
// process whose warden is gone.
func (w *wardenTransport) signal(sig syscall.Signal, reply chan<- error) {
	a := w.a
	p := w.proc
	if p == nil {
		a.signalByDocker(sig, reply)
		return
	}
	go func() {
		err := p.Signal(sig)
		if err != nil {
			err = spec.Wrap(spec.CodeStreamFailure, "process", err, "signalling process %s through the warden", a.p.ID)
		}
		if reply != nil {
			a.send(signalled{reply: reply, err: err})
		} else if err != nil {
			a.deps.Log.Warn("signalling a process group failed", "process", a.p.ID, "signal", sig, "err", err)
		}
	}()
}

// killed: a warden that does not report the KILLed process reaped in time
// (frozen time not counted) is stopped (SIGSTOP) or wedged, or lost track
// of this one process: it is given up then (killUnseen).
func (w *wardenTransport) killed(gen int) {
	a := w.a
	if w.proc != nil && a.exit.state == nil {
		a.after(a.deps.Config.StopGrace+5*time.Second, killUnseen{gen: gen})
	}
}

// awaitExit: the warden reports the end by itself (watchReap).
func (w *wardenTransport) awaitExit() {}

// closing: the sandbox let go of the link (the runtime closes).
func (w *wardenTransport) closing(err error) bool {
	return w.proc != nil && errors.Is(err, link.ErrLinkClosed)
}

// streamFailed: the warden's link broke (or the warden broke the
// protocol): not the daemon's stream, so nothing to fail closed; the
// sandbox replaces its warden.
func (w *wardenTransport) streamFailed(err error) { w.lost(err) }

func (w *wardenTransport) exitHeld() bool { return w.killPending }

func (w *wardenTransport) startFailure(code int, head []byte) error {
	if w.proc != nil {
		// The warden reports a failed spawn itself: a 126 or 127 here is
		// the program's own exit code.
		head = nil
	}
	return dockerio.ExecFailure(code, head)
}

func (w *wardenTransport) exiting(ev *lifecycle.ProcessExited) {
	ev.Changes = w.changes()
	if w.proc != nil {
		if ex, ok := w.proc.Exit(); ok && ex.Usage != (wire.Usage{}) {
			u := ex.Usage
			ev.Usage = &spec.ProcessUsage{Source: spec.UsageRusage, Wall: time.Duration(u.WallNanos),
				User: time.Duration(u.UserNanos), System: time.Duration(u.SystemNanos),
				MaxRSS: u.MaxRSS, ReadBytes: u.ReadBytes, WriteBytes: u.WriteBytes}
		}
	}
	if w.proc != nil && w.a.p.Adopt != nil {
		// A re-adopted process's read loop saw only what came after the
		// resume: the warden counted every byte by stream. (A process
		// this runtime read from the start keeps the counts of what it
		// took: with a quota hit, the warden read more than was taken.)
		if ex, ok := w.proc.Exit(); ok {
			ev.StdoutBytes, ev.StderrBytes = int64(ex.Stdout), int64(ex.Stderr)
		}
	}
}

// exited: journaled, the warden may drop it (off the mailbox). A lost
// process's too: one given up alone while its link lives is then killed
// and dropped by the warden (stockade-warden/3), not left a stray holding
// a window; on an ended link Forget sends nothing.
func (w *wardenTransport) exited() {
	if w.proc != nil {
		log, id := w.a.deps.Log, w.a.p.ID
		go func(p *link.Proc) {
			if err := p.Forget(); err != nil {
				log.Warn("the warden could not be told to forget an exited process", "process", id, "err", err)
			}
			failpoint.Hit(failpoint.ProcessForgetSent)
		}(w.proc)
	}
}

func (w *wardenTransport) resize(m Resize) {
	a := w.a
	switch {
	case w.proc == nil:
		m.Reply <- a.notRunning()
	case m.Rows == 0 || m.Cols == 0:
		m.Reply <- spec.Errorf(spec.CodeInvalidArgument, "process", "terminal size %dx%d: both must be positive", m.Rows, m.Cols)
	default:
		p := w.proc
		go func() {
			if err := p.Resize(m.Rows, m.Cols); err != nil {
				m.Reply <- spec.Wrap(spec.CodeStreamFailure, "process", err, "resizing the terminal of process %s", a.p.ID)
				return
			}
			m.Reply <- nil
		}()
	}
}

// wardenAttachment presents a warden's process as an Attachment: the read
// loop's next call to Next is what acknowledges the previous chunk (it has
// been recorded and handed to the consumer's pipe by then).
type wardenAttachment struct {
	p     *link.Proc
	stdin bool
}

func (w *wardenAttachment) Next() (framing.StreamID, []byte, error) {
	s, b, err := w.p.Next()
	if err != nil {
		var cut *link.OutputCutError
		if errors.As(err, &cut) {
			// Everything the link received was handed on first.
			err = spec.Wrap(spec.CodeStreamFailure, "process", err, "the output of process %s was cut: its warden link ended", w.p.ID)
		}
		return 0, nil, err
	}
	return framing.StreamID(s), b, nil
}

func (w *wardenAttachment) Stdin() io.Writer {
	if !w.stdin {
		return nil
	}
	return w.p
}

func (w *wardenAttachment) CloseStdin() error {
	if err := w.p.CloseStdin(); err != nil {
		return spec.Wrap(spec.CodeStreamFailure, "process", err, "closing stdin through the warden")
	}
	return nil
}

// totals are the per-stream output totals once the warden reported the
// end (a resumed recording cannot count the bytes a crash cut off by
// stream).
func (w *wardenAttachment) totals() (stdout, stderr int64, ok bool) {
	ex, ok := w.p.Exit()
	return int64(ex.Stdout), int64(ex.Stderr), ok
}

func (w *wardenAttachment) Group() int      { return w.p.PGID }
func (w *wardenAttachment) OOMKills() int64 { return w.p.OOMKills }
func (w *wardenAttachment) Close() error    { w.p.Close(); return nil }
