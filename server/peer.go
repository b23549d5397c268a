package server

import (
	"fmt"
	"net"
	"syscall"
)

// peerUID reads the connected peer's uid from its socket, with the call
// this system has for it (fdPeerUID).
func peerUID(c net.Conn) (uint32, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, fmt.Errorf("a %T has no file descriptor to ask for peer credentials", c)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var uid uint32
	var uerr error
	if err := raw.Control(func(fd uintptr) { uid, uerr = fdPeerUID(int(fd)) }); err != nil {
		return 0, err
	}
	return uid, uerr
}
