package warden

import (
	"errors"
	"os"
	"runtime"
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
	// A chown clears setuid and setgid; an ACL set or removed through
	// the xattr calls sets the mode's group bits; a unix socket's bind
	// makes a file.
	sysChown, sysLchown, unix.SYS_FCHOWN, unix.SYS_FCHOWNAT,
	unix.SYS_SETXATTR, unix.SYS_LSETXATTR, unix.SYS_FSETXATTR, unix.SYS_SETXATTRAT,
	unix.SYS_REMOVEXATTR, unix.SYS_LREMOVEXATTR, unix.SYS_FREMOVEXATTR, unix.SYS_REMOVEXATTRAT,
	unix.SYS_BIND,
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
	done := make(chan forked, 1)
	go forkFiltered(t, argv0, argv, attr, done)
	r := <-done
	return r.pid, r.err
}

type forked struct {
	pid int
	err error
}

// forkFiltered is forkTracked's goroutine. Go never discards the main
// thread (a goroutine that ends locked to it wedges it), and a filter left
// there would keep the listener from ever hanging up: on the main thread
// it holds it, so that the goroutine it starts runs on another thread, and
// gives it back, unfiltered, once that one has forked.
func forkFiltered(t *tracker, argv0 string, argv []string, attr *syscall.ProcAttr, done chan<- forked) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		// Held (this goroutine parked, locked) until the other's fork
		// is done, then given back: it never had a filter.
		inner := make(chan forked, 1)
		go forkFiltered(t, argv0, argv, attr, inner)
		r := <-inner
		runtime.UnlockOSThread()
		done <- r
		return
	}
	// Deliberately no UnlockOSThread (see forkTracked).
	if fd, why := installFilter(); fd < 0 {
		t.untracked = why
	} else {
		// Served before the fork: nothing this thread does after the
		// install is a notified syscall, but a child's first notified
		// one must find a reader.
		t.served = make(chan struct{})
		go t.serve(fd)
	}
	pid, err := syscall.ForkExec(argv0, argv, attr)
	done <- forked{pid, err}
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
//
// A process that is making notified calls is served hot: on a thread of
// its own waiting in poll(2), not in Go's netpoller, so the notifying task
// is woken on this thread's CPU (SYNC_WAKE_UP reaches a poll waiter, not
// an epoll one) and no goroutine is scheduled per notification — through
// the netpoller each cost a chain of thread wake-ups (the netpoller's,
// then a thread for the goroutine), each a cross-CPU wake-up of a halted
// virtual CPU. A process quiet for hotIdle is served cold, from the
// netpoller: a thread is a pid of the sandbox's limit, and a hundred
// waiting processes must not hold a hundred.
func (t *tracker) serve(fd int) {
	defer close(t.served)
	r := newResolver(t)
	defer r.close()
	// The listener stays open until no task uses the filter: a closed one
	// would fail every notified call with ENOSYS.
	defer func() { _ = unix.Close(fd) }() // nothing written through it
	for {
		hup, err := t.serveCold(fd, r)
		if err != nil {
			// No netpoller wait: served from a thread, hot, to the end.
			logf("seccomp listener: %v", err)
			t.serveHot(fd, r, -1)
			return
		}
		if hup || t.serveHot(fd, r, hotIdle) {
			return
		}
		r.cool()
	}
}

// hotSlots bounds the trackers served hot at once: each holds a thread,
// and a thread is a pid of the sandbox's limit (a Go runtime that cannot
// make one dies).
var hotSlots = make(chan struct{}, 2)

// serveCold serves fd from the netpoller through a duplicate registered
// for the purpose (the listener itself, registered, would wake the
// netpoller's thread at every notification served hot), until no task
// uses the filter (true) or the tracker gets a hot slot (false, the slot
// held: serveHot releases it).
func (t *tracker) serveCold(fd int, r *resolver) (hup bool, err error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return false, err
	}
	if err := unix.SetNonblock(dup, true); err != nil {
		_ = unix.Close(dup) // never used
		return false, err
	}
	f := os.NewFile(uintptr(dup), "seccomp-listener") //nolint:gosec // G115: an fd
	defer func() { _ = f.Close() }()                  // the wait's own duplicate
	rc, err := f.SyscallConn()
	if err != nil {
		return false, err
	}
	var n seccompNotif
	for {
		var pollErr, got bool
		err := rc.Read(func(fd uintptr) bool {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}} //nolint:gosec // G115: an fd
			k, err := unix.Poll(pfd, 0)
			switch {
			case err != nil:
				pollErr = err != unix.EINTR
				return pollErr
			case k == 0:
				return false // wait in the netpoller
			}
			if pfd[0].Revents&unix.POLLIN == 0 {
				hup = pfd[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0
				return hup
			}
			got = true
			return true
		})
		switch {
		case err != nil:
			return false, err
		case hup:
			return true, nil
		case pollErr:
			// A poll that keeps failing (ENOMEM) must not spin.
			time.Sleep(10 * time.Millisecond)
			continue
		case !got:
			continue
		}
		select {
		case hotSlots <- struct{}{}:
			return false, nil
		default:
		}
		// Every slot is taken: this one is served here.
		n = seccompNotif{}
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&n))); e != 0 { //nolint:gosec // G103: the kernel ABI of seccomp(2) and its ioctls takes pointers
			continue
		}
		r.answer(fd, &n)
	}
}

// hotIdle is how long a hot tracker waits on its own thread for the next
// notification before it goes back to the netpoller, in milliseconds.
const hotIdle = 50

// serveHot serves notifications on a locked thread waiting in poll(2)
// until none came for idle ms (false; -1: never) or no task uses the
// filter (true), then gives back its hot slot (one is held unless idle is
// -1). Readable means a request is counted: RECV does not block (a task
// killed since answers ENOENT).
func (t *tracker) serveHot(fd int, r *resolver, idle int) bool {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if idle >= 0 {
		defer func() { <-hotSlots }()
	}
	var n seccompNotif
	// failed counts the polls failed in a row.
	failed := 0
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}} //nolint:gosec // G115: an fd
	for {
		pfd[0].Revents = 0
		k, err := unix.Poll(pfd, idle)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			// A poll that keeps failing (ENOMEM) must not spin: back off.
			failed++
			time.Sleep(time.Duration(min(failed, 100)) * time.Millisecond)
			continue
		case k == 0:
			return false
		}
		failed = 0
		if pfd[0].Revents&unix.POLLIN == 0 {
			if pfd[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
				return true
			}
			continue
		}
		n = seccompNotif{}
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&n))); e != 0 { //nolint:gosec // G103: the kernel ABI of seccomp(2) and its ioctls takes pointers
			continue
		}
		r.answer(fd, &n)
	}
}

// answer records what notification n touches, then lets its call go on.
func (r *resolver) answer(fd int, n *seccompNotif) {
	r.handle(fd, n)
	resp := seccompResp{id: n.id, flags: unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE}
	// ENOENT: the task went away (killed) before the answer.
	_, _, _ = unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&resp))) //nolint:gosec // G103: the kernel ABI of seccomp(2) and its ioctls takes pointers
}
