// Package warden is stockade-warden, the process server that runs inside
// each stockade sandbox, as a library: cmd/warden is its thin main (Main),
// and the Fake engine runs it in-process (NewInProcess) so that every test
// on the Fake goes through the same transport as production. The runtime
// starts it once per sandbox with one Docker exec (as the sandbox's user)
// and then asks it, over that exec's stdin and stdout, to spawn, feed,
// signal and resize processes and to stream their output back; the wire
// format is package warden/wire, the runtime's end of a link package
// warden/link.
//
// It exists because a Docker exec per process is slow and cannot be
// re-attached: the warden keeps its children running when the runtime goes
// away, holds each child's unacknowledged output (a full window blocks only
// that child), and accepts a new, authenticated link on a unix socket,
// bridged by `stockade-warden attach SOCKET` from a second, short exec.
//
// It is static (standard library and golang.org/x/sys only, no cgo: the
// import-layer test holds it to that) so that it runs in any image, busybox
// or less, without libc. It lives inside the sandbox's limits (pids.max,
// memory), so it keeps its threads few (every fd it reads or writes goes
// through Go's poller, children are reaped by one wait4 loop, never by a
// thread parked per child) and bounds its buffers.
//
// Its process boundary (procs) is the one seam: the program forks and
// execs real children; an in-process warden runs each child as a Program
// and reports its end as the reaper would, with the same pipes and ptys,
// windows, acknowledgements, tables, reattach handshake and rekey. What an
// in-process warden does not do: track changes (its children report
// untracked), resolve PATH or check a working directory (its Start does),
// or listen on a socket (Reattach is handed the connection).
//
// Usage of the program:
//
//	stockade-warden [serve [-buffer-cap BYTES]]   serve a link on stdin/stdout
//	                                              (-workspace DIR: tests only)
//	stockade-warden attach SOCKET                 bridge stdin/stdout to a warden's socket
//	stockade-warden version                       print the protocol version
//	stockade-warden exchange WORKSPACE STAGING
//	                                              check a workspace, then exchange work and
//	                                              STAGING in one rename (a rollback, as root,
//	                                              in a one-off container)
//	stockade-warden retire PID [SOCKET] | all     kill a warden server given up (or every one), remove its socket
//	stockade-warden empty DIR [FILE...]           remove what DIR holds, then the files
package warden

import (
	"fmt"
	"os"

	"github.com/stockade/stockade/warden/wire"
)

const usage = `usage:
  stockade-warden [serve [-buffer-cap BYTES]]
  stockade-warden attach SOCKET
  stockade-warden version
  stockade-warden kill SIGNAL PGID
  stockade-warden exchange WORKSPACE STAGING
  stockade-warden retire PID [SOCKET] | all
  stockade-warden empty DIR [FILE...]
`

// Main runs the stockade-warden program with its arguments (os.Args[1:])
// and returns its exit status.
func Main(args []string) int {
	if len(args) == 0 {
		return serve(nil)
	}
	switch args[0] {
	case "serve":
		return serve(args[1:])
	case "attach":
		if len(args) != 2 {
			fmt.Fprint(os.Stderr, usage)
			return 2
		}
		return attach(args[1])
	case "kill":
		// The runtime's way to signal a group when no warden answers
		// (it died, or froze): a short exec of this binary, so no shell
		// is needed in the image.
		if len(args) != 3 {
			fmt.Fprint(os.Stderr, usage)
			return 2
		}
		return kill(args[1], args[2])
	case "exchange":
		if len(args) != 3 {
			fmt.Fprint(os.Stderr, usage)
			return 2
		}
		return exchange(args[1], args[2])
	case "retire":
		if len(args) != 2 && len(args) != 3 {
			fmt.Fprint(os.Stderr, usage)
			return 2
		}
		socket := ""
		if len(args) == 3 {
			socket = args[2]
		}
		return retire(args[1], socket)
	case "empty":
		if len(args) < 2 {
			fmt.Fprint(os.Stderr, usage)
			return 2
		}
		return empty(args[1], args[2:])
	case "version":
		if len(args) != 1 {
			fmt.Fprint(os.Stderr, usage)
			return 2
		}
		fmt.Println(wire.Version)
		return 0
	default:
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
}
