package warden

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair: the master as a non-blocking
// *os.File (so its reads and writes go through Go's poller, not a thread
// each), the slave as a raw fd for the child. rows/cols set the initial size
// when non-zero.
func openPTY(rows, cols uint16) (*os.File, int, error) {
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, -1, os.NewSyscallError("open /dev/ptmx", err)
	}
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		_ = unix.Close(m) // the error being returned is the one that matters
		return nil, -1, os.NewSyscallError("unlock pty", err)
	}
	n, err := unix.IoctlGetUint32(m, unix.TIOCGPTN)
	if err != nil {
		_ = unix.Close(m) // the error being returned is the one that matters
		return nil, -1, os.NewSyscallError("pty number", err)
	}
	if rows != 0 || cols != 0 {
		if err := unix.IoctlSetWinsize(m, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}); err != nil {
			_ = unix.Close(m) // the error being returned is the one that matters
			return nil, -1, os.NewSyscallError("pty size", err)
		}
	}
	name := "/dev/pts/" + strconv.FormatUint(uint64(n), 10)
	sl, err := unix.Open(name, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = unix.Close(m) // the error being returned is the one that matters
		return nil, -1, os.NewSyscallError("open "+name, err)
	}
	return os.NewFile(uintptr(m), "/dev/ptmx"), sl, nil
}

// resize sets a pty's size through its master (the kernel sends SIGWINCH to
// the terminal's foreground group).
func resize(master *os.File, rows, cols uint16) error {
	rc, err := master.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	err = rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	})
	if err != nil {
		return err
	}
	return ierr
}
