package main

import "syscall"

// deferAccept sets TCP_DEFER_ACCEPT (seconds) on a listening socket.
func deferAccept(fd uintptr) error {
	return syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT, 1)
}
