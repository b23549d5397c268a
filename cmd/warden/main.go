// Command stockade-warden is the process server that runs inside each
// stockade sandbox: package github.com/stockade/stockade/warden says what it
// does and how; this is its main.
package main

import (
	"os"

	"github.com/stockade/stockade/warden"
)

func main() {
	os.Exit(warden.Main(os.Args[1:]))
}
