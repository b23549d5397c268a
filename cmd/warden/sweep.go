package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A process of the sandbox may outlive the runtime's view of it (setsid, a
// double fork): the runtime stops only the processes it tracks. Before a
// rollback's privileged steps, sweep kills every process of the sandbox's
// user but the container's own, and proves none is left; retire kills a
// warden the runtime gave up on. Both run as the sandbox's user (they can
// signal nothing else) in a short exec of this binary.

// keeperArgv is the workload's keeper (dockerio.Keeper, after its
// entrypoint /bin/sh), and keeperSleep what it runs in its loop.
var (
	keeperArgv  = []string{"/bin/sh", "-c", "while :; do sleep 3600; done"}
	keeperSleep = []string{"sleep", "3600"}
)

// procInfo is what a sweep reads of one process.
type procInfo struct {
	pid, ppid int
	state     byte
	start     uint64 // clock ticks after boot
	uids      [4]int // real, effective, saved, filesystem
	argv      []string
}

// readProc reads /proc/<pid>; ok is false when the process is gone.
func readProc(pid int) (p procInfo, ok bool) {
	dir := "/proc/" + strconv.Itoa(pid)
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return p, false
	}
	// pid (comm) state ppid ... : comm may hold spaces and parentheses,
	// so the fields are read after the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return p, false
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 20 {
		return p, false
	}
	p.pid = pid
	p.state = f[0][0]
	p.ppid, _ = strconv.Atoi(f[1])
	p.start, _ = strconv.ParseUint(f[19], 10, 64)
	status, err := os.ReadFile(dir + "/status")
	if err != nil {
		return p, false
	}
	p.uids = [4]int{-1, -1, -1, -1}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, found := strings.CutPrefix(line, "Uid:"); found {
			for j, u := range strings.Fields(rest) {
				if j < 4 {
					p.uids[j], _ = strconv.Atoi(u)
				}
			}
		}
	}
	cmd, _ := os.ReadFile(dir + "/cmdline") // empty for a zombie
	if len(cmd) > 0 {
		p.argv = strings.Split(strings.TrimSuffix(string(cmd), "\x00"), "\x00")
	}
	return p, true
}

// listProcs reads every process the pid namespace shows.
func listProcs() ([]procInfo, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var ps []procInfo
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		if p, ok := readProc(pid); ok {
			ps = append(ps, p)
		}
	}
	return ps, nil
}

// spared returns the container's own processes, which a sweep leaves: pid
// 1, the keeper (pid 1 itself without an init; else pid 1's earliest child
// running the keeper's argv: no later process can start before it) and
// the keeper's sleep. A process of the workload cannot pass for one of
// them: it would need to be started before the keeper, or by it.
func spared(ps []procInfo) map[int]bool {
	keep := map[int]bool{1: true}
	keeper := 0
	var first uint64
	for _, p := range ps {
		switch {
		case p.pid == 1 && slices.Equal(p.argv, keeperArgv):
			keeper, first = 1, 0
		case keeper != 1 && p.ppid == 1 && slices.Equal(p.argv, keeperArgv) && (keeper == 0 || p.start < first):
			keeper, first = p.pid, p.start
		}
	}
	if keeper == 0 {
		return keep
	}
	keep[keeper] = true
	for _, p := range ps {
		if p.ppid == keeper && slices.Equal(p.argv, keeperSleep) {
			keep[p.pid] = true
		}
	}
	return keep
}

// victims are the processes of uid a sweep must end: any of their uids is
// uid, they are not the container's own nor the sweep, and not already
// dead (a zombie runs nothing).
func victims(ps []procInfo, uid, self int) []procInfo {
	keep := spared(ps)
	var out []procInfo
	for _, p := range ps {
		if keep[p.pid] || p.pid == self || p.state == 'Z' || p.state == 'X' {
			continue
		}
		if slices.Contains(p.uids[:], uid) {
			out = append(out, p)
		}
	}
	return out
}

// sweepRounds bounds a sweep; each round stops or kills what it sees.
const sweepRounds = 200

// sweep ends every process of its own uid but the container's own: first
// each is stopped (SIGSTOP cannot be caught; a stopped process forks
// nothing), round after round until a scan sees every one stopped, then
// all are killed, and a last scan must see none. It prints how many it
// ended. Exit 0; 1 when some would not end (they are named).
func sweep() int {
	uid, self := os.Getuid(), os.Getpid()
	ended := map[int]bool{}
	for range sweepRounds {
		ps, err := listProcs()
		if err != nil {
			fmt.Fprintf(os.Stderr, "stockade-warden sweep: reading /procInfo: %v\n", err)
			return 1
		}
		vs := victims(ps, uid, self)
		if len(vs) == 0 {
			fmt.Printf("swept %d\n", len(ended))
			return 0
		}
		running := false
		for _, v := range vs {
			if v.state != 'T' && v.state != 't' {
				running = true
				_ = unix.Kill(v.pid, unix.SIGSTOP) // gone already: the next scan says
			}
		}
		if running {
			continue
		}
		for _, v := range vs {
			ended[v.pid] = true
			_ = unix.Kill(v.pid, unix.SIGKILL) // gone already: the next scan says
		}
		time.Sleep(time.Millisecond) // the kills land; the next scan proves them
	}
	ps, _ := listProcs() // the failure names what is left, if it can
	var left []string
	for _, v := range victims(ps, uid, self) {
		left = append(left, fmt.Sprintf("%d %q", v.pid, strings.Join(v.argv, " ")))
	}
	fmt.Fprintf(os.Stderr, "stockade-warden sweep: processes would not end after %d rounds: %s\n", sweepRounds, strings.Join(left, "; "))
	return 1
}

// retireWait bounds how long retire waits for the warden to die.
const retireWait = 5 * time.Second

// retire kills the warden server pid (the runtime gave it up: it could not
// be reattached, or stopped answering) and removes its reattach socket. A
// pid that is not a warden server of this binary now (it died, and the pid
// went to another process) is left alone. Exit 0 once no such warden
// runs; 1 when it would not die; 2 on bad arguments.
func retire(pidArg, socket string) int {
	pid, err := strconv.Atoi(pidArg)
	if err != nil || pid <= 1 || pid == os.Getpid() {
		fmt.Fprintf(os.Stderr, "stockade-warden retire: pid %q is not a warden's\n", pidArg)
		return 2
	}
	if socket != "" && (!filepath.IsAbs(socket) || filepath.Clean(socket) != socket || filepath.Base(socket) != ".stockade-warden-"+pidArg+".sock") {
		fmt.Fprintf(os.Stderr, "stockade-warden retire: %q is not warden %d's socket\n", socket, pid)
		return 2
	}
	if p, ok := readProc(pid); ok && isWardenServer(p.argv) && p.state != 'Z' {
		_ = unix.Kill(pid, unix.SIGKILL) // gone already: the wait below says
		for end := time.Now().Add(retireWait); ; time.Sleep(5 * time.Millisecond) {
			p, ok := readProc(pid)
			if !ok || p.state == 'Z' || !isWardenServer(p.argv) {
				break
			}
			if time.Now().After(end) {
				fmt.Fprintf(os.Stderr, "stockade-warden retire: warden %d still runs %v after SIGKILL\n", pid, retireWait)
				return 1
			}
		}
	}
	if socket != "" {
		var st unix.Stat_t
		if err := unix.Lstat(socket, &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK {
			if err := unix.Unlink(socket); err != nil && !errors.Is(err, unix.ENOENT) {
				fmt.Fprintf(os.Stderr, "stockade-warden retire: removing %s: %v\n", socket, err)
			}
		}
	}
	return 0
}

// isWardenServer: argv is this binary's, serving (no subcommand, or serve).
func isWardenServer(argv []string) bool {
	return len(argv) > 0 && argv[0] == os.Args[0] && (len(argv) == 1 || argv[1] == "serve")
}
