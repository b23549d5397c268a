package main

import (
	"context"
	"net"
	"syscall"
)

// listenClients listens for the proxy's clients on addr (TCP). Where the system
// has it, the listener defers each accept until the client's first bytes
// (its request: a proxy's client always speaks first) have come, so the
// accept and the request's read are one wakeup, not two; a client that
// sends nothing is still accepted, a second or so later, and meets the head
// timeout as before.
func listenClients(addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) { serr = deferAccept(fd) }); err != nil {
			return err
		}
		return serr
	}}
	return lc.Listen(context.Background(), "tcp", addr)
}
