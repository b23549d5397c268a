// Command stockade-egress is the forward proxy that stands between a
// sandbox with the allowlist network and the outside. The sandbox's
// processes reach the outside only through it (their network has no other
// route), with HTTP CONNECT host:port or a plain HTTP request with an
// absolute http:// URI. It admits a request when the rules in force admit
// host:port and the address the name resolves to (package
// github.com/stockade/stockade/egress decides), connects to exactly that
// address, and records every decision.
//
// The runtime controls it over a unix socket (the protocol is package egress):
// it replaces the rules while the proxy runs, and reads the decisions, which
// the proxy keeps in a bounded ring so that a runtime that reconnects
// resumes where it stopped. A rule change applies to new requests at once,
// and cuts the connections it no longer admits.
//
// It is static (standard library only, no cgo), runs as an unprivileged
// user in its own locked-down container, and bounds everything a client can
// make it hold: request heads (64 KiB, 30 s), concurrent connections,
// decisions. It logs to stderr only when it starts and on errors of its own.
//
// Usage:
//
//	stockade-egress serve --listen ADDR:PORT --control SOCKET [--rules R,R] [--rules-version N] [--host ADDRS] [--max-conns N]
//	stockade-egress control SOCKET    bridge stdin/stdout to the control socket
//	stockade-egress version           print the control protocol's version
package main

import (
	"fmt"
	"os"

	"github.com/stockade/stockade/egress"
)

const usage = `usage:
  stockade-egress serve --listen ADDR:PORT --control SOCKET [--rules R,R] [--rules-version N] [--host ADDRS] [--max-conns N]
  stockade-egress control SOCKET
  stockade-egress version
`

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:])
	case "control":
		if len(args) != 2 {
			fmt.Fprint(os.Stderr, usage)
			return 2
		}
		return bridge(args[1])
	case "version":
		if len(args) != 1 {
			fmt.Fprint(os.Stderr, usage)
			return 2
		}
		fmt.Println(egress.ProtocolVersion)
		return 0
	default:
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
}
