//go:build !unix

package main

import "os"

// winch: no terminal size signal here; a -t process keeps its first size.
var winch []os.Signal
