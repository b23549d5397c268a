package journal

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"syscall"
)

// lockHolders reads /proc/locks, the kernel's table of held locks, for the
// flock holders of path's inode: e.g. ["pid 1234 (write)"].
func lockHolders(path string) []string {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return nil
	}
	dev := uint64(st.Dev)
	major := (dev>>8)&0xfff | (dev>>32)&^0xfff
	minor := dev&0xff | (dev>>12)&^0xff
	want := fmt.Sprintf("%02x:%02x:%d", major, minor, st.Ino)
	f, err := os.Open("/proc/locks")
	if err != nil {
		return nil
	}
	defer func() { _ = f.Close() }() // only read
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 1: FLOCK  ADVISORY  WRITE 1420 fe:00:762126 0 EOF
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 || fs[1] != "FLOCK" || fs[5] != want || fs[4] == "-1" {
			continue
		}
		out = append(out, fmt.Sprintf("pid %s (%s)", fs[4], strings.ToLower(fs[3])))
	}
	return out
}

// LockHeldBy reports whether pid holds the journal file's lock, as
// /proc/locks shows it; known is false when /proc/locks cannot say. A pid
// file (a server's marker) that names a live pid not holding the lock is
// stale: the pid was reused after its holder was killed.
func LockHeldBy(path string, pid int) (held, known bool) {
	if _, err := os.Stat("/proc/locks"); err != nil {
		return false, false
	}
	want := fmt.Sprintf("pid %d (", pid)
	for _, h := range lockHolders(path) {
		if strings.HasPrefix(h, want) {
			return true, true
		}
	}
	return false, true
}
