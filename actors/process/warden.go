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
	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/internal/failpoint"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/warden"
)

// A process of a sandbox with a warden is spawned by the warden over the
// sandbox's link, not by a Docker exec: reserved is journaled before the
// spawn request, started {pid, pgid} once the warden reports it, and the
// end comes from the warden's exited report (no inspect, no exec_die).
// Everything after the start (streams, recording, stop, quota, timeout) is
// the same actor as for an exec: the warden's process is presented as an
// Attachment.

type (
	wardenSpawned struct {
		proc *warden.Proc
		err  error
	}
	wardenReaped struct {
		reap warden.Reaped
		ok   bool
		err  error
	}
)

// spawnWarden asks the warden for the process, off the mailbox.
func (a *processActor) spawnWarden(bg context.Context) {
	s := spawnRequest(a.p.ID, a.p.Spec)
	s.Env = dockerio.ProxyEnv(a.p.Sandbox, a.p.ID, s.Env)
	s.Sent = func() { failpoint.Hit(failpoint.ProcessSpawnSent) }
	link := a.p.Link
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

// spawnRequest is the warden's Spawn for a process spec.
func spawnRequest(id string, sp spec.Process) warden.Spawn {
	dir := sp.Dir
	if dir == "" {
		dir = dockerio.WorkDir
	}
	return warden.Spawn{ID: id, Argv: sp.Argv, Env: sp.Env, Dir: dir, Stdin: sp.Stdin, TTY: sp.TTY, Rows: sp.Rows, Cols: sp.Cols}
}

// spawnLost: the link ended before the warden reported a spawn; gone says
// the workload died meanwhile.
type spawnLost struct {
	gone bool
	err  error
}

func (a *processActor) onSpawnLost(m spawnLost) {
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
func (a *processActor) workloadDying(bg context.Context, sb dockerio.Sandbox) bool {
	pause := 100 * time.Millisecond
	for attempt := 0; ; attempt++ {
		vctx, cancel := context.WithTimeout(bg, a.deps.Config.DockerTimeout)
		gone := a.deps.Engine.VerifySandbox(vctx, sb) != nil
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

func (a *processActor) onWardenSpawned(ctx actor.Context, m wardenSpawned) {
	if m.err != nil {
		if a.done {
			return
		}
		if errors.Is(m.err, warden.ErrLinkClosed) {
			// The runtime is closing: the spawn may have happened; the
			// process stays reserved for the next recovery to settle
			// from the warden's table.
			a.detach()
			return
		}
		var se *warden.SpawnError
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
			a.p.Link.Abort(fmt.Errorf("no answer to the spawn of process %s: %w", a.p.ID, m.err))
		}
		select {
		case <-a.p.Link.Done():
			// The spawn request went out and the link ended: the warden
			// may have started it (it runs on, unreported, until the
			// sandbox stops). Its outcome is lost, not a failure, unless
			// the warden died because its workload did.
			sb, bg, cause := a.p.Sandbox, a.bg, m.err
			go func() { a.send(spawnLost{gone: a.workloadDying(bg, sb), err: cause}) }()
		default:
			a.finish(lifecycle.ReasonFailed, -1, spec.Wrap(spec.CodeStreamFailure, "process", m.err, "process %s: the sandbox's warden did not spawn it", a.p.ID))
		}
		return
	}
	a.wproc = m.proc
	if a.done {
		m.proc.Close()
		return
	}
	a.watchWarden(m.proc)
	failpoint.Hit(failpoint.ProcessAttached)
	a.onAttached(ctx, attached{att: &wardenAttachment{p: m.proc, stdin: a.p.Spec.Stdin}})
}

// watchWarden waits, off the mailbox, for the warden's report of the
// process's end (its output's totals by stream, which come with Exited,
// are read from p when they are needed: the read loop reaches its end only
// after them).
func (a *processActor) watchWarden(p *warden.Proc) {
	link, bg := a.p.Link, a.bg
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

// onWardenReaped takes the warden's report of the end, as an exec_die
// would be (the output may still be draining). A link that ended first
// leaves the outcome unknown: the warden is gone, and with it any way to
// learn the code; the group is killed through Docker and the process ends
// lost.
func (a *processActor) onWardenReaped(m wardenReaped) {
	if a.done || a.exit != nil {
		return
	}
	if !m.ok {
		a.wardenLost(m.err)
		return
	}
	failpoint.Hit(failpoint.ProcessReapReported)
	code := m.reap.Code
	if m.reap.Signal > 0 {
		code = 128 + m.reap.Signal // as Docker and a shell report it
	}
	a.exit = &dockerio.ExecState{Known: true, ExitCode: code, Pid: a.wproc.PID}
	a.oomChecked = &oomChecked{kills: m.reap.OOMKills}
	if m.reap.OOMKills < 0 || a.oomBase < 0 {
		a.oomChecked.err = errors.New("the sandbox's OOM kill count is unreadable")
	}
	a.maybeFinish()
}

// wardenLost ends a process whose warden link broke: its group is killed
// through a Docker exec (the warden can no longer do it) and it ends lost.
func (a *processActor) wardenLost(cause error) {
	if a.done || a.exit != nil {
		return
	}
	if errors.Is(cause, warden.ErrLinkClosed) {
		// The sandbox let go of the link: the runtime is closing, and
		// this actor stops next (the process is left to the warden and
		// the next recovery).
		return
	}
	if a.stopReason == "" || a.stopReason == lifecycle.ReasonSignaled {
		a.stopReason = lifecycle.ReasonLost
	}
	if a.state.Phase == lifecycle.PhaseStarted {
		// No kill without its intent journaled first.
		if jerr := a.record(lifecycle.ProcessStopping{Reason: lifecycle.ReasonLost}); jerr != nil {
			a.abandonJournal(jerr)
			return
		}
	}
	a.stopErr = spec.Wrap(spec.CodeStreamFailure, "process", cause, "process %s: the sandbox's warden was lost; the process group was killed", a.p.ID)
	a.killGroupByDocker()
	a.exit = &dockerio.ExecState{Known: true, ExitCode: -1}
	// The read loop is not cut here: once the link ended Proc.Next no
	// longer blocks, and hands on every byte the link received before
	// the link's error, so the loop records, counts and delivers them and
	// ends by itself. A consumer that does not read is cut by
	// maybeFinish, as for any stopping process whose end is known.
	a.maybeFinish()
}

// groupKilled says the Docker-side kill of a lost warden's process group
// is done: the process may be journaled ended.
type groupKilled struct {
	// workloadGone: Docker cannot exec into the workload (not running,
	// or gone): the warden died with its sandbox.
	workloadGone bool
	// failed: the kill could not be sent (the process may run on until
	// its sandbox stops).
	failed error
}

// killGroupByDocker kills the process's group with a Docker exec (its
// warden can no longer do it); the exit waits for it (maybeFinish).
func (a *processActor) killGroupByDocker() {
	pgid := a.state.Group
	if pgid <= 1 || a.killPending {
		return
	}
	a.killPending = true
	sb, bg := a.p.Sandbox, a.bg
	go func() {
		// A warden often dies with its workload: Docker may then still
		// show the container running for a moment, and either refuse
		// execs into it ("cannot exec in a stopped state") or let the
		// kill through. Either way the workload is watched a moment
		// (workloadDying) before the process is taken for lost.
		kill := func() error {
			err := a.whileFrozen(bg, func(ctx context.Context) error { return a.deps.Engine.SignalGroup(ctx, sb, pgid, syscall.SIGKILL) })
			if spec.IsCode(err, spec.CodeNotFound) {
				return nil
			}
			return err
		}
		err := kill()
		if a.workloadDying(bg, sb) {
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

// killUnseen: the KILL's grace for the warden to report the reap ran out.
type killUnseen struct{ gen int }

// signalWarden signals the group through the warden, off the mailbox (a
// frozen warden must not block the actor).
func (a *processActor) signalWarden(sig syscall.Signal, reply chan<- error) {
	p := a.wproc
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

// Resize asks for a process's terminal size.
type Resize struct {
	Rows, Cols uint16
	Reply      chan<- error
}

func (a *processActor) resize(m Resize) {
	switch {
	case !a.p.Spec.TTY:
		m.Reply <- spec.Errorf(spec.CodeInvalidArgument, "process", "process %s has no terminal to resize", a.p.ID)
	case a.done || a.wproc == nil:
		m.Reply <- spec.Errorf(spec.CodeNotFound, "process", "process %s is not running", a.p.ID)
	case m.Rows == 0 || m.Cols == 0:
		m.Reply <- spec.Errorf(spec.CodeInvalidArgument, "process", "terminal size %dx%d: both must be positive", m.Rows, m.Cols)
	default:
		p := a.wproc
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
	p     *warden.Proc
	stdin bool
}

func (w *wardenAttachment) Next() (framing.StreamID, []byte, error) {
	s, b, err := w.p.Next()
	if err != nil {
		var cut *warden.OutputCutError
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
