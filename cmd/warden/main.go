// Command stockade-warden is the process server that runs inside each
// stockade sandbox: package github.com/stockade/stockade/warden says what it
// does and how; this is its main.
package main

import (
	"os"
	"runtime"

	"github.com/stockade/stockade/warden"
)

// The main goroutine keeps the main thread for itself: a tracked spawn
// installs its filter on a locked thread that is discarded after the fork,
// and Go never discards the main thread (it wedges it), so a filter left
// there would never lose its last user and its process's report would wait
// for a hang-up that never comes.
func init() { runtime.LockOSThread() }

func main() {
	os.Exit(warden.Main(os.Args[1:]))
}
