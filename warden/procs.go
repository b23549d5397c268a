package warden

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/stockade/stockade/warden/wire"
)

// procs is the warden's process boundary: how a child's directory and
// program are found, how it is started, signalled and counted against the
// memory cgroup. Everything on the warden's side of it (pipes, ptys,
// windows, the link, reaping into the table) is the same for both
// implementations: osProcs forks and execs real children in this process's
// namespaces (the stockade-warden program), inProcess runs each child as a
// Program of this process (the Fake engine's warden, tests').
type procs interface {
	// dir refuses a working directory the child cannot start in (a
	// *spawnError).
	dir(dir string) error
	// resolve finds the program a name without a slash names, on env's
	// PATH from dir (a *spawnError when there is none to run).
	resolve(name string, env []string, dir string) (string, error)
	// fork starts path for sp with attr (attr.Files are the child's
	// stdio, which the caller closes once fork returns) and, unless
	// sp.NoChanges, a change tracker of its writes. The child's pid is its
	// group's id.
	fork(path string, sp *wire.Spawn, attr *syscall.ProcAttr) (int, *tracker, error)
	// started is told of each child once registered.
	started(pid int)
	// kill signals a child's group; unix.ESRCH when it is gone.
	kill(pgid int, sig unix.Signal) error
	// oomKills is the sandbox memory cgroup's OOM kill count, -1 when
	// unknown.
	oomKills() int64
}

// osProcs is the real process boundary.
type osProcs struct{}

var _ procs = osProcs{}

func (osProcs) dir(dir string) error {
	fi, err := os.Stat(dir)
	if err == nil && !fi.IsDir() {
		err = unix.ENOTDIR
	}
	if err != nil {
		return &spawnError{code: 126, text: fmt.Sprintf("working directory %s: %v", dir, err)}
	}
	return nil
}

func (osProcs) resolve(name string, env []string, dir string) (string, error) {
	return lookPath(name, env, dir)
}

func (osProcs) fork(path string, sp *wire.Spawn, attr *syscall.ProcAttr) (int, *tracker, error) {
	if sp.NoChanges {
		pid, err := syscall.ForkExec(path, sp.Argv, attr)
		return pid, untrackedTracker("not asked for"), err
	}
	t := newTracker()
	pid, err := forkTracked(t, path, sp.Argv, attr)
	return pid, t, err
}

// started: the OOM killer should take a child before the warden (best
// effort: anything the child forked before this inherits the old score).
func (osProcs) started(pid int) {
	if err := os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte("1000"), 0); err != nil {
		logf("process %d: oom_score_adj: %v", pid, err)
	}
}

func (osProcs) kill(pgid int, sig unix.Signal) error { return unix.Kill(-pgid, sig) }

func (osProcs) oomKills() int64 { return oomKills() }

// Child is one child of an in-process warden as its Start and Program see
// it.
type Child struct {
	// ID is the runtime's process id (Spawn's); PID the child's pid (and
	// its group's id) as the runtime sees it.
	ID   string
	PID  int
	Argv []string
	Env  []string
	Dir  string
	TTY  bool
	// Piped says the child was spawned with stdin from the runtime.
	Piped bool
	// Stdin is the child's input: a pipe from the runtime when it was
	// spawned with stdin, the terminal for a TTY, /dev/null otherwise.
	// Stdout and Stderr are its output pipes (for a TTY all three are the
	// terminal). The Program may close them; the warden closes what is
	// left open when it returns.
	Stdin, Stdout, Stderr *os.File
	// Signals carries each signal sent to the child's group (a few are
	// kept; more are dropped while the Program does not read them).
	Signals <-chan syscall.Signal
}

// Status is how a Program's child ended: an exit code, or a signal
// (Signal non-zero, Code ignored).
type Status struct {
	Code   int
	Signal syscall.Signal
	// Usage is what the program says it used, as a real child's rusage
	// would (zero: only its wall time is known).
	Usage wire.Usage
}

// Program is what one child of an in-process warden does; it returns when
// the child ends.
type Program func(c *Child) Status

// StartError refuses a spawn as a failed exec would: Code 127 for a
// program not found, 126 for one that cannot run.
type StartError struct {
	Code int
	Text string
}

func (e *StartError) Error() string { return e.Text }

// inProcess runs children as Programs. Its pids count up from a base far
// from the warden's own.
type inProcess struct {
	start   func(c *Child) (Program, error)
	oom     func() int64
	s       *state
	mu      sync.Mutex
	next    int
	signals map[int]chan syscall.Signal // by pid, while the Program runs
}

var _ procs = (*inProcess)(nil)

// dir: an in-process child's directory is its Start's to refuse.
func (*inProcess) dir(string) error { return nil }

func (*inProcess) resolve(name string, _ []string, _ string) (string, error) { return name, nil }

func (ip *inProcess) fork(path string, sp *wire.Spawn, attr *syscall.ProcAttr) (int, *tracker, error) {
	// The child's ends are the caller's to close: the child gets copies.
	var files [3]*os.File
	dups := map[uintptr]*os.File{}
	closeAll := func() {
		for _, f := range dups {
			_ = f.Close() // the child's copies; closed already when it closed them
		}
	}
	for i, fd := range attr.Files[:3] {
		if f, ok := dups[fd]; ok {
			files[i] = f
			continue
		}
		nfd, err := unix.Dup(int(fd))
		if err != nil {
			closeAll()
			return 0, nil, &spawnError{code: 126, text: err.Error()}
		}
		unix.CloseOnExec(nfd)
		// In the poller, so that the Program's end (a Close) stops a
		// write blocked on a full pipe, as a real child's death does.
		_ = unix.SetNonblock(nfd, true) // without it, only a kill's Close is late
		files[i] = os.NewFile(uintptr(nfd), "child-"+strconv.Itoa(i))
		dups[fd] = files[i]
	}
	sigs := make(chan syscall.Signal, 8)
	ip.mu.Lock()
	ip.next++
	pid := 1<<20 + ip.next
	ip.mu.Unlock()
	argv := append([]string{path}, sp.Argv[1:]...)
	c := &Child{ID: sp.ID, PID: pid, Argv: argv, Env: attr.Env, Dir: attr.Dir, TTY: sp.TTY, Piped: sp.Stdin, Stdin: files[0], Stdout: files[1], Stderr: files[2], Signals: sigs}
	prog, err := ip.start(c)
	if err != nil {
		closeAll()
		var se *StartError
		switch {
		case errors.As(err, &se):
			return 0, nil, &spawnError{code: se.Code, text: se.Text}
		case errors.Is(err, fs.ErrNotExist):
			return 0, nil, &spawnError{code: 127, text: err.Error()}
		default:
			return 0, nil, &spawnError{code: 126, text: err.Error()}
		}
	}
	ip.mu.Lock()
	ip.signals[pid] = sigs
	ip.mu.Unlock()
	go func() {
		st := prog(c)
		closeAll()
		ip.mu.Lock()
		delete(ip.signals, pid)
		ip.mu.Unlock()
		ws := syscall.WaitStatus(uint32(st.Code&0xff) << 8)
		if st.Signal != 0 {
			ws = syscall.WaitStatus(uint32(st.Signal) & 0x7f)
		}
		ip.s.forkMu.Lock()
		ip.s.ended(pid, ws, st.Usage)
		ip.s.forkMu.Unlock()
	}()
	return pid, untrackedTracker("an in-process warden tracks no changes"), nil
}

func (*inProcess) started(int) {}

func (ip *inProcess) kill(pgid int, sig unix.Signal) error {
	ip.mu.Lock()
	defer ip.mu.Unlock()
	ch, ok := ip.signals[pgid]
	if !ok {
		return unix.ESRCH
	}
	if sig == 0 {
		return nil // a probe: the group is there
	}
	select {
	case ch <- sig:
	default:
	}
	return nil
}

// killAll signals every child still running (its container's end).
func (ip *inProcess) killAll(sig unix.Signal) {
	ip.mu.Lock()
	defer ip.mu.Unlock()
	for _, ch := range ip.signals {
		select {
		case ch <- sig:
		default:
		}
	}
}

func (ip *inProcess) oomKills() int64 {
	if ip.oom == nil {
		return 0
	}
	return ip.oom()
}
