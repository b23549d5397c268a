package server

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// fdPeerUID reads a unix socket peer's uid with SO_PEERCRED.
func fdPeerUID(fd int) (uint32, error) {
	cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return 0, fmt.Errorf("SO_PEERCRED: %w", err)
	}
	return cred.Uid, nil
}
