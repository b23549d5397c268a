package warden

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stockade/stockade/warden/wire"
)

// A notified syscall names its paths as the task wrote them: relative to a
// directory fd or the task's cwd, through symlinks, through /proc magic
// links. The kernel resolves them after the warden lets the call go on, so
// the warden resolves them the same way first, with the kernel's help: the
// base (the task's cwd or dirfd) is what /proc says it is, the directories
// on the way are opened (symlinks followed, magic links refused) and named
// by the fd's own link, and a final symlink is followed where the call
// follows it. A path is then recorded where the change lands, not where
// its text points: a write through /tmp/link into the workspace, or
// through /proc/self/cwd, is the workspace's change.

// resolver decodes and resolves one tracker's notifications. It is used by
// its serving thread only: its caches need no lock.
type resolver struct {
	t *tracker
	// mem holds an open /proc/TID/mem per task (an open per read cost two
	// system calls more per notification, ~1.6 µs).
	mem map[int]memView
	// dirs caches resolved directories by the text that named them, each
	// checked again by a stat (one system call, against the open, readlink,
	// fstat and close of a resolution) before it is used.
	dirs     map[string]resolvedDir
	dirBytes int
	// window is the current notification's (memView).
	window uint64
}

// memView is an open /proc/TID/mem and the 16 MiB window of the
// instruction pointer of the call it was opened for. The file reads the
// memory the task had when it was opened: after an exec the old memory is
// gone (reads fail: the file is opened again), except where a vfork
// parent still shares it. Execs are not notified (a notified execve waits
// for a P that vforking spawns hold), so a call from another window (a
// new program, mapped elsewhere: address space randomization) opens the
// file again; a process that turns the randomization off and execs from a
// vfork child can make the warden read its parent's memory for its own
// paths — the class of a process misreporting its own changes.
type memView struct {
	fd     int
	window uint64
}

type resolvedDir struct {
	canon    string
	dev, ino uint64
}

const (
	// maxMemFds and maxDirs bound the caches (past them they start over).
	maxMemFds   = 64
	maxDirs     = 256
	maxDirBytes = 1 << 20
	// maxHops bounds the final symlinks followed (the kernel's is 40).
	maxHops = 8
)

func newResolver(t *tracker) *resolver {
	return &resolver{t: t, mem: make(map[int]memView), dirs: make(map[string]resolvedDir)}
}

func (r *resolver) close() {
	for _, v := range r.mem {
		_ = unix.Close(v.fd) // read-only
	}
	clear(r.mem)
}

// cool drops what the caches hold while the tracker waits cold: a
// process that sleeps holds no fds and no memory for its paths.
func (r *resolver) cool() {
	r.close()
	clear(r.dirs)
	r.dirBytes = 0
}

// forget drops the open view of task tid's memory.
func (r *resolver) forget(tid int) {
	if v, ok := r.mem[tid]; ok {
		_ = unix.Close(v.fd) // read-only
		delete(r.mem, tid)
	}
}

// pathArg is one path a notified syscall names: the path at ptr (0: the
// fd dirfd itself) relative to dirfd, what the call can do to it, and
// whether it follows a final symlink.
type pathArg struct {
	dirfd     int32
	ptr       uint64
	ops       opMask
	follow    bool
	emptyIsFd bool   // AT_EMPTY_PATH: "" names dirfd itself
	text      string // the path itself, when it is not in the task's memory (a bind's)
}

// openOps is what an open with flags can do to its path, and whether it
// follows a final symlink; 0 for a read-only open, an O_PATH or an
// O_TMPFILE (a nameless file: its name comes from a later linkat, which is
// notified).
func openOps(flags uint64) (opMask, bool) {
	if flags&unix.O_TMPFILE == unix.O_TMPFILE || flags&unix.O_PATH != 0 {
		// O_PATH: the kernel ignores the other flags.
		return 0, false
	}
	var ops opMask
	if flags&(unix.O_WRONLY|unix.O_RDWR|unix.O_TRUNC) != 0 {
		ops |= opWrite
	}
	if flags&unix.O_CREAT != 0 {
		ops |= opCreate
		if flags&unix.O_EXCL != 0 {
			// A new file or nothing: no final symlink is followed.
			return opCreate, false
		}
	}
	return ops, flags&unix.O_NOFOLLOW == 0
}

// handle records what notification n touches; lfd is the listener.
func (r *resolver) handle(lfd int, n *seccompNotif) {
	t := r.t
	if t.isReported() {
		// The report is made: what the process's descendants do now is
		// not heard (the report said so if they still ran).
		return
	}
	if n.arch != nativeArch {
		t.markIncomplete("a syscall of another architecture (32-bit compat), not decoded")
		return
	}
	tid := int(n.pid)
	if v, ok := r.mem[tid]; ok && v.window != n.ip>>24 {
		r.forget(tid)
	}
	r.window = n.ip >> 24
	c, tracks := r.decode(n)
	if !tracks {
		return
	}
	var found [3]resolved
	mine, ok := 0, true
	for i := range c.k {
		p, st, good := r.pathOf(tid, c.args[i])
		ok = ok && good
		found[i] = resolved{path: p, st: st, ops: c.args[i].ops}
		if good && p != "" && tracked(p) {
			mine++
		}
	}
	if mine == 0 && ok {
		// Nothing of the workspace (most writes of a build go to /tmp,
		// pipes, /dev/null): one ioctl fewer.
		return
	}
	// The paths were read from the task's memory: they are its syscall's
	// only while the task still waits in it (not killed, its pid not
	// reused).
	id := n.id
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(lfd), unix.SECCOMP_IOCTL_NOTIF_ID_VALID, uintptr(unsafe.Pointer(&id))); e != 0 { //nolint:gosec // G103: the kernel ABI of seccomp(2) and its ioctls takes pointers
		return
	}
	if !ok {
		t.markIncomplete("a path the warden could not read or resolve as the kernel will")
	}
	for i := range c.k {
		if f := found[i]; f.path != "" && tracked(f.path) {
			t.record(f.path, f.ops, f.st)
		}
	}
	if c.swapped {
		for i := range c.k {
			if f := found[i]; f.path != "" && tracked(f.path) && lstatState(f.path).kind == wire.KindDir {
				t.markIncomplete("two directories exchanged: what was touched in them is not followed")
			}
		}
	}
	if c.rename && c.k == 2 && tracked(found[0].path) && tracked(found[1].path) {
		t.recordRename(found[0].path, found[1].path)
	}
}

// call is what a notified syscall can do to its paths (up to three), and
// whether it renames one to another or exchanges them.
type call struct {
	args            [3]pathArg
	k               int
	rename, swapped bool
}

// decode is what notification n's call can do to which paths; false when
// there is nothing to track (a read-only open, a bind of no file, a number
// the filter does not send).
func (r *resolver) decode(n *seccompNotif) (call, bool) {
	nr := int(n.nr)
	if runtime.GOARCH == "amd64" {
		nr &^= x32Bit
	}
	tid := int(n.pid)
	a := n.args
	fd := func(i int) int32 { return int32(a[i]) } //nolint:gosec // G115: a dirfd is the low 32 bits of its register, as the kernel reads it
	const cwd = int32(unix.AT_FDCWD)
	var c call
	add := func(p pathArg) {
		if p.ops != 0 {
			c.args[c.k] = p
			c.k++
		}
	}
	switch nr {
	case unix.SYS_IO_URING_SETUP:
		r.t.markIncomplete("io_uring: writes through it are not seen")
		return c, false
	case sysOpen:
		ops, follow := openOps(a[1])
		add(pathArg{dirfd: cwd, ptr: a[0], ops: ops, follow: follow})
	case unix.SYS_OPENAT:
		ops, follow := openOps(a[2])
		add(pathArg{dirfd: fd(0), ptr: a[1], ops: ops, follow: follow})
	case sysOpenat2:
		var how [24]byte // struct open_how: flags, mode, resolve
		if a[3] < uint64(len(how)) {
			return c, false // EINVAL
		}
		if k, err := r.readMem(tid, a[2], how[:]); err != nil || k != len(how) {
			r.t.markIncomplete("an openat2 the warden could not read")
			return c, false
		}
		if binary.NativeEndian.Uint64(how[16:])&(unix.RESOLVE_IN_ROOT|unix.RESOLVE_BENEATH) != 0 && binary.NativeEndian.Uint64(how[:8])&openWriteFlags != 0 {
			// Resolved against dirfd as a root: the warden does not.
			r.t.markIncomplete("an openat2 resolved in its own root, not followed")
		}
		ops, follow := openOps(binary.NativeEndian.Uint64(how[:8]))
		add(pathArg{dirfd: fd(0), ptr: a[1], ops: ops, follow: follow})
	case sysCreat:
		add(pathArg{dirfd: cwd, ptr: a[0], ops: opCreate | opWrite, follow: true})
	case unix.SYS_TRUNCATE:
		add(pathArg{dirfd: cwd, ptr: a[0], ops: opWrite, follow: true})
	case unix.SYS_FTRUNCATE:
		add(pathArg{dirfd: fd(0), ops: opWrite})
	case unix.SYS_FCHMOD:
		add(pathArg{dirfd: fd(0), ops: opMode})
	case sysChmod:
		add(pathArg{dirfd: cwd, ptr: a[0], ops: opMode, follow: true})
	case unix.SYS_FCHMODAT:
		add(pathArg{dirfd: fd(0), ptr: a[1], ops: opMode, follow: true})
	case sysFchmodat2:
		add(pathArg{dirfd: fd(0), ptr: a[1], ops: opMode, follow: a[3]&unix.AT_SYMLINK_NOFOLLOW == 0, emptyIsFd: a[3]&unix.AT_EMPTY_PATH != 0})
	case sysUnlink, sysRmdir:
		add(pathArg{dirfd: cwd, ptr: a[0], ops: opDelete})
	case unix.SYS_UNLINKAT:
		add(pathArg{dirfd: fd(0), ptr: a[1], ops: opDelete})
	case sysMkdir, sysMknod:
		add(pathArg{dirfd: cwd, ptr: a[0], ops: opCreate})
	case unix.SYS_MKDIRAT, unix.SYS_MKNODAT:
		add(pathArg{dirfd: fd(0), ptr: a[1], ops: opCreate})
	case sysRename:
		add(pathArg{dirfd: cwd, ptr: a[0], ops: opDelete})
		add(pathArg{dirfd: cwd, ptr: a[1], ops: opCreate | opDelete})
		c.rename = true
	case sysRenameat:
		add(pathArg{dirfd: fd(0), ptr: a[1], ops: opDelete})
		add(pathArg{dirfd: fd(2), ptr: a[3], ops: opCreate | opDelete})
		c.rename = true
	case unix.SYS_RENAMEAT2:
		switch {
		case a[4]&unix.RENAME_EXCHANGE != 0:
			// Both paths stay, each now the other's: each is compared
			// with its state before (replaced), not a rename; what was
			// touched inside two exchanged directories is not followed.
			add(pathArg{dirfd: fd(0), ptr: a[1], ops: opCreate | opDelete})
			add(pathArg{dirfd: fd(2), ptr: a[3], ops: opCreate | opDelete})
			c.swapped = true
		case a[4]&unix.RENAME_NOREPLACE != 0:
			add(pathArg{dirfd: fd(0), ptr: a[1], ops: opDelete})
			add(pathArg{dirfd: fd(2), ptr: a[3], ops: opCreate})
			c.rename = true
		default:
			add(pathArg{dirfd: fd(0), ptr: a[1], ops: opDelete})
			add(pathArg{dirfd: fd(2), ptr: a[3], ops: opCreate | opDelete})
			c.rename = true
		}
	case sysLink:
		// The old name too: a write through the new name is a write
		// of the old one's content.
		add(pathArg{dirfd: cwd, ptr: a[0], ops: opWrite | opMode})
		add(pathArg{dirfd: cwd, ptr: a[1], ops: opCreate})
	case unix.SYS_LINKAT:
		add(pathArg{dirfd: fd(0), ptr: a[1], ops: opWrite | opMode, follow: a[4]&unix.AT_SYMLINK_FOLLOW != 0, emptyIsFd: a[4]&unix.AT_EMPTY_PATH != 0})
		add(pathArg{dirfd: fd(2), ptr: a[3], ops: opCreate})
	case sysSymlink:
		add(pathArg{dirfd: cwd, ptr: a[1], ops: opCreate})
	case sysChown:
		add(pathArg{dirfd: cwd, ptr: a[0], ops: opMode, follow: true})
	case sysLchown:
		add(pathArg{dirfd: cwd, ptr: a[0], ops: opMode})
	case unix.SYS_FCHOWN, unix.SYS_FSETXATTR, unix.SYS_FREMOVEXATTR:
		add(pathArg{dirfd: fd(0), ops: opMode})
	case unix.SYS_FCHOWNAT:
		add(pathArg{dirfd: fd(0), ptr: a[1], ops: opMode, follow: a[4]&unix.AT_SYMLINK_NOFOLLOW == 0, emptyIsFd: a[4]&unix.AT_EMPTY_PATH != 0})
	case unix.SYS_SETXATTR, unix.SYS_REMOVEXATTR:
		add(pathArg{dirfd: cwd, ptr: a[0], ops: opMode, follow: true})
	case unix.SYS_LSETXATTR, unix.SYS_LREMOVEXATTR:
		add(pathArg{dirfd: cwd, ptr: a[0], ops: opMode})
	case unix.SYS_SETXATTRAT, unix.SYS_REMOVEXATTRAT:
		add(pathArg{dirfd: fd(0), ptr: a[1], ops: opMode, follow: a[2]&unix.AT_SYMLINK_NOFOLLOW == 0, emptyIsFd: a[2]&unix.AT_EMPTY_PATH != 0})
	case unix.SYS_BIND:
		// A unix socket's path (not an abstract one) is a new file.
		if p, ok := r.socketPath(tid, a[1], a[2]); ok {
			add(pathArg{dirfd: cwd, text: p, ops: opCreate})
		}
	case unix.SYS_SYMLINKAT:
		add(pathArg{dirfd: fd(1), ptr: a[2], ops: opCreate})
	default:
		return c, false
	}
	return c, true
}

// socketPath is the sun_path of a bind's sockaddr at addr (length n) when
// it names a unix socket by path, as the kernel takes it (at most n-2
// bytes, to the first NUL); false otherwise (another family, an abstract
// or unnamed socket: no file).
func (r *resolver) socketPath(tid int, addr, n uint64) (string, bool) {
	var sa [2 + 108]byte // struct sockaddr_un
	n = min(n, uint64(len(sa)))
	if n < 3 || addr == 0 {
		return "", false
	}
	if k, err := r.readMem(tid, addr, sa[:n]); err != nil || uint64(k) != n {
		r.t.markIncomplete("a bind the warden could not read")
		return "", false
	}
	if binary.NativeEndian.Uint16(sa[:2]) != unix.AF_UNIX || sa[2] == 0 {
		return "", false
	}
	p := sa[2:n]
	if i := bytes.IndexByte(p, 0); i >= 0 {
		p = p[:i]
	}
	return string(p), true
}

// resolved is a path as the kernel will find it, and its lstat when the
// resolution made one.
type resolved struct {
	path string
	st   *fileState
	ops  opMask
}

// pathOf is the absolute path the kernel will find for task tid's path
// argument pa, and its lstat if one was made on the way; "" with true when
// there is nothing to track (a pipe, a bad fd, a directory that does not
// resolve: the call fails too); false when the warden could not tell.
func (r *resolver) pathOf(tid int, pa pathArg) (string, *fileState, bool) {
	rel := pa.text
	if pa.ptr == 0 && rel == "" {
		return r.base(tid, pa.dirfd)
	}
	if pa.ptr != 0 {
		var err error
		if rel, err = r.readString(tid, pa.ptr); err != nil {
			return "", nil, false
		}
	}
	if rel == "" {
		if pa.emptyIsFd {
			return r.base(tid, pa.dirfd)
		}
		return "", nil, true // ENOENT
	}
	var text, base string
	if rel[0] == '/' {
		text = rel
	} else {
		b, _, ok := r.base(tid, pa.dirfd)
		if b == "" {
			return "", nil, ok
		}
		text = b + "/" + rel
		if strings.IndexByte(rel, '/') < 0 && rel != "." && rel != ".." {
			base = b // exact: what /proc says of the cwd or dirfd
		}
	}
	for range maxHops {
		dir, name := splitLast(text)
		canon := base
		if canon == "" {
			var good bool
			if canon, good = r.dir(tid, dir); !good || canon == "" {
				return "", nil, good
			}
		}
		if name == "" {
			if pa.ops&opDelete != 0 {
				return "", nil, true // an unlink or rmdir of "." or "..": EINVAL, EISDIR
			}
			return canon, nil, true
		}
		p := joinPath(canon, name)
		if !pa.follow {
			return p, nil, true
		}
		st, serr := lstatChecked(p)
		if serr != nil {
			return "", nil, false
		}
		if st.kind != wire.KindSymlink {
			return p, &st, true
		}
		target, err := readlink(p)
		if err != nil || target == "" {
			return p, &st, true
		}
		if target[0] == '/' {
			text = target
		} else {
			text = canon + "/" + target
		}
		base = ""
	}
	return "", nil, false // more symlinks than the warden follows
}

// splitLast splits an absolute path text at its last component; name is
// "" when the text names a directory itself ("/", a trailing "." or "..").
func splitLast(text string) (dir, name string) {
	for len(text) > 1 && text[len(text)-1] == '/' {
		text = text[:len(text)-1]
	}
	i := strings.LastIndexByte(text, '/')
	dir, name = text[:i], text[i+1:]
	if dir == "" {
		dir = "/"
	}
	if name == "." || name == ".." || name == "" {
		return text, ""
	}
	return dir, name
}

func joinPath(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}

// base is the path /proc gives task tid's dirfd (AT_FDCWD: its cwd): the
// kernel's own name of the directory (or file). "" with true when it is no
// path of the file system (a pipe, a socket, an anonymous inode, a deleted
// directory, a bad fd: a call through it fails or lands nowhere tracked);
// false when the warden cannot read it (a task that made itself not
// dumpable, a path longer than PATH_MAX).
func (r *resolver) base(tid int, dirfd int32) (string, *fileState, bool) {
	link := strconv.Itoa(tid) + "/cwd"
	if dirfd != unix.AT_FDCWD {
		link = strconv.Itoa(tid) + "/fd/" + strconv.Itoa(int(dirfd))
	}
	pfd, rel := procAt(link)
	p, err := readlinkAt(pfd, rel)
	switch {
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EBADF) || errors.Is(err, unix.ESRCH):
		return "", nil, true
	case err != nil:
		return "", nil, false
	case p == "" || p[0] != '/':
		return "", nil, true
	case strings.HasSuffix(p, " (deleted)"):
		// Deleted, or named so: the inode says which. A name that was
		// unlinked while another remains (nlink > 0) names nothing the
		// warden can find.
		var st, named unix.Stat_t
		if unix.Fstatat(pfd, rel, &st, 0) != nil {
			return "", nil, false
		}
		if st.Nlink == 0 {
			return "", nil, true
		}
		if lstatAt(p, &named) != nil || named.Dev != st.Dev || named.Ino != st.Ino {
			return "", nil, false
		}
	}
	return p, nil, true
}

// openat2Refused: openat2 was refused once (a seccomp profile older than
// it); directories are then walked a component at a time.
var openat2Refused atomic.Bool

// dir is the canonical path of the directory the text names for task tid,
// "" with true when it does not resolve (the call fails too), false when
// the warden could not tell. A text with no symlink on its way is opened
// once (symlinks and magic links refused) and named by the fd's own link;
// one with symlinks is walked a component at a time, so that /proc/self
// and the magic links under /proc are followed as the task's, wherever in
// the path or in a symlink's target they come.
func (r *resolver) dir(tid int, text string) (string, bool) {
	if d, ok := r.dirs[text]; ok {
		// Checked as it was resolved: opened again with no symlink and no
		// magic link on the way (a stat would follow them, as the warden:
		// /proc/self/fd/N is the warden's fd N), the same directory.
		if r.sameDir(text, d) {
			return d.canon, true
		}
		delete(r.dirs, text)
	}
	if openat2Refused.Load() || strings.HasPrefix(text, "/proc") || strings.Contains(text, "//") {
		return r.walk(tid, text)
	}
	dirfd, rel := at(text)
	fd, err := unix.Openat2(dirfd, rel, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
	switch {
	case errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM):
		openat2Refused.Store(true)
		return r.walk(tid, text)
	case errors.Is(err, unix.ELOOP):
		return r.walk(tid, text) // a symlink on the way
	case err != nil:
		return "", notResolved(err)
	}
	defer func() { _ = unix.Close(fd) }() // O_PATH
	pfd, prel := procAt("self/fd/" + strconv.Itoa(fd))
	canon, err := readlinkAt(pfd, prel)
	var st unix.Stat_t
	if err != nil || unix.Fstat(fd, &st) != nil {
		return "", false
	}
	if canon == "" || canon[0] != '/' || st.Nlink == 0 {
		return "", true // deleted meanwhile
	}
	if strings.HasPrefix(canon, "/proc") {
		// ".." into /proc: resolved as the task's, component by component.
		return r.walk(tid, text)
	}
	r.remember(text, resolvedDir{canon: canon, dev: st.Dev, ino: st.Ino})
	return canon, true
}

// sameDir says whether text still names d's directory with no symlink on
// its way.
func (r *resolver) sameDir(text string, d resolvedDir) bool {
	dirfd, rel := at(text)
	fd, err := unix.Openat2(dirfd, rel, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return false
	}
	var st unix.Stat_t
	ok := unix.Fstat(fd, &st) == nil && st.Dev == d.dev && st.Ino == d.ino && st.Nlink > 0
	_ = unix.Close(fd) // O_PATH
	return ok
}

// notResolved says whether a lookup's error means the call fails the same
// way (true: nothing to track) or the warden could not tell (false).
func notResolved(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EACCES)
}

// remember caches a resolved directory, within maxDirBytes.
func (r *resolver) remember(text string, d resolvedDir) {
	cost := len(text) + len(d.canon) + 64
	if len(r.dirs) >= maxDirs || r.dirBytes+cost > maxDirBytes {
		clear(r.dirs)
		r.dirBytes = 0
	}
	r.dirs[text] = d
	r.dirBytes += cost
}

// walk resolves the directory text names for task tid a component at a
// time, as the kernel does for the task: each symlink's target read and
// walked in turn (from "/" when absolute), "/proc/self" and
// "/proc/thread-self" as the task's, the magic links /proc/PID/{cwd,root}
// and /proc/PID/fd/N (and under task/TID) by what they name; any other
// /proc path is refused (false). The result is canonical: no symlink, no
// "." or "..".
func (r *resolver) walk(tid int, text string) (string, bool) {
	cur := "/"
	comps := strings.Split(text, "/")
	for hops := 0; len(comps) > 0; {
		c := comps[0]
		comps = comps[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = parentOf(cur)
			continue
		}
		next := joinPath(cur, c)
		if next == "/proc" {
			cur = next
			continue
		}
		if strings.HasPrefix(next, "/proc/") {
			target, ok, err := r.procStep(tid, next, &comps)
			switch {
			case err != nil:
				return "", notResolved(err)
			case !ok:
				return "", false
			case target == "":
				cur = next // a directory of /proc on the way to a magic link
				continue
			}
			if hops++; hops > 40 {
				return "", false
			}
			cur, comps = "/", append(strings.Split(target, "/"), comps...)
			continue
		}
		var st unix.Stat_t
		if err := lstatAt(next, &st); err != nil {
			return "", notResolved(err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			cur = next
		case unix.S_IFLNK:
			target, err := readlink(next)
			if err != nil || target == "" {
				return "", err == nil || notResolved(err)
			}
			if hops++; hops > 40 {
				return "", true // ELOOP: the call fails too
			}
			if target[0] == '/' {
				cur = "/"
			}
			comps = append(strings.Split(target, "/"), comps...)
		default:
			return "", true // ENOTDIR
		}
	}
	return cur, true
}

// procStep takes one step of a walk into /proc: next is /proc/X[/...]
// and comps what follows. It returns the target to walk instead (a magic
// link's, or the task's own /proc/PID for self), "" with ok to go on
// into a /proc directory that leads to one (PID, PID/task, PID/task/TID,
// PID/fd), and !ok for anything else under /proc.
func (r *resolver) procStep(tid int, next string, comps *[]string) (string, bool, error) {
	rest := next[len("/proc/"):]
	parts := strings.Split(rest, "/")
	switch {
	case len(parts) == 1 && (parts[0] == "self" || parts[0] == "thread-self"):
		tgid, err := r.tgid(tid)
		if err != nil {
			return "", false, nil
		}
		if parts[0] == "self" {
			return "/proc/" + strconv.Itoa(tgid), true, nil
		}
		return "/proc/" + strconv.Itoa(tgid) + "/task/" + strconv.Itoa(tid), true, nil
	case len(parts) == 1 && allDigits(parts[0]):
		return "", true, nil
	}
	if !allDigits(parts[0]) {
		return "", false, nil
	}
	if pid, _ := strconv.Atoi(parts[0]); pid == os.Getpid() || r.isWarden(pid) {
		// The warden is not dumpable: the task is refused its links.
		return "", false, unix.EACCES
	}
	tail := parts[1:]
	if len(tail) >= 2 && tail[0] == "task" && allDigits(tail[1]) {
		if len(tail) == 2 {
			return "", true, nil
		}
		tail = tail[2:]
	} else if tail[0] == "task" && len(tail) == 1 {
		return "", true, nil
	}
	switch {
	case len(tail) == 1 && (tail[0] == "cwd" || tail[0] == "root"):
	case len(tail) == 1 && tail[0] == "fd":
		return "", true, nil
	case len(tail) == 2 && tail[0] == "fd" && allDigits(tail[1]):
	default:
		return "", false, nil
	}
	pfd, rel := procAt(rest)
	target, err := readlinkAt(pfd, rel)
	if err != nil {
		return "", false, err
	}
	if target == "" || target[0] != '/' {
		return "", false, unix.ENOTDIR // a pipe, a socket: no directory
	}
	if strings.HasSuffix(target, " (deleted)") {
		var st unix.Stat_t
		if unix.Fstatat(pfd, rel, &st, 0) != nil || st.Nlink == 0 {
			return "", false, unix.ENOENT
		}
	}
	return target, true, nil
}

// isWarden says whether task id is one of the warden's threads.
func (r *resolver) isWarden(id int) bool {
	g, err := r.tgid(id)
	return err == nil && g == os.Getpid()
}

// tgid is the thread group (the process) of task tid: what /proc/self
// names for it.
func (r *resolver) tgid(tid int) (int, error) {
	pfd, rel := procAt(strconv.Itoa(tid) + "/status")
	fd, err := unix.Openat(pfd, rel, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer func() { _ = unix.Close(fd) }() // read-only
	var buf [1024]byte
	n, err := unix.Read(fd, buf[:])
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(buf[:n]), "\n") {
		if v, ok := strings.CutPrefix(line, "Tgid:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, unix.ESRCH
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// readString reads a NUL-terminated string of at most PATH_MAX bytes at
// addr in task tid's memory, a page at a time (a string near the end of a
// mapping must not fault the whole read).
func (r *resolver) readString(tid int, addr uint64) (string, error) {
	const pathMax = 4096
	var chunk [pathMax]byte
	var buf []byte
	for len(buf) < pathMax {
		n := min(pathMax-(addr%pathMax), uint64(pathMax-len(buf)))
		k, err := r.readMem(tid, addr, chunk[:n])
		if err != nil || k == 0 {
			if err == nil {
				err = unix.EFAULT
			}
			return "", err
		}
		for i := range k {
			if chunk[i] == 0 {
				if buf == nil {
					return string(chunk[:i]), nil
				}
				return string(append(buf, chunk[:i]...)), nil
			}
		}
		buf = append(buf, chunk[:k]...)
		addr += uint64(k)
	}
	return "", unix.ENAMETOOLONG
}

// vmReadvRefused: process_vm_readv was refused once (Docker's default
// seccomp profile allows it only with CAP_SYS_PTRACE): it is not tried
// again, each read goes to /proc/TID/mem.
var vmReadvRefused atomic.Bool

// readMem reads task tid's memory: process_vm_readv (one syscall) where
// allowed, else the task's cached /proc/TID/mem (opened again once when a
// read through it fails: the task may be another by now).
func (r *resolver) readMem(tid int, addr uint64, b []byte) (int, error) {
	if !vmReadvRefused.Load() {
		local := []unix.Iovec{{Base: &b[0]}}
		local[0].SetLen(len(b))
		remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(b)}}
		n, err := unix.ProcessVMReadv(tid, local, remote, 0)
		if err == nil {
			return n, nil
		}
		if err != unix.ENOSYS && err != unix.EPERM {
			return 0, err
		}
		vmReadvRefused.Store(true)
	}
	for {
		v, ok := r.mem[tid]
		if !ok {
			pfd, rel := procAt(strconv.Itoa(tid) + "/mem")
			fd, err := unix.Openat(pfd, rel, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return 0, err
			}
			if len(r.mem) >= maxMemFds {
				r.close()
			}
			v = memView{fd: fd, window: r.window}
			r.mem[tid] = v
		}
		n, err := unix.Pread(v.fd, b, int64(addr)) //nolint:gosec // G115: a user address fits an int64 offset of /proc/TID/mem
		if (err == nil && n > 0) || !ok {
			return n, err
		}
		r.forget(tid) // a cached view that no longer reads: open it again
	}
}
