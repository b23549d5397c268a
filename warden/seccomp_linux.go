package warden

import (
	"errors"
	"os"
	"path"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Attribution by seccomp user notification: each tracked process is forked
// from a thread that installed a filter with a listener of its own, so the
// process and every descendant carry it (a filter is inherited across fork
// and exec and cannot be removed). The filter sends the mutating path
// syscalls to the warden, which records the path (and its state before) and
// always lets the syscall continue unchanged. Overlapping processes each
// have their own listener: a change is attributed by who made it, not by
// when.

// seccompData offsets (struct seccomp_data: nr, arch, ip, args[6]).
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

// x32Bit marks an x32 syscall number on x86_64.
const x32Bit = 0x40000000

// openWriteFlags are the open flags that make an open a possible change.
const openWriteFlags = unix.O_WRONLY | unix.O_RDWR | unix.O_CREAT | unix.O_TRUNC

// bpf assembles a classic BPF program with forward jumps to labels.
type bpf struct {
	code   []unix.SockFilter
	fixups []fixup
	labels map[string]int
}

type fixup struct {
	at     int
	jt, jf string
}

func (b *bpf) stmt(code uint16, k uint32) {
	b.code = append(b.code, unix.SockFilter{Code: code, K: k})
}

// jump adds a conditional jump; "" is the next instruction.
func (b *bpf) jump(code uint16, k uint32, jt, jf string) {
	b.fixups = append(b.fixups, fixup{at: len(b.code), jt: jt, jf: jf})
	b.code = append(b.code, unix.SockFilter{Code: code, K: k})
}

func (b *bpf) label(name string) { b.labels[name] = len(b.code) }

func (b *bpf) resolve() ([]unix.SockFilter, error) {
	for _, f := range b.fixups {
		for _, j := range []struct {
			name string
			dst  *uint8
		}{{f.jt, &b.code[f.at].Jt}, {f.jf, &b.code[f.at].Jf}} {
			if j.name == "" {
				continue
			}
			to, ok := b.labels[j.name]
			if !ok || to <= f.at || to-f.at-1 > 255 {
				return nil, errors.New("bpf: bad jump to " + j.name)
			}
			*j.dst = uint8(to - f.at - 1)
		}
	}
	return b.code, nil
}

// notifiedAlways are the syscalls every call of which is sent to the warden
// (the open family's are checked on their flags first). A number this
// architecture lacks is -1 and left out.
var notifiedAlways = []int{
	sysOpenat2, sysCreat, unix.SYS_TRUNCATE, unix.SYS_FTRUNCATE,
	sysUnlink, unix.SYS_UNLINKAT, sysRename, sysRenameat, unix.SYS_RENAMEAT2,
	sysMkdir, unix.SYS_MKDIRAT, sysRmdir, sysLink, unix.SYS_LINKAT,
	sysSymlink, unix.SYS_SYMLINKAT, sysMknod, unix.SYS_MKNODAT,
	sysChmod, unix.SYS_FCHMODAT, sysFchmodat2, unix.SYS_FCHMOD,
	unix.SYS_IO_URING_SETUP,
}

// filterProgram is the tracking filter for this architecture: a foreign
// architecture's syscalls (32-bit compat) are all notified (the warden
// marks the process Incomplete: it does not decode them).
func filterProgram() ([]unix.SockFilter, error) {
	const (
		ld   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jset = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K
		and  = unix.BPF_ALU | unix.BPF_AND | unix.BPF_K
	)
	b := &bpf{labels: make(map[string]int)}
	b.stmt(ld, offArch)
	b.jump(jeq, nativeArch, "native", "")
	b.stmt(ret, unix.SECCOMP_RET_USER_NOTIF)
	b.label("native")
	b.stmt(ld, offNr)
	if runtime.GOARCH == "amd64" {
		// x32 numbers (bit 30) name the same path syscalls.
		b.stmt(and, ^uint32(x32Bit))
	}
	for _, nr := range notifiedAlways {
		if nr >= 0 {
			b.jump(jeq, uint32(nr), "notify", "")
		}
	}
	open := int64(sysOpen)
	if open >= 0 {
		b.jump(jeq, uint32(open), "open", "")
	}
	b.jump(jeq, unix.SYS_OPENAT, "openat", "")
	b.stmt(ret, unix.SECCOMP_RET_ALLOW)
	if open >= 0 {
		b.label("open")
		b.stmt(ld, offArgs+8*1) // flags, low 32 bits (little-endian)
		b.jump(jset, openWriteFlags, "notify", "")
		b.stmt(ret, unix.SECCOMP_RET_ALLOW)
	}
	b.label("openat")
	b.stmt(ld, offArgs+8*2)
	b.jump(jset, openWriteFlags, "notify", "")
	b.stmt(ret, unix.SECCOMP_RET_ALLOW)
	b.label("notify")
	b.stmt(ret, unix.SECCOMP_RET_USER_NOTIF)
	return b.resolve()
}

var (
	program    []unix.SockFilter
	programErr error
)

func init() { program, programErr = filterProgram() }

// forkTracked forks and execs like syscall.ForkExec, from a thread that
// first installs the tracking filter with a listener, so the child inherits
// it; t's server reads the listener. The thread is never unlocked: its
// goroutine ends locked and Go discards the thread, filter and all, so no
// other goroutine ever runs under the filter. A filter that cannot be
// installed leaves the child untracked (t says why), never unspawned.
func forkTracked(t *tracker, argv0 string, argv []string, attr *syscall.ProcAttr) (int, error) {
	type result struct {
		pid int
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		// Deliberately no UnlockOSThread (see above).
		if fd, why := installFilter(); fd < 0 {
			t.untracked = why
		} else {
			// Served before the fork: nothing this thread does after
			// the install is a notified syscall, but a child's first
			// notified one must find a reader.
			go t.serve(fd)
		}
		pid, err := syscall.ForkExec(argv0, argv, attr)
		done <- result{pid, err}
	}()
	r := <-done
	return r.pid, r.err
}

// installFilter installs the tracking filter on the calling thread and
// returns its listener fd (close-on-exec), or -1 and why not.
func installFilter() (int, string) {
	if programErr != nil {
		return -1, "seccomp filter: " + programErr.Error()
	}
	// Already set in the container (no-new-privileges); a filter needs it
	// without CAP_SYS_ADMIN.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return -1, "no_new_privs: " + err.Error()
	}
	prog := unix.SockFprog{Len: uint16(len(program)), Filter: &program[0]}
	fd, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_NEW_LISTENER, uintptr(unsafe.Pointer(&prog))) //nolint:gosec // G103: the kernel ABI of seccomp(2) and its ioctls takes pointers
	runtime.KeepAlive(program)
	if e != 0 {
		return -1, "seccomp user notification unavailable: " + e.Error()
	}
	// The notifying task waits for the warden's answer: waking the
	// warden on the task's CPU (Linux 6.6+; older kernels refuse, which
	// changes nothing else) saves a cross-CPU wake-up per notification.
	_, _, _ = unix.RawSyscall(unix.SYS_IOCTL, fd, unix.SECCOMP_IOCTL_NOTIF_SET_FLAGS, 1)
	return int(fd), ""
}

// seccompNotif is struct seccomp_notif; seccompResp struct
// seccomp_notif_resp (their sizes are in the ioctl numbers: 80 and 24).
type seccompNotif struct {
	id    uint64
	pid   uint32
	flags uint32
	nr    int32
	arch  uint32
	ip    uint64
	args  [6]uint64
}

type seccompResp struct {
	id    uint64
	val   int64
	error int32
	flags uint32
}

// serve answers t's listener until no task uses the filter any more
// (POLLHUP): every notification is recorded, then continued.
func (t *tracker) serve(fd int) {
	if err := unix.SetNonblock(fd, true); err != nil {
		logf("seccomp listener: %v", err)
	}
	f := os.NewFile(uintptr(fd), "seccomp-listener")
	defer func() { _ = f.Close() }() // nothing written through it
	rc, err := f.SyscallConn()
	if err != nil {
		logf("seccomp listener: %v", err)
		return
	}
	var n seccompNotif
	hup := false
	failed := 0 // polls failed in a row
	for !hup {
		var got, pollErr bool
		err := rc.Read(func(fd uintptr) bool {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			if k, err := unix.Poll(pfd, 0); err != nil || k == 0 {
				pollErr = err != nil && err != unix.EINTR
				return pollErr
			}
			if pfd[0].Revents&unix.POLLIN == 0 {
				hup = pfd[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0
				return hup
			}
			n = seccompNotif{}
			_, _, e := unix.Syscall(unix.SYS_IOCTL, fd, unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&n))) //nolint:gosec // G103: the kernel ABI of seccomp(2) and its ioctls takes pointers
			// ENOENT: the task was killed meanwhile; try again.
			got = e == 0
			return true
		})
		if err != nil {
			logf("seccomp listener: %v", err)
			return
		}
		if pollErr {
			// A poll that keeps failing (ENOMEM) must not spin: back off.
			failed++
			time.Sleep(time.Duration(min(failed, 100)) * time.Millisecond)
			continue
		}
		failed = 0
		if !got {
			continue
		}
		t.handle(fd, &n)
		resp := seccompResp{id: n.id, flags: unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE}
		// ENOENT: the task went away (killed) before the answer.
		_, _, _ = unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&resp))) //nolint:gosec // G103: the kernel ABI of seccomp(2) and its ioctls takes pointers
	}
}

// handle records what notification n touches.
func (t *tracker) handle(lfd int, n *seccompNotif) {
	if n.arch != nativeArch {
		t.markIncomplete("a syscall of another architecture (32-bit compat), not decoded")
		return
	}
	nr := int(n.nr)
	if runtime.GOARCH == "amd64" {
		nr &^= x32Bit
	}
	tid := int(n.pid)
	a := n.args
	var paths []string
	var ok = true
	at := func(dirfd uint64, ptr uint64) {
		p, good := resolveAt(tid, int32(dirfd), ptr)
		ok = ok && good
		if good && p != "" {
			paths = append(paths, p)
		}
	}
	fdPath := func(fd uint64) {
		p, good := resolveAt(tid, int32(fd), 0)
		ok = ok && good
		if good && p != "" {
			paths = append(paths, p)
		}
	}
	fdcwd := int32(unix.AT_FDCWD)
	cwd := uint64(uint32(fdcwd))
	rename := false
	switch nr {
	case unix.SYS_IO_URING_SETUP:
		t.markIncomplete("io_uring: writes through it are not seen")
		return
	case sysOpen, sysCreat, unix.SYS_TRUNCATE, sysUnlink, sysMkdir, sysRmdir, sysMknod, sysChmod:
		at(cwd, a[0])
	case unix.SYS_OPENAT, sysOpenat2, unix.SYS_UNLINKAT, unix.SYS_MKDIRAT, unix.SYS_MKNODAT, unix.SYS_FCHMODAT, sysFchmodat2:
		at(a[0], a[1])
	case unix.SYS_FTRUNCATE, unix.SYS_FCHMOD:
		fdPath(a[0])
	case sysRename:
		at(cwd, a[0])
		at(cwd, a[1])
		rename = true
	case sysRenameat:
		at(a[0], a[1])
		at(a[2], a[3])
		rename = true
	case unix.SYS_RENAMEAT2:
		at(a[0], a[1])
		at(a[2], a[3])
		// An exchange leaves both paths present: each is compared with
		// its state before (modified), not a rename.
		rename = a[4]&unix.RENAME_EXCHANGE == 0
	case sysLink:
		at(cwd, a[1])
	case unix.SYS_LINKAT:
		at(a[2], a[3])
	case sysSymlink:
		at(cwd, a[1])
	case unix.SYS_SYMLINKAT:
		at(a[1], a[2])
	default:
		return
	}
	var mine []string
	for _, p := range paths {
		if tracked(p) {
			mine = append(mine, p)
		}
	}
	if len(mine) == 0 && ok {
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
		t.markIncomplete("a path argument the warden could not read")
	}
	for _, p := range mine {
		t.record(p)
	}
	if rename && len(mine) == 2 && len(paths) == 2 {
		t.recordRename(paths[0], paths[1])
	}
}

// resolveAt is the absolute, clean path a syscall of task tid names with
// dirfd and the path at ptr (ptr 0: the fd itself), the final component not
// followed. "" with true: nothing to track (not a file system path).
func resolveAt(tid int, dirfd int32, ptr uint64) (string, bool) {
	var rel string
	if ptr != 0 {
		s, err := readString(tid, ptr)
		if err != nil {
			return "", false
		}
		rel = s
		if path.IsAbs(rel) {
			return path.Clean(rel), true
		}
	}
	var base string
	var err error
	if dirfd == unix.AT_FDCWD {
		base, err = os.Readlink("/proc/" + strconv.Itoa(tid) + "/cwd")
	} else {
		base, err = os.Readlink("/proc/" + strconv.Itoa(tid) + "/fd/" + strconv.Itoa(int(dirfd)))
	}
	if err != nil {
		// A bad fd: the syscall fails too.
		return "", true
	}
	if !path.IsAbs(base) {
		return "", true // a pipe, a socket, an anonymous inode
	}
	if rel == "" {
		return path.Clean(base), true
	}
	return path.Join(base, rel), true
}

// readString reads a NUL-terminated string of at most PATH_MAX bytes at
// addr in task tid's memory, a page at a time (a string near the end of a
// mapping must not fault the whole read).
func readString(tid int, addr uint64) (string, error) {
	const pathMax = 4096
	buf := make([]byte, 0, 256)
	var chunk [pathMax]byte
	for len(buf) < pathMax {
		n := min(pathMax-(addr%pathMax), uint64(pathMax-len(buf)))
		k, err := readMem(tid, addr, chunk[:n])
		if err != nil || k == 0 {
			if err == nil {
				err = unix.EFAULT
			}
			return "", err
		}
		for i := 0; i < k; i++ {
			if chunk[i] == 0 {
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
// allowed, else /proc/TID/mem through raw syscalls (an os.File would cost
// a poller registration and fcntls per read).
func readMem(tid int, addr uint64, b []byte) (int, error) {
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
	fd, err := unix.Open("/proc/"+strconv.Itoa(tid)+"/mem", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	n, err := unix.Pread(fd, b, int64(addr))
	_ = unix.Close(fd) // read-only
	return n, err
}
