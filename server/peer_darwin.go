package server

import (
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// peerUID reads the connected peer's uid with LOCAL_PEERCRED (macOS).
func peerUID(c net.Conn) (uint32, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, fmt.Errorf("a %T has no file descriptor to ask for peer credentials", c)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Xucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptXucred(int(fd), unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, fmt.Errorf("LOCAL_PEERCRED: %w", cerr)
	}
	return cred.Uid, nil
}
