// Command stockade-egress is the forward proxy of a stockade sandbox on the
// allowlist network. It runs alone in its own container (the egress role),
// on the sandbox's internal network and on the owner's outside network, and
// admits an HTTP CONNECT or a plain HTTP request only when the egress rules
// allow its host (and the address it resolves to) and port. It connects to
// the very address it checked. Every decision is kept in a bounded ring and
// reported to the runtime over a control socket (see package egress).
//
//	stockade-egress serve --listen ADDR:PORT --control SOCKET [--rules R,R] [--rules-version N]
//	stockade-egress control SOCKET
//	stockade-egress version
package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/spec"
)

func main() { os.Exit(run(os.Args[1:])) }

func usage() int {
	fmt.Fprintln(os.Stderr, "usage: stockade-egress serve --listen ADDR:PORT --control SOCKET [--rules R,R] [--rules-version N] | control SOCKET | version")
	return 2
}

func run(args []string) int {
	if len(args) == 0 {
		return usage()
	}
	switch args[0] {
	case "version":
		fmt.Println(egress.ProtocolVersion)
		return 0
	case "control":
		if len(args) != 2 {
			return usage()
		}
		return bridge(args[1])
	case "serve":
		var listen, control, rules string
		var version uint64
		rest := args[1:]
		for len(rest) > 0 {
			if len(rest) < 2 {
				return usage()
			}
			switch rest[0] {
			case "--listen":
				listen = rest[1]
			case "--control":
				control = rest[1]
			case "--rules":
				rules = rest[1]
			case "--rules-version":
				v, err := strconv.ParseUint(rest[1], 10, 64)
				if err != nil {
					return usage()
				}
				version = v
			default:
				return usage()
			}
			rest = rest[2:]
		}
		if listen == "" || control == "" {
			return usage()
		}
		rs, err := spec.ParseEgressRules(rules)
		if err != nil {
			fmt.Fprintf(os.Stderr, "stockade-egress: %v\n", err)
			return 2
		}
		p := newProxy(rs, version)
		if err := p.serve(listen, control); err != nil {
			fmt.Fprintf(os.Stderr, "stockade-egress: %v\n", err)
			return 1
		}
		return 0
	}
	return usage()
}
