package dockerio

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"syscall"
	"time"

	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/warden"
)

// The Fake's wardens are the real warden library run in this process
// (warden.NewInProcess) over net.Pipe links: every test on the Fake goes
// through the production transport (spawn, stream, ack, resume, reattach,
// rekey, tables, the kill of a lost warden's groups). Only the process
// boundary is faked: each child runs its FakeRun (Script) as a Program.

// fakeWarden is one warden server of a fake sandbox.
type fakeWarden struct {
	srv    *warden.Server
	pid    int
	socket string
}

// HasWarden reports whether the Fake's sandboxes get a warden (unless
// NoWarden).
func (f *Fake) HasWarden() bool { return !f.NoWarden }

// StartWarden starts an in-process warden for the sandbox and returns the
// runtime's end of its first link.
func (f *Fake) StartWarden(ctx context.Context, sb Sandbox, stderr io.Writer) (WardenConn, error) {
	if f.NoWarden {
		return WardenConn{}, errFakeNoWarden
	}
	if err := f.enter(ctx, "StartWarden"); err != nil {
		return WardenConn{}, err
	}
	key := sb.Owner + "/" + sb.ID
	f.mu.Lock()
	s, err := f.runningWorkload(sb)
	if err != nil {
		f.mu.Unlock()
		return WardenConn{}, err
	}
	f.next++
	pid := 100 + f.next
	w := &fakeWarden{pid: pid, socket: TmpDir + "/.stockade-warden-" + strconv.Itoa(pid) + ".sock"}
	w.srv = warden.NewInProcess(warden.InProcess{
		Start: func(c *warden.Child) (warden.Program, error) { return f.program(sb, c) },
		OOMKills: func() int64 {
			f.mu.Lock()
			defer f.mu.Unlock()
			if s, ok := f.sandboxes[key]; ok {
				return s.oomKills
			}
			return 0
		},
		PID:    pid,
		Socket: w.socket,
		Dir:    WorkDir,
	})
	s.wardens = append(s.wardens, w)
	id := f.id("x")
	f.mu.Unlock()

	runtimeEnd, wardenEnd := net.Pipe()
	go func() {
		if err := w.srv.Serve(f.gated(key, wardenEnd)); err != nil && stderr != nil {
			_, _ = fmt.Fprintf(stderr, "stockade-warden: no init: %v\n", err)
		}
	}()
	return WardenConn{ExecID: id, R: runtimeEnd, W: runtimeEnd, C: runtimeEnd}, nil
}

// AttachWarden bridges a new link to the warden listening on socket, as
// `stockade-warden attach` does; with no warden there the link ends at
// once (the attach exec fails).
func (f *Fake) AttachWarden(ctx context.Context, sb Sandbox, socket string, stderr io.Writer) (WardenConn, error) {
	if f.NoWarden {
		return WardenConn{}, errFakeNoWarden
	}
	if err := f.enter(ctx, "AttachWarden"); err != nil {
		return WardenConn{}, err
	}
	if err := checkWardenSocket(socket); err != nil {
		return WardenConn{}, err
	}
	key := sb.Owner + "/" + sb.ID
	f.mu.Lock()
	s, err := f.runningWorkload(sb)
	if err != nil {
		f.mu.Unlock()
		return WardenConn{}, err
	}
	var w *fakeWarden
	for _, have := range s.wardens {
		if have.socket == socket {
			w = have
		}
	}
	id := f.id("x")
	f.mu.Unlock()

	runtimeEnd, wardenEnd := net.Pipe()
	if w == nil {
		if stderr != nil {
			_, _ = fmt.Fprintf(stderr, "stockade-warden attach: %s: connect: no such file or directory\n", socket)
		}
		_ = wardenEnd.Close() // the attach failed: its link ends
	} else {
		go w.srv.Reattach(f.gated(key, wardenEnd))
	}
	return WardenConn{ExecID: id, R: runtimeEnd, W: runtimeEnd, C: runtimeEnd}, nil
}

// runningWorkload is the sandbox whose workload takes an exec now (an
// exec, a warden's start or attach): present, not paused, running. f.mu is held.
func (f *Fake) runningWorkload(sb Sandbox) (*fakeSandbox, error) {
	s, err := f.get(sb)
	if err == nil {
		err = f.pausedErr(sb.Owner + "/" + sb.ID)
	}
	if err == nil && !s.running {
		err = spec.Errorf(spec.CodeConflict, "dockerio.fake", "container %s is not running", sb.Workload)
	}
	return s, err
}

// EnsureWarden: the Fake's warden binary is always in place.
func (f *Fake) EnsureWarden(ctx context.Context, sb Sandbox) error {
	if f.NoWarden {
		return errFakeNoWarden
	}
	return f.with(ctx, "EnsureWarden", sb, func(*fakeSandbox) error { return nil })
}

// RetireWarden ends the warden server of pid (every one when pid is 0),
// as `stockade-warden retire` does; its children run on.
func (f *Fake) RetireWarden(ctx context.Context, sb Sandbox, pid int, socket string) error {
	if f.NoWarden {
		return errFakeNoWarden
	}
	var retired []*fakeWarden
	err := f.with(ctx, "RetireWarden", sb, func(s *fakeSandbox) error {
		kept := s.wardens[:0]
		for _, w := range s.wardens {
			if pid == 0 || w.pid == pid {
				retired = append(retired, w)
				continue
			}
			kept = append(kept, w)
		}
		s.wardens = kept
		return nil
	})
	for _, w := range retired {
		w.srv.Retire()
	}
	return err
}

// WardenCount is how many warden servers run in the sandbox (tests).
func (f *Fake) WardenCount(sb Sandbox) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.sandboxes[sb.Owner+"/"+sb.ID]; ok {
		return len(s.wardens)
	}
	return 0
}

// WardenProcesses is how many processes the sandbox's wardens hold (tests).
func (f *Fake) WardenProcesses(sb Sandbox) int {
	f.mu.Lock()
	var ws []*fakeWarden
	if s, ok := f.sandboxes[sb.Owner+"/"+sb.ID]; ok {
		ws = append(ws, s.wardens...)
	}
	f.mu.Unlock()
	n := 0
	for _, w := range ws {
		n += w.srv.Processes()
	}
	return n
}

// takeWardens removes the sandbox's wardens, to be stopped (stopWardens)
// once f.mu is released: a warden's own calls into the Fake take f.mu.
// f.mu is held.
func (s *fakeSandbox) takeWardens() []*fakeWarden {
	ws := s.wardens
	s.wardens = nil
	return ws
}

// stopWardens ends wardens as their container's end does: links closed,
// every child killed. f.mu is not held.
func stopWardens(ws []*fakeWarden) {
	for _, w := range ws {
		w.srv.Stop()
	}
}

// signalWardens signals a group of a warden's children (the runtime's
// `stockade-warden kill` when its link is lost); false when none has it.
// f.mu is not held.
func signalWardens(ws []*fakeWarden, pgid int, sig syscall.Signal) bool {
	for _, w := range ws {
		if w.srv.Signal(pgid, sig) {
			return true
		}
	}
	return false
}

// program is the Program of one warden child: its FakeRun, as Script says
// for the request it stands for.
func (f *Fake) program(sb Sandbox, c *warden.Child) (warden.Program, error) {
	req := ExecRequest{ProcessID: c.ID, Spec: spec.Process{Argv: c.Argv, Env: c.Env, Dir: c.Dir, Stdin: c.Piped, TTY: c.TTY}}
	run := FakeRun{}
	if f.Script != nil {
		run = f.Script(sb, req)
	}
	key := sb.Owner + "/" + sb.ID
	f.mu.Lock()
	s, ok := f.sandboxes[key]
	hasDir := ok && s.hasDir(c.Dir)
	f.mu.Unlock()
	if run.StartFailure != "" {
		return nil, &warden.StartError{Code: 127, Text: run.StartFailure}
	}
	if !hasDir {
		return nil, &warden.StartError{Code: 126, Text: fmt.Sprintf("working directory %s: no such file or directory", c.Dir)}
	}
	return func(c *warden.Child) warden.Status {
		done, stop := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			runScript(run, c, stop)
		}()
		for {
			select {
			case <-done:
				if run.OOM {
					f.mu.Lock()
					if s, ok := f.sandboxes[key]; ok {
						s.oomKills++
					}
					f.mu.Unlock()
					return warden.Status{Signal: syscall.SIGKILL}
				}
				return warden.Status{Code: run.ExitCode}
			case sig := <-c.Signals:
				if ignoredSignal(sig) || sig == syscall.SIGTERM && run.IgnoreTERM {
					continue
				}
				// The default action of the rest: the child ends,
				// and whatever it was writing with it.
				close(stop)
				_ = c.Stdin.Close()  // the child's end: nothing to lose
				_ = c.Stdout.Close() // likewise
				_ = c.Stderr.Close() // likewise
				<-done
				return warden.Status{Signal: sig}
			}
		}
	}, nil
}

// runScript does what run says on c's stdio: its frames, then its stdin
// (echoed when asked), then its hold, then its frames after the hold,
// until stop.
func runScript(run FakeRun, c *warden.Child, stop <-chan struct{}) {
	for _, fr := range run.Frames {
		out := c.Stdout
		if fr.Stream == framing.Stderr {
			out = c.Stderr
		}
		if _, err := out.Write(fr.Data); err != nil {
			return
		}
	}
	if c.Piped {
		buf := make([]byte, 32<<10)
		for {
			n, err := c.Stdin.Read(buf)
			if n > 0 && run.EchoStdin {
				if _, err := c.Stdout.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				break
			}
		}
	}
	if run.Hold != nil {
		select {
		case <-run.Hold:
		case <-stop:
			return
		}
	}
	for _, fr := range run.After {
		out := c.Stdout
		if fr.Stream == framing.Stderr {
			out = c.Stderr
		}
		if _, err := out.Write(fr.Data); err != nil {
			return
		}
	}
}

// ignoredSignal: the signals whose default action leaves a process running.
func ignoredSignal(sig syscall.Signal) bool {
	return sig == syscall.SIGCHLD || sig == syscall.SIGCONT || sig == syscall.SIGURG || sig == syscall.SIGWINCH
}

// gated is conn as a frozen workload's warden sees it: while the sandbox is
// paused, the warden neither reads nor writes.
func (f *Fake) gated(key string, conn net.Conn) net.Conn {
	return &gatedConn{Conn: conn, paused: func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		s, ok := f.sandboxes[key]
		return ok && s.paused
	}}
}

type gatedConn struct {
	net.Conn
	paused func() bool
}

// pauseCheck is how often a frozen warden looks for its thaw.
const pauseCheck = 2 * time.Millisecond

func (c *gatedConn) wait() {
	for c.paused() {
		time.Sleep(pauseCheck)
	}
}

func (c *gatedConn) Read(b []byte) (int, error) {
	c.wait()
	return c.Conn.Read(b)
}

func (c *gatedConn) Write(b []byte) (int, error) {
	c.wait()
	return c.Conn.Write(b)
}
