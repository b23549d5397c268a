package warden

import (
	"bufio"
	"os"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A lookup that starts at "/" checks the root directory's permission, and
// for a caller that is not its owner (the warden runs as the sandbox's
// user) that means its POSIX ACL: on a fuse-overlayfs root, a request to
// the fuse daemon on the host, ~50 µs, per path. The tracker's lookups of
// the workspace, /proc and /tmp are many per notification, so they start
// at an anchor instead: an fd of a mount point whose path the workload
// cannot change (a mount point cannot be renamed, and no directory above
// it is writable by the warden's user), opened once.

// anchor is an open directory and the path that names it.
type anchor struct {
	path string
	fd   int
}

var (
	// anchors, deepest first; procFd is /proc's (-1: none).
	anchors []anchor
	procFd  = -1
	// workspaceDev is the workspace's device (0: unknown): what the
	// tracker reads must be on it.
	workspaceDev uint64
)

// maxAnchors bounds the mount points opened (a host's can be many).
const maxAnchors = 32

// openAnchors opens /proc and the anchors: the workspace root and the
// mount points (/tmp, /dev, the home...) of this mount namespace. Called
// once, before any spawn.
func openAnchors() {
	if fd, err := unix.Open("/proc", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
		procFd = fd
	}
	seen := map[string]bool{"/": true}
	try := func(p string) {
		if seen[p] || len(anchors) >= maxAnchors || !fixedAbove(p) {
			return
		}
		seen[p] = true
		if fd, err := unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
			anchors = append(anchors, anchor{path: p, fd: fd})
		}
	}
	var st unix.Stat_t
	if unix.Stat(workspaceRoot, &st) == nil {
		workspaceDev = st.Dev
	}
	try(workspaceRoot)
	for _, p := range mountPoints() {
		if p != "/proc" && !strings.HasPrefix(p, "/proc/") && !strings.HasPrefix(p, "/sys") {
			try(p)
		}
	}
	sort.SliceStable(anchors, func(i, j int) bool { return len(anchors[i].path) > len(anchors[j].path) })
}

// fixedAbove says whether no directory strictly above p (absolute, clean)
// can be changed by the warden's user: each is neither writable by it nor
// a symlink, so p names the same directory for as long as it is mounted.
func fixedAbove(p string) bool {
	for d := parentOf(p); d != "/"; d = parentOf(d) {
		var st unix.Stat_t
		if unix.Lstat(d, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || unix.Access(d, unix.W_OK) == nil {
			return false
		}
	}
	return true
}

func parentOf(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}

// mountPoints are the mount points of this mount namespace.
func mountPoints() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer func() { _ = f.Close() }() // read-only
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		if p := unescapeMount(fields[4]); strings.HasPrefix(p, "/") {
			out = append(out, p)
		}
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// at is a directory fd and a path relative to it that name p (absolute)
// without a lookup from "/": the deepest anchor above p ("." for the
// anchor itself), else AT_FDCWD and p.
func at(p string) (int, string) {
	for _, a := range anchors {
		if rest, ok := strings.CutPrefix(p, a.path); ok {
			if rest == "" {
				return a.fd, "."
			}
			if rest[0] == '/' {
				return a.fd, rest[1:]
			}
		}
	}
	return unix.AT_FDCWD, p
}

// procAt is the fd and path of /proc/rel.
func procAt(rel string) (int, string) {
	if procFd < 0 {
		return unix.AT_FDCWD, "/proc/" + rel
	}
	return procFd, rel
}

// readlinkAt reads the symlink rel names relative to dirfd.
func readlinkAt(dirfd int, rel string) (string, error) {
	var buf [unix.PathMax]byte
	n, err := unix.Readlinkat(dirfd, rel, buf[:])
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// readlink reads the symlink at p (absolute), from its anchor.
func readlink(p string) (string, error) {
	fd, rel := at(p)
	return readlinkAt(fd, rel)
}

// lstatAt is lstat(p) from p's anchor.
func lstatAt(p string, st *unix.Stat_t) error {
	fd, rel := at(p)
	return unix.Fstatat(fd, rel, st, unix.AT_SYMLINK_NOFOLLOW)
}

// openAt is open(p, flags) from p's anchor.
func openAt(p string, flags int) (int, error) {
	fd, rel := at(p)
	return unix.Openat(fd, rel, flags|unix.O_CLOEXEC, 0)
}
