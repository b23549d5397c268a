package process

import (
	"syscall"
	"time"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/warden/link"
	"github.com/stockade/stockade/warden/wire"
)

// The messages a process actor and its parent (the sandbox actor) exchange.

// Params is what a process actor is spawned with.
type Params struct {
	ID      string
	Sandbox dockerio.Sandbox
	Spec    spec.Process
	// Secrets are the sandbox's secret variables' values by name: in the
	// process's environment (below its own variables), never in its
	// journaled Spec.
	Secrets  map[string]string
	Deadline time.Time
	// Launched receives the handle once the process runs, or the error
	// that stopped it from running. It is sent exactly once.
	Launched chan<- Launch
	// Adopt, if set, makes this a recovering actor for a process an
	// earlier runtime left live: it has no streams (an exec cannot be
	// re-attached) and settles the process from what Docker reports.
	Adopt *lifecycle.Process
	// Detach re-adopts a still-running process detached (its exit code is
	// recorded when it ends) instead of stopping it.
	Detach bool
	// Gated: the process may not start (attach) before a Verified message
	// without error arrives: its sandbox is being asserted active.
	Gated bool
	// Link, if set, is the sandbox's warden: the process is spawned by it
	// instead of a Docker exec (see warden.go).
	Link *link.Link
	// Entry is the warden's table entry for a recovering process (nil: the
	// reattached warden does not know it); WardenGone says why no warden
	// could be reattached (see warden_adopt.go).
	Entry      *wire.Entry
	WardenGone error

	// testTransport, set only by this package's tests, replaces the
	// transport the actor would pick (newTransport); nil in production.
	testTransport func(*processActor) transport
}

// Verified tells a gated process whether its sandbox passed the check
// before launch; an error fails the process before it runs.
type Verified struct{ Err error }

// Launch is the answer to a launch.
type Launch struct {
	Handle *Handle
	Err    error
}

// Exited is sent to the parent (the sandbox actor) when the process is
// terminal and journaled so.
type Exited struct {
	ID     string
	Result spec.Result
}

// Abandoned is sent to the parent instead of Exited when the journal could
// not take the process's events: its outcome is not journaled, so its
// sandbox may not be journaled exited either.
type Abandoned struct {
	ID  string
	Err error
}

// Tracked is sent to the parent each time the process's journaled phase
// changes, with its group once known, so the sandbox can settle it (kill the
// group, journal its end) if this actor fails.
type Tracked struct {
	ID    string
	Phase lifecycle.Phase
	Group int
}

// AdoptSettled is sent to the parent when a recovering process actor has
// re-adopted a running exec (detached, or stopping it by option).
type AdoptSettled struct{ ID string }

// FailClosed is sent to the parent when the process's stream shows the
// daemon or the connection cannot be trusted (stream_failure): the whole
// sandbox stops.
type FailClosed struct {
	ID  string
	Err error
}

// Stop asks the process to stop its group: TERM, then KILL after the grace.
type Stop struct {
	Reason lifecycle.Reason
	Err    error // the typed error the result carries, if any
	Reply  chan<- error
}

// ExecDied tells the process that Docker reported an exec ended (an
// exec_die event of its sandbox's workload): if it is this process's exec,
// the actor confirms by inspecting it.
type ExecDied struct {
	ExecID   string
	ExitCode int
}

// Recheck tells a process whose end is awaited to inspect its exec again:
// the event stream broke and events may have been missed.
type Recheck struct{}

// Signal sends a signal to the process group.
type Signal struct {
	Sig   syscall.Signal
	Reply chan<- error
}

// Resize asks for a process's terminal size.
type Resize struct {
	Rows, Cols uint16
	Reply      chan<- error
}
