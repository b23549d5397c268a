package journal

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/stockade/stockade/spec"
)

// lockedError builds the journal_locked error, naming the holder when it can
// be found.
func lockedError(op, path string, waited time.Duration) error {
	waited = waited.Round(time.Millisecond)
	if holders := lockHolders(path); len(holders) > 0 {
		return spec.Errorf(spec.CodeJournalLocked, op, "journal %s is held by %s (waited %s)", path, strings.Join(holders, ", "), waited)
	}
	if pid := LivePIDFile(path + ".pid"); pid > 0 {
		return spec.Errorf(spec.CodeJournalLocked, op, "journal %s is held by another process, probably pid %d (waited %s)", path, pid, waited)
	}
	return spec.Errorf(spec.CodeJournalLocked, op, "journal %s is held by another process, pid unknown (waited %s)", path, waited)
}

// writePIDFile records this process as the writer, for lockedError on systems
// without /proc/locks. Best effort: the lock itself is the flock.
func writePIDFile(path string) {
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		return
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
	}
}

// removePIDFile removes the pid file if it still names this process.
func removePIDFile(path string) {
	if ReadPIDFile(path) == os.Getpid() {
		_ = os.Remove(path)
	}
}

// LivePIDFile returns the pid in the file if that process is alive, else 0: a
// stale file from a dead process names no one. (The lock's pid file, and the
// server's marker beside the journal.)
func LivePIDFile(path string) int {
	pid := ReadPIDFile(path)
	if pid <= 0 || !alive(pid) {
		return 0
	}
	return pid
}

// ReadPIDFile returns the pid the file holds, alive or not; 0 if none.
func ReadPIDFile(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return pid
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
