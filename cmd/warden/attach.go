package main

import (
	"fmt"
	"io"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// attach is `stockade-warden attach SOCKET`: the bridge a second, short
// Docker exec runs so that a runtime which lost its first link (it crashed,
// or Docker dropped the exec's streams) reaches the warden again. It copies
// stdin to the socket and the socket to stdout; stdin's end half-closes the
// socket, and the socket's end ends the bridge.
func attach(path string) int {
	// It carries an authenticated link: the workload (same uid) must not
	// ptrace it either.
	unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		fmt.Fprintf(os.Stderr, "stockade-warden attach: %v\n", err)
		return 1
	}
	go func() {
		io.Copy(c, os.Stdin)
		c.CloseWrite()
	}()
	if _, err := io.Copy(os.Stdout, c); err != nil {
		fmt.Fprintf(os.Stderr, "stockade-warden attach: %v\n", err)
		return 1
	}
	return 0
}
