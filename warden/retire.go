package warden

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// retire kills a warden the runtime gave up on, in a short exec of this
// binary as the sandbox's user (it can signal nothing else).

// procInfo is what retire reads of one process.
type procInfo struct {
	pid, ppid int
	state     byte
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

// retireWait bounds how long retire waits for the warden to die.
const retireWait = 5 * time.Second

// retire kills the warden server pid (the runtime gave it up: it could not
// be reattached, or stopped answering), or every one ("all"), and removes
// its reattach socket. A
// pid that is not a warden server of this binary now (it died, and the pid
// went to another process) is left alone. Exit 0 once no such warden
// runs; 1 when it would not die; 2 on bad arguments.
func retire(pidArg, socket string) int {
	if pidArg == "all" && socket == "" {
		return retireAll()
	}
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

// retireAll retires every warden server but itself: before a sandbox the
// runtime recovered starts a new warden, one it never journaled (a crash
// between its start and the journal's word) or gave up goes. Each one's
// reattach socket goes with it.
func retireAll() int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		fmt.Fprintf(os.Stderr, "stockade-warden retire: reading /proc: %v\n", err)
		return 1
	}
	code := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 1 || pid == os.Getpid() {
			continue
		}
		if p, ok := readProc(pid); ok && isWardenServer(p.argv) && p.state != 'Z' {
			if c := retire(e.Name(), filepath.Join(os.TempDir(), ".stockade-warden-"+e.Name()+".sock")); c != 0 {
				code = c
			}
		}
	}
	return code
}
