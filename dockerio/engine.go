package dockerio

import (
	"context"
	"io"
	"syscall"
	"time"

	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/spec"
)

// Engine is the seam between stockade's actors and the Docker daemon: every
// Docker call the runtime makes goes through it. *Adapter implements it
// against the real daemon; *Fake (fake.go) implements it in memory for unit
// tests of the actors; dockerio/enginetest is the conformance suite both
// pass. Every method honours ctx and returns *spec.Error values (Docker
// errors are translated here, at the edge).
//
// Engine is the union of the roles below, each the set of calls one kind
// of caller makes: a caller that needs one role takes that role, not
// Engine.
type Engine interface {
	Checks
	Sandboxes
	Inventory
	Execs
	Files
	Workspaces
	Wardens
	Egress
	Events
	Meters
}

// Checks is what the runtime asks before it trusts the daemon and an image
// (Open, and each sandbox create).
type Checks interface {
	// Preflight checks the daemon against the profile and returns what it
	// observed, including the daemon id the journal records.
	Preflight(ctx context.Context) (Daemon, error)

	// ResolveImage resolves a tag or ID to the image's exact ID and checks it
	// against the profile (OS, architecture, no declared volumes).
	ResolveImage(ctx context.Context, ref string) (string, error)
}

// Sandboxes is a sandbox's lifecycle (the sandbox actor; the process actor
// only verifies).
type Sandboxes interface {
	// CreateSandbox makes a sandbox's volume, network (unless isolated),
	// export container and workload container, verifies the readback and
	// seeds the workspace. It is idempotent under the names: resources
	// found by name are adopted only if every label matches. On failure it
	// leaves what it made: the caller journals a removal, then rolls back
	// with RemoveSandbox (so no Docker resource goes unannounced). An
	// engine may begin the workload's start and the seed here, once the
	// workload is read back (the Adapter does: they are its slowest
	// steps); the caller must not rely on the workload not running before
	// StartSandbox, only on nothing but its keeper running before
	// StartSandbox returns.
	CreateSandbox(ctx context.Context, req SandboxRequest) (Sandbox, error)
	// StartSandbox starts the workload container (or finishes the start
	// and the seed the create began) and verifies it again. A mismatch
	// (unsupported), or a failed start or seed, is rolled back by the
	// caller, as for Create.
	StartSandbox(ctx context.Context, sb Sandbox) error
	// VerifySandbox re-reads the workload and checks it is running with the
	// same identity (name and labels), revision and policy; a workload not
	// running, or one that differs, is unsupported naming the first field.
	VerifySandbox(ctx context.Context, sb Sandbox) error
	// StopSandbox stops the workload container (TERM, then KILL after
	// grace), leaving every resource in place. A workload already gone is
	// stopped: ExitCode -1 (nothing to report), no error.
	StopSandbox(ctx context.Context, sb Sandbox, grace time.Duration) (ContainerExit, error)
	// RemoveSandbox force-removes every resource of the sandbox. Resources
	// already gone are not an error.
	RemoveSandbox(ctx context.Context, sb Sandbox) error
	// PauseSandbox freezes the workload for a consistent copy; Docker
	// refuses execs into it (and stops of it) until UnpauseSandbox.
	PauseSandbox(ctx context.Context, sb Sandbox) error
	// UnpauseSandbox thaws the workload; one not paused is no error.
	UnpauseSandbox(ctx context.Context, sb Sandbox) error
}

// Inventory is what recovery and reconcile read of the owner's resources,
// and the removal of orphans.
type Inventory interface {
	// ListOwned lists every container, network and volume labelled with the
	// owner, grouped by sandbox id.
	ListOwned(ctx context.Context, owner string) ([]Owned, error)
	// InspectSandbox reports what Docker shows of a sandbox's resources
	// (for reconcile).
	InspectSandbox(ctx context.Context, sb Sandbox) (Observed, error)
	// RemoveOwned removes one listed resource (an orphan).
	RemoveOwned(ctx context.Context, r Resource) error
}

// Execs runs processes as Docker execs and reaches their process groups
// (the process actor; the sandbox actor signals groups at a stop).
type Execs interface {
	// CreateExec creates (does not start) a process in the sandbox. The
	// caller journals the returned exec id before calling AttachExec.
	CreateExec(ctx context.Context, sb Sandbox, req ExecRequest) (string, error)
	// AttachExec attaches to the exec, which starts it, and returns the
	// pull-style attachment plus the process group id the process wrote.
	AttachExec(ctx context.Context, sb Sandbox, execID string, req ExecRequest) (Attachment, error)
	// InspectExec reports an exec's state. ExitCode is meaningful only when
	// Running is false.
	InspectExec(ctx context.Context, execID string) (ExecState, error)
	// ReadGroup reads back the process group id a process wrote to the
	// sandbox's tmpfs (for an exec journaled as created but not started).
	ReadGroup(ctx context.Context, sb Sandbox, processID string) (int, error)
	// SignalGroup sends sig to the process group pgid from a second exec.
	SignalGroup(ctx context.Context, sb Sandbox, pgid int, sig syscall.Signal) error
	// OOMKills reads the sandbox memory cgroup's count of OOM kills (-1
	// when the kernel does not expose it). Compared with the count at a
	// process's start (Attachment.OOMKills), it tells whether a SIGKILL the
	// process died of can be the OOM killer's.
	OOMKills(ctx context.Context, sb Sandbox) (int64, error)
}

// Files copies into and out of a sandbox's workspace (the sandbox actor's
// put and get).
type Files interface {
	// PutArchive extracts a tar stream into /workspace through the export
	// container; entries are owned by the sandbox's uid:gid.
	PutArchive(ctx context.Context, sb Sandbox, dir string, tar io.Reader) error
	// GetArchive returns a tar stream of path under /workspace, read
	// through the export container while the workload goes on (live).
	GetArchive(ctx context.Context, sb Sandbox, path string) (io.ReadCloser, error)
}

// WardenDelivery is an engine that says whether its sandboxes get a warden
// (the Adapter given a warden binary; the Fake unless NoWarden). The
// runtime asks it once, at Open: without one every process is an exec.
type WardenDelivery interface {
	HasWarden() bool
}

var (
	_ WardenDelivery = (*Adapter)(nil)
	_ WardenDelivery = (*Fake)(nil)
)

// Wardens reaches a sandbox's warden (the sandbox actor).
type Wardens interface {
	// StartWarden starts the sandbox's warden (one exec of the delivered
	// binary as the sandbox's user); its stdin and stdout are the link, its
	// stderr goes to stderr. AttachWarden bridges a new link to a running
	// warden's socket. Both are unsupported without a warden binary.
	StartWarden(ctx context.Context, sb Sandbox, stderr io.Writer) (WardenConn, error)
	AttachWarden(ctx context.Context, sb Sandbox, socket string, stderr io.Writer) (WardenConn, error)
	// EnsureWarden checks the delivered binary is still ours, writing it
	// again if not.
	EnsureWarden(ctx context.Context, sb Sandbox) error
	// RetireWarden kills a warden the runtime gave up on (its journaled
	// pid, if that pid still runs a warden server; pid 0 and no socket:
	// every warden server) and removes its reattach socket: a sandbox
	// runs one warden at a time.
	RetireWarden(ctx context.Context, sb Sandbox, pid int, socket string) error
}

// Egress keeps an allowlist sandbox's egress role (its networks and proxy)
// whole and links to its proxy (the sandbox actor).
type Egress interface {
	// OpenEgress opens a control link to an allowlist sandbox's proxy.
	// EnsureEgress makes its egress role whole (networks read back; the
	// egress container read back running, else made anew with the current
	// rules and started) and reports whether it was made anew.
	OpenEgress(ctx context.Context, sb Sandbox, stderr io.Writer) (WardenConn, error)
	EnsureEgress(ctx context.Context, sb Sandbox) (Sandbox, bool, error)
}

// Events is the daemon's event stream (the runtime's watcher).
type Events interface {
	// Events streams the die and exec_die events of the owner's
	// containers since the given time (zero: from now) until ctx ends; the
	// error channel reports a broken stream. A slow reader can miss events
	// (the daemon drops them for it), and a resubscription replays only
	// the daemon's recent ones: confirm by inspecting after a gap.
	Events(ctx context.Context, owner string, since time.Time) (<-chan ContainerEvent, <-chan error)
}

// Attachment is a started exec's I/O: a pull-style frame source (the caller
// owns the read loop, for backpressure) and a half-closable stdin. Close
// closes the connection; it is safe to call more than once.
type Attachment interface {
	// Next returns the next piece of output (at most the receive chunk,
	// from one frame), valid until the next call. io.EOF at a clean end.
	Next() (framing.StreamID, []byte, error)
	// Stdin is nil unless the exec was created with stdin.
	Stdin() io.Writer
	// CloseStdin half-closes the connection (CloseWrite).
	CloseStdin() error
	// Group is the process group id the process wrote before exec'ing.
	Group() int
	// OOMKills is the sandbox's OOM kill count when the process started
	// (-1 when unreadable).
	OOMKills() int64
	Close() error
}

// Daemon is what preflight observed.
type Daemon struct {
	ID         string
	Version    string
	APIVersion string
	Profile    string
	Revision   string
}

// SandboxRequest is what CreateSandbox makes.
type SandboxRequest struct {
	Owner string
	ID    string
	Spec  spec.Sandbox
}

// Sandbox names a made sandbox's resources.
type Sandbox struct {
	Owner    string
	ID       string
	Spec     spec.Sandbox
	Revision string
	Workload string // container id
	Export   string // container id
	Volume   string // volume name
	Network  string // network id; empty when isolated
	// The egress role (allowlist only): its container, the owner's outside
	// network, the proxy's address (ip:port) on the sandbox's network, and
	// the version of the rules in sb.Spec.Policy.Egress.
	Egress       string
	Outside      string
	Proxy        string
	RulesVersion uint64
}

// ExecRequest is one process to run.
type ExecRequest struct {
	// ProcessID names the process; its group id file is keyed by it.
	ProcessID string
	Spec      spec.Process
}

// ExecState is ExecInspect, read correctly: ExitCode only when !Running.
type ExecState struct {
	Running  bool
	ExitCode int
	Pid      int
	// Known is false when the daemon no longer knows the exec.
	Known bool
}

// ContainerExit is a stopped container's outcome.
type ContainerExit struct {
	ExitCode  int
	OOMKilled bool
}

// Role is a resource's role label.
type Role string

const (
	RoleWorkload Role = "workload"
	RoleExport   Role = "export"
	RoleVolume   Role = "volume"
	RoleNetwork  Role = "network"
	// RoleExchange is a rollback's one-off container (rollback.go): it
	// lives for one exchange and is removed after it.
	RoleExchange Role = "exchange"
)

// Kind is a Docker resource kind.
type Kind string

const (
	KindContainer Kind = "container"
	KindNetwork   Kind = "network"
	KindVolume    Kind = "volume"
)

// Resource is one labelled Docker resource.
type Resource struct {
	Kind     Kind
	ID       string // container/network id, or volume name
	Name     string
	Role     Role
	Owner    string
	Sandbox  string
	Revision string
	Labels   map[string]string
}

// Owned groups an owner's resources by sandbox id.
type Owned struct {
	Sandbox   string
	Resources []Resource
}

// Observed is what reconcile sees of a sandbox.
type Observed struct {
	// Present lists the resources that exist.
	Present []Resource
	// Running: the workload container runs (Paused or not).
	Running bool
	// Paused: the running workload is frozen (a consistent copy was being
	// taken, or someone paused it).
	Paused bool
	// Exit is the workload's outcome when it exists and is not running.
	Exit *ContainerExit
	// Mismatch names the first readback field that differs, or "" when the
	// workload verifies exactly (only computed when Running).
	Mismatch string
	Revision string
}
