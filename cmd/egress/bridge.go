package main

import (
	"fmt"
	"io"
	"net"
	"os"
)

// bridge is `stockade-egress control SOCKET`: the runtime runs it with a
// Docker exec in the egress container to reach the control socket. It
// copies stdin to the socket and the socket to stdout; stdin's end
// half-closes the socket (the proxy then ends the session once its answers
// are written), and the socket's end ends the bridge.
func bridge(path string) int {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		fmt.Fprintf(os.Stderr, "stockade-egress control: %v\n", err)
		return 1
	}
	defer func() { _ = c.Close() }() // the bridge's end; nothing left to tell
	go func() {
		if _, err := io.Copy(c, os.Stdin); err != nil {
			fmt.Fprintf(os.Stderr, "stockade-egress control: relaying stdin: %v\n", err)
		}
		// Tells the proxy no more comes; if the socket is gone, the copy
		// below reports it.
		_ = c.CloseWrite()
	}()
	if _, err := io.Copy(os.Stdout, c); err != nil {
		fmt.Fprintf(os.Stderr, "stockade-egress control: %v\n", err)
		return 1
	}
	return 0
}
