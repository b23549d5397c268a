package main

import (
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
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
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		s.mu.Lock()
		if p := s.byPID[pid]; p != nil {
			delete(s.byPID, pid)
			p.reaped = true
			p.reapOOM = oomKills()
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
		s.mu.Unlock()
	}
}

// oomKills is the sandbox memory cgroup's OOM kill count (cgroup v1's
// memory.oom_control, else v2's memory.events), or -1 when unreadable.
func oomKills() int64 {
	for _, name := range []string{"/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events"} {
		b, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
				if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
					return n
				}
			}
		}
	}
	return -1
}
