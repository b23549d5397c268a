package warden

import (
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stockade/stockade/warden/wire"
)

// reapEvery bounds how long a lost SIGCHLD (signals of one kind merge) can
// delay noticing an exit.
const reapEvery = time.Second

// reaper reaps every child with one loop, never a thread per child (os/exec's
// Wait parks an OS thread per child, and threads count against pids.max).
func (s *state) reaper() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, unix.SIGCHLD)
	tick := time.NewTicker(reapEvery)
	for {
		s.reap()
		select {
		case <-sig:
		case <-tick.C:
		}
	}
}

// reap collects every child that has ended.
func (s *state) reap() {
	s.forkMu.Lock()
	defer s.forkMu.Unlock()
	for {
		var ws unix.WaitStatus
		var ru unix.Rusage
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, &ru)
		if err == unix.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		s.ended(pid, syscall.WaitStatus(ws), usageOf(&ru))
	}
}

// usageOf converts wait4's rusage (Linux reports ru_maxrss in KiB).
func usageOf(ru *unix.Rusage) wire.Usage {
	return wire.Usage{
		UserNanos:   ru.Utime.Nano(),
		SystemNanos: ru.Stime.Nano(),
		MaxRSS:      int64(ru.Maxrss) * 1024,
		ReadBytes:   int64(ru.Inblock) * 512,
		WriteBytes:  int64(ru.Oublock) * 512,
	}
}

// ended records a child's end and what it used (its wall time is the
// warden's to add). The caller holds s.forkMu for writing.
func (s *state) ended(pid int, ws syscall.WaitStatus, use wire.Usage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.byPID[pid]
	if p == nil {
		return
	}
	delete(s.byPID, pid)
	p.reaped = true
	p.reapOOM = s.sys.oomKills()
	use.WallNanos = time.Since(p.spawned).Nanoseconds()
	p.usage = use
	if ws.Signaled() {
		p.code, p.sig = -1, int(ws.Signal())
	} else {
		p.code = ws.ExitStatus()
	}
	if p.forgetOnReap {
		s.forget(p)
	} else {
		s.maybeEnded(p)
		s.kick(p)
	}
}

// oomFiles are where the sandbox memory cgroup's OOM kill count is read:
// cgroup v1's memory.oom_control, else v2's memory.events.
var oomFiles = []string{"/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events"}

// oomFD is the open oomFiles entry, -1 until one opened: each spawn, reap
// and exit reads the count, and a pread of the open file costs ~1 µs
// where an open, read and close of it cost ~40–80 µs (fuse-overlayfs
// container, issue 21).
var oomFD = struct {
	sync.Mutex
	fd int
}{fd: -1}

// oomKills is the sandbox memory cgroup's OOM kill count, or -1 when
// unreadable.
func oomKills() int64 {
	oomFD.Lock()
	defer oomFD.Unlock()
	for attempt := 0; attempt < 2; attempt++ {
		if oomFD.fd < 0 {
			for _, name := range oomFiles {
				if fd, err := unix.Open(name, unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
					oomFD.fd = fd
					break
				}
			}
			if oomFD.fd < 0 {
				return -1
			}
		}
		var buf [512]byte
		n, err := unix.Pread(oomFD.fd, buf[:], 0)
		if err == nil {
			for _, line := range strings.Split(string(buf[:max(n, 0)]), "\n") {
				if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
					if k, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
						return k
					}
				}
			}
			return -1
		}
		// A file that stopped reading (its cgroup moved?) is opened
		// again, once.
		_ = unix.Close(oomFD.fd) // read-only: nothing to lose
		oomFD.fd = -1
	}
	return -1
}
