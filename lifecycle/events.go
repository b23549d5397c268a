package lifecycle

import (
	"encoding/json"
	"time"

	"github.com/stockade/stockade/spec"
)

// Event is one journaled sandbox or process event.
type Event interface {
	// Type is the event's journal type, e.g. "sandbox.reserved".
	Type() string
}

// Reason says why a process or sandbox exited.
type Reason string

const (
	ReasonExited         Reason = "exited"          // ran to completion; ExitCode set
	ReasonSignaled       Reason = "signaled"        // killed by a signal (Stop, Signal)
	ReasonOOM            Reason = "oom"             // the kernel's OOM killer
	ReasonOutputLimit    Reason = "output_limit"    // frame limit or output quota
	ReasonTimeout        Reason = "timeout"         // its deadline passed
	ReasonCancelled      Reason = "cancelled"       // the caller cancelled or abandoned a stream
	ReasonSandboxStopped Reason = "sandbox_stopped" // its sandbox stopped under it
	ReasonLost           Reason = "lost"            // the runtime could not learn the outcome
	ReasonFailed         Reason = "failed"          // an error; Error holds its code
	ReasonStopped        Reason = "stopped"         // a sandbox stopped on request
)

// Sandbox events.
type (
	// SandboxReserved is the intent journaled before any Docker create. It
	// carries everything recovery needs.
	SandboxReserved struct {
		Owner    string       `json:"owner"`
		Spec     spec.Sandbox `json:"spec"`
		Profile  string       `json:"profile"`
		Revision string       `json:"revision"`
		// Deadline is the absolute TTL expiry; zero means none.
		Deadline time.Time `json:"deadline,omitzero"`
		// Pool names the warm pool the sandbox is made for: once started
		// it waits, pooled, admitting no process, until a SandboxClaimed
		// hands it to a caller (or it is removed).
		Pool string `json:"pool,omitempty"`
	}
	// SandboxClaimed hands a pooled sandbox to a caller of CreateSandbox,
	// journaled before the caller is answered: a crash leaves it pooled
	// or claimed, never handed out twice. It carries what the claimant
	// asked that can change after the start; the rest (image, limits,
	// network kind, user, datasets) matched the pool's.
	SandboxClaimed struct {
		Lifetime spec.Lifetime `json:"lifetime"`
		TTL      time.Duration `json:"ttl,omitempty"`
		// Deadline is the absolute TTL expiry, counted from the claim.
		Deadline time.Time         `json:"deadline,omitzero"`
		Env      []string          `json:"env,omitempty"`
		Dir      string            `json:"dir,omitempty"`
		Labels   map[string]string `json:"labels,omitempty"`
		// Secrets are the claimant's secret variables: names and refs
		// only (a SecretVar's value is never journaled).
		Secrets []spec.SecretVar `json:"secrets,omitempty"`
		// Secret is the warden's new secret (hex), rotated on the claim:
		// the pool's secret never authenticates the claimant's warden.
		// Empty: the sandbox has no warden serving.
		Secret string `json:"secret,omitempty"`
	}
	// SandboxCreated is the fact that every resource exists, the workspace
	// is seeded and the readback verified.
	SandboxCreated struct {
		Workload string `json:"workload"`
		Export   string `json:"export"`
		Volume   string `json:"volume"`
		Network  string `json:"network,omitempty"`
		// The egress role of an allowlist sandbox: its container, the
		// owner's outside network, the proxy's ip:port.
		Egress  string `json:"egress,omitempty"`
		Outside string `json:"outside,omitempty"`
		Proxy   string `json:"proxy,omitempty"`
	}
	// SandboxStarted: the workload runs and verified after start.
	SandboxStarted struct{}
	// SandboxStopping is the intent to stop; admission closes here.
	SandboxStopping struct {
		Reason Reason `json:"reason"`
	}
	// SandboxExited: the workload is stopped; resources are kept.
	SandboxExited struct {
		Reason   Reason    `json:"reason"`
		ExitCode *int      `json:"exit_code,omitempty"`
		OOM      bool      `json:"oom,omitempty"`
		Error    spec.Code `json:"error,omitempty"`
		Message  string    `json:"message,omitempty"`
	}
	// SandboxPausing is the intent to freeze the workload for a consistent
	// copy of its workspace (one for any number of concurrent readers).
	SandboxPausing struct{}
	// SandboxUnpaused: the workload is thawed again (or found not paused).
	SandboxUnpaused struct{}
	// SandboxRemoving is the intent to delete every resource.
	// WardenStarted: the sandbox's warden answered its first link. Its
	// secret authenticates a reattach after a crash (the journal is the
	// runtime's own file; the secret only keeps other processes of the
	// sandbox from posing as the runtime).
	WardenStarted struct {
		PID     int    `json:"pid"`
		Socket  string `json:"socket"`
		Secret  string `json:"secret"`
		Version string `json:"version"`
	}
	// WardenLost: the warden died, broke the protocol, or could not be
	// reattached; its processes end. A new warden serves new work.
	WardenLost struct {
		Reason string `json:"reason"`
	}
	// EgressChanged: an allowlist sandbox's rules are now these (journaled
	// before the proxy is told; its sequence is the rules' version, which
	// the proxy acknowledges).
	EgressChanged struct {
		Rules []spec.EgressRule `json:"rules"`
	}
	// EgressReplaced: the egress container was made anew (it had died, or
	// no longer read back as made), with the rules then in force.
	EgressReplaced struct {
		Egress  string `json:"egress"`
		Outside string `json:"outside"`
		Reason  string `json:"reason"`
	}
	// Checkpointed: a checkpoint of the workspace (/workspace/work) was
	// captured into the checkpoint store, content-addressed, while the
	// workload was frozen (a pause and unpause journaled around it). The
	// store holds the manifest under ID; a crash before this fact leaves a
	// manifest the next runtime removes.
	Checkpointed struct {
		ID    string `json:"id"`
		Name  string `json:"name,omitempty"`
		Files int    `json:"files"`
		Bytes int64  `json:"bytes"`
	}
	// RollingBack is the intent to restore checkpoint Checkpoint into
	// /workspace/work: the sandbox admits no process until it is settled,
	// its processes are stopped (each journaled), /workspace/Staging is
	// made with the Marker file in it and the checkpoint written into it,
	// and it and work are exchanged in one rename (renameat2
	// RENAME_EXCHANGE); the old tree (now in Staging) is emptied, marker
	// and all. Recovery settles an unsettled one by the marker: Staging
	// absent, or holding the marker, the exchange did not happen
	// (RollbackAbandoned); Staging without it, it did (RolledBack). Never
	// a mix.
	RollingBack struct {
		Checkpoint string `json:"checkpoint"`
		Staging    string `json:"staging"`
		Marker     string `json:"marker"`
	}
	// RolledBack: the exchange happened; the workspace is the checkpoint's.
	RolledBack struct {
		Checkpoint string `json:"checkpoint"`
	}
	// RollbackAbandoned: the exchange did not happen; the workspace is as
	// it was. Why says what stopped it.
	RollbackAbandoned struct {
		Checkpoint string `json:"checkpoint"`
		Why        string `json:"why"`
	}
	// Restored: a sandbox made from a checkpoint (its spec's From) had the
	// checkpoint written into its workspace before any process ran.
	Restored struct {
		Checkpoint string `json:"checkpoint"`
	}
	SandboxRemoving struct{}
	// UsageSampled: the workload's cgroup was read. Usage is the ledger's
	// totals then, summed over every run of the container; RunCPU and
	// RunMemory are the current run's own counters then, so a later
	// runtime tells a later sample of the same run (counters at least
	// these: exact, nothing counted twice) from a new run's; RunEnded says
	// the run ended after it, and Final that it was read at the stop
	// (the run is whole; a workload that died on its own, or was
	// stopped with no runtime to read it, has lost its tail).
	UsageSampled struct {
		Usage     spec.WorkloadUsage `json:"usage"`
		RunCPU    time.Duration      `json:"run_cpu_ns"`
		RunMemory int64              `json:"run_memory"`
		RunEnded  bool               `json:"run_ended,omitempty"`
		Final     bool               `json:"final,omitempty"`
	}
	// SandboxRemoved: every resource is gone. Terminal.
	SandboxRemoved struct{}
)

// Process events.
type (
	// ProcessReserved is the intent journaled before the exec create.
	ProcessReserved struct {
		Sandbox string       `json:"sandbox"`
		Spec    spec.Process `json:"spec"`
		// Deadline is the absolute timeout expiry; zero means none.
		Deadline time.Time `json:"deadline,omitzero"`
	}
	// ExecCreated is journaled before the attach that starts the exec.
	ExecCreated struct {
		ExecID string `json:"exec_id"`
	}
	// ProcessStarted: the process runs as leader of process group Group.
	// OOMKills is its sandbox's OOM kill count when it started (absent:
	// unknown), so a SIGKILL it dies of can be laid at the OOM killer's
	// door, also by a later runtime.
	ProcessStarted struct {
		Group int `json:"group"`
		// PID and Warden: a process the sandbox's warden spawned (no
		// Docker exec).
		PID      int    `json:"pid,omitempty"`
		ByWarden bool   `json:"warden,omitempty"`
		OOMKills *int64 `json:"oom_kills,omitempty"`
	}
	// StdinClosed: the caller half-closed stdin.
	StdinClosed struct{}
	// QuotaHit: the combined output quota was exceeded.
	QuotaHit struct {
		Bytes int64 `json:"bytes"`
	}
	// ProcessStopping is the intent to stop the process's group.
	ProcessStopping struct {
		Reason Reason `json:"reason"`
	}
	// ProcessExited ends the process. Terminal.
	ProcessExited struct {
		Reason      Reason    `json:"reason"`
		ExitCode    *int      `json:"exit_code,omitempty"`
		Error       spec.Code `json:"error,omitempty"`
		Message     string    `json:"message,omitempty"`
		StdoutBytes int64     `json:"stdout_bytes"`
		StderrBytes int64     `json:"stderr_bytes"`
		// Changes is what the process did under /workspace (nil: a
		// journal from before changes were tracked).
		Changes *Changes `json:"changes,omitempty"`
		// Usage is what the process used (nil: a journal from before
		// usage was kept, or a process that never started).
		Usage *spec.ProcessUsage `json:"usage,omitempty"`
	}
)

// Changes is what one process did under /workspace, attributed to it by
// the writer's identity (the warden's per-process seccomp listener), not
// by the time it ran: a concurrent neighbour's changes are not in it.
// Bounded: past MaxChangeEntries changes are counted, never listed, and
// Omitted says how many.
type Changes struct {
	// Untracked says why nothing was tracked (a process run by Docker
	// exec, a warden link lost before the report); the counts are zero.
	Untracked string `json:"untracked,omitempty"`
	// Incomplete says why the list may miss changes.
	Incomplete string `json:"incomplete,omitempty"`
	Created    int    `json:"created"`
	Modified   int    `json:"modified"`
	Deleted    int    `json:"deleted"`
	Renamed    int    `json:"renamed"`
	Omitted    int    `json:"omitted,omitempty"`
	// Entries are sorted by path.
	Entries []Change `json:"entries,omitempty"`
}

// Total is the number of changes, listed or not.
func (c *Changes) Total() int { return c.Created + c.Modified + c.Deleted + c.Renamed }

// Change is one path's change.
type Change struct {
	// Op is created, modified, deleted or renamed.
	Op string `json:"op"`
	// Path is absolute, under /workspace (as FileInfo's).
	Path string `json:"path"`
	// From is where a renamed path was.
	From string `json:"from,omitempty"`
	// Kind (file, dir, symlink, other), Size and Mode (permission bits)
	// describe the path after the process (before it, when deleted).
	Kind string `json:"kind"`
	Size int64  `json:"size,omitempty"`
	Mode uint32 `json:"mode,omitempty"`
	// SHA256 (hex) is a file's content after the process; Unhashed says
	// why a file has none.
	SHA256   string `json:"sha256,omitempty"`
	Unhashed string `json:"unhashed,omitempty"`
	// Text says the recorder kept the file's text before and after, for a
	// unified diff (small text files only).
	Text bool `json:"text,omitempty"`
}

// OutputGap: output bytes [From, To) of the process (both streams, in
// arrival order) are not in its recording, journaled where the loss
// happened (a re-adopted process whose warden had already dropped bytes
// past what was recorded). The recording holds a gap record at From. A
// fact: it changes no phase.
type OutputGap struct {
	From int64  `json:"from"`
	To   int64  `json:"to"`
	Why  string `json:"why"`
}

// Recovered records a recovery decision and what was observed, for either
// kind of entity. It is a fact: it changes no phase by itself.
type Recovered struct {
	Decision string `json:"decision"`
	Observed string `json:"observed"`
}

// Adopted records that a recovered runtime took a live entity back.
type Adopted struct {
	Detached bool `json:"detached,omitempty"`
}

// OrphanRemoved is journaled on the runtime stream after recovery removed a
// Docker resource labelled with this journal's owner whose sandbox the
// journal does not know as live.
type OrphanRemoved struct {
	Kind    string `json:"kind"`
	ID      string `json:"id"`
	Name    string `json:"name,omitempty"`
	Sandbox string `json:"sandbox"`
	Role    string `json:"role,omitempty"`
}

// RecoveryRan is journaled on the runtime stream when a recovery finished:
// what it found and what it did.
type RecoveryRan struct {
	Sandboxes int      `json:"sandboxes"`
	Processes int      `json:"processes"`
	Orphans   int      `json:"orphans"`
	Decisions []string `json:"decisions,omitempty"`
}

func (OrphanRemoved) Type() string     { return "runtime.orphan_removed" }
func (RecoveryRan) Type() string       { return "runtime.recovered" }
func (SandboxReserved) Type() string   { return "sandbox.reserved" }
func (SandboxCreated) Type() string    { return "sandbox.created" }
func (SandboxClaimed) Type() string    { return "sandbox.claimed" }
func (SandboxStarted) Type() string    { return "sandbox.started" }
func (SandboxStopping) Type() string   { return "sandbox.stopping" }
func (SandboxExited) Type() string     { return "sandbox.exited" }
func (SandboxPausing) Type() string    { return "sandbox.pausing" }
func (SandboxUnpaused) Type() string   { return "sandbox.unpaused" }
func (SandboxRemoving) Type() string   { return "sandbox.removing" }
func (WardenStarted) Type() string     { return "sandbox.warden_started" }
func (WardenLost) Type() string        { return "sandbox.warden_lost" }
func (EgressChanged) Type() string     { return "sandbox.egress_changed" }
func (EgressReplaced) Type() string    { return "sandbox.egress_replaced" }
func (SandboxRemoved) Type() string    { return "sandbox.removed" }
func (UsageSampled) Type() string      { return "sandbox.usage_sampled" }
func (Checkpointed) Type() string      { return "sandbox.checkpointed" }
func (RollingBack) Type() string       { return "sandbox.rolling_back" }
func (RolledBack) Type() string        { return "sandbox.rolled_back" }
func (RollbackAbandoned) Type() string { return "sandbox.rollback_abandoned" }
func (Restored) Type() string          { return "sandbox.restored" }
func (ProcessReserved) Type() string   { return "process.reserved" }
func (ExecCreated) Type() string       { return "process.exec_created" }
func (ProcessStarted) Type() string    { return "process.started" }
func (StdinClosed) Type() string       { return "process.stdin_closed" }
func (QuotaHit) Type() string          { return "process.quota_hit" }
func (ProcessStopping) Type() string   { return "process.stopping" }
func (ProcessExited) Type() string     { return "process.exited" }
func (OutputGap) Type() string         { return "process.output_gap" }
func (Recovered) Type() string         { return "recovered" }
func (Adopted) Type() string           { return "adopted" }

var decoders = map[string]func([]byte) (Event, error){}

func register[T Event]() {
	var zero T
	decoders[zero.Type()] = func(b []byte) (Event, error) {
		var v T
		err := json.Unmarshal(b, &v)
		return v, err
	}
}

func init() {
	register[SandboxReserved]()
	register[SandboxCreated]()
	register[SandboxClaimed]()
	register[SandboxStarted]()
	register[SandboxStopping]()
	register[SandboxExited]()
	register[SandboxPausing]()
	register[SandboxUnpaused]()
	register[SandboxRemoving]()
	register[WardenStarted]()
	register[WardenLost]()
	register[EgressChanged]()
	register[EgressReplaced]()
	register[SandboxRemoved]()
	register[UsageSampled]()
	register[Checkpointed]()
	register[RollingBack]()
	register[RolledBack]()
	register[RollbackAbandoned]()
	register[Restored]()
	register[ProcessReserved]()
	register[ExecCreated]()
	register[ProcessStarted]()
	register[StdinClosed]()
	register[QuotaHit]()
	register[ProcessStopping]()
	register[ProcessExited]()
	register[OutputGap]()
	register[Recovered]()
	register[Adopted]()
	register[OrphanRemoved]()
	register[RecoveryRan]()
}

// Encode returns the event's journal type and JSON payload.
func Encode(ev Event) (string, []byte, error) {
	b, err := json.Marshal(ev)
	if err != nil {
		return "", nil, spec.Wrap(spec.CodeInvalidArgument, "lifecycle", err, "encoding %s", ev.Type())
	}
	return ev.Type(), b, nil
}

// Decode turns a journal type and payload back into an event (a value, not
// a pointer). An unknown type or a payload that does not parse is an error
// naming the type.
func Decode(typ string, payload []byte) (Event, error) {
	dec, ok := decoders[typ]
	if !ok {
		return nil, spec.Errorf(spec.CodeJournal, "lifecycle", "unknown event type %q", typ)
	}
	ev, err := dec(payload)
	if err != nil {
		return nil, spec.Wrap(spec.CodeJournal, "lifecycle", err, "decoding %s payload", typ)
	}
	return ev, nil
}

// Terminal reports whether ev ends its entity (it then leaves the journal's
// live index): a removed sandbox or an exited process. An exited sandbox is
// not terminal: it still owns resources.
func Terminal(ev Event) bool {
	switch ev.(type) {
	case SandboxRemoved, ProcessExited:
		return true
	}
	return false
}
