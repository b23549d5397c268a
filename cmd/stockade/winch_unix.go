//go:build unix

package main

import (
	"os"
	"syscall"
)

// winch is the signal of a terminal's size change.
var winch = []os.Signal{syscall.SIGWINCH}
