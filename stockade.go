package stockade

import (
	"context"
	"io"
	"time"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/core"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/metrics"
	"github.com/stockade/stockade/profile"
	"github.com/stockade/stockade/spec"
)

// Runtime is an open stockade runtime: one journal, one Docker daemon.
type Runtime struct{ c *core.Runtime }

// Open opens (or creates) the journal, takes its lock, checks the daemon
// against the profile and the journal's identity, starts the actor system
// and recovers: every entity an earlier runtime left live is reconciled
// with what Docker shows (see Recovery for the report) before Open returns.
// A journal that is a copy (journal.CopyTo) is refused (identity_mismatch):
// a copy is never a second runtime.
func Open(ctx context.Context, opts Options) (*Runtime, error) {
	c, err := core.Open(ctx, opts.core())
	if err != nil {
		return nil, err
	}
	return &Runtime{c}, nil
}

// PlanRecovery reports what Open's recovery would decide for the journal
// and the daemon, touching nothing: no Docker resource and no journal
// record. It takes the journal's lock like Open (a running runtime makes it
// fail with journal_locked).
func PlanRecovery(ctx context.Context, opts Options) (RecoveryReport, error) {
	return core.PlanRecovery(ctx, opts.core())
}

// Doctor checks the Docker daemon in the environment against the named
// profile ("" selects as profile.Select does) and returns every check. The
// error is non-nil only when the daemon could not be asked; a daemon that
// fails the profile gives a report whose Err says why.
func Doctor(ctx context.Context, profileName string) (profile.Report, error) {
	return core.Doctor(ctx, profileName)
}

// Owner is the journal's owner id; it labels every Docker resource this
// runtime makes.
func (rt *Runtime) Owner() string { return rt.c.Owner() }

// CreateSandbox makes a sandbox and starts its workload. It returns once the
// sandbox is started and verified, or with the error that stopped it (and
// nothing left behind). A spec whose pool key matches a warm pool's claims
// one of its sandboxes; one with From is made from that checkpoint.
func (rt *Runtime) CreateSandbox(ctx context.Context, s spec.Sandbox) (*Sandbox, error) {
	return sandboxOf(rt.c.CreateSandbox(ctx, s))
}

// Sandbox returns a live sandbox by id: one this runtime made, or one it
// recovered (re-adopted, or exited and kept). A sandbox out of service
// fails unreconciled; one that is not live, not_found. ctx is only checked:
// a ctx already done fails cancelled. It has host.Runtime's Sandbox shape.
func (rt *Runtime) Sandbox(ctx context.Context, id string) (*Sandbox, error) {
	if ctx.Err() != nil {
		return nil, spec.Wrap(spec.CodeCancelled, "runtime", ctx.Err(), "looking up sandbox %s", id)
	}
	return sandboxOf(rt.c.Sandbox(id))
}

// Sandboxes lists the live sandboxes (made or recovered by this runtime),
// sorted by reservation time, and those taken out of service (Unreconciled
// set, Why saying why).
func (rt *Runtime) Sandboxes(ctx context.Context) ([]SandboxInfo, error) {
	return rt.c.Sandboxes(ctx)
}

// Process returns a live process by id: one started through this runtime,
// or one recovery re-adopted from an earlier runtime (its output goes to
// the recorder only, so its Stdout and Stderr are nil: Attach has it). It
// can be signalled, stopped and waited for. not_found when the process is
// not live here: rt.Host().Process finds any journaled process, running or
// ended, as a served runtime's client does.
func (rt *Runtime) Process(ctx context.Context, id string) (*Process, error) {
	h, err := rt.c.Process(ctx, id)
	return processOf(rt.c, h, err)
}

// Recovery returns the report of the recovery Open ran. ctx is only
// checked: a ctx already done fails cancelled (and gives an empty report).
// It has host.Runtime's Recovery shape.
func (rt *Runtime) Recovery(ctx context.Context) (RecoveryReport, error) {
	if ctx.Err() != nil {
		return RecoveryReport{}, spec.Wrap(spec.CodeCancelled, "runtime", ctx.Err(), "reading the recovery report")
	}
	return rt.c.Recovery(), nil
}

// Unanswered lists the asks (a launch, a rollback) that a sandbox still
// held when it was removed: each was answered with an internal error then,
// instead of when its work ended. Every ask must be answered or refused on
// its own: a non-empty list is a runtime defect (the tests and the drill
// fail on one).
func (rt *Runtime) Unanswered() []string { return rt.c.Unanswered() }

// History returns a sandbox's journaled events and its processes', in time
// order. It reads the journal, so it survives restarts.
func (rt *Runtime) History(ctx context.Context, sandboxID string) ([]HistoryEvent, error) {
	return rt.c.History(ctx, sandboxID)
}

// Follow calls fn with a sandbox's history (its events and its processes',
// in time order), then with each of their events as it is committed, until
// ctx ends (nil) or fn or the journal fails. With sandboxID "" it follows
// every entity's new events (a tail) and gives no past. Nothing is missed
// between the past and the live events, and nothing is given twice. A
// follower that falls far behind ends with a journal error (ErrLagged).
func (rt *Runtime) Follow(ctx context.Context, sandboxID string, fn func(HistoryEvent) error) error {
	return rt.c.Follow(ctx, sandboxID, fn)
}

// ReplaySandbox folds a sandbox's stream of this runtime's journal up to
// sequence at (0: to its end) and returns its state there: what the live
// actor held at that point.
func (rt *Runtime) ReplaySandbox(ctx context.Context, id string, at uint64) (lifecycle.Sandbox, error) {
	return rt.c.ReplaySandbox(ctx, id, at)
}

// ReplayProcess is ReplaySandbox for a process's stream.
func (rt *Runtime) ReplayProcess(ctx context.Context, id string, at uint64) (lifecycle.Process, error) {
	return rt.c.ReplayProcess(ctx, id, at)
}

// Live lists the journal's live index.
func (rt *Runtime) Live(ctx context.Context) ([]host.LiveEntity, error) { return rt.c.Live(ctx) }

// Verify checks the runtime's whole journal while it appends: every record
// decodes, sequences have no gap, the indexes agree, every stream folds.
func (rt *Runtime) Verify(ctx context.Context) error { return rt.c.Verify(ctx) }

// Export writes the runtime's whole journal as JSON lines: a consistent
// snapshot, taken while appends go on.
func (rt *Runtime) Export(ctx context.Context, w io.Writer) error { return rt.c.Export(ctx, w) }

// Logs reads the recorded output of a process of this runtime's journal,
// running or ended (see ReadOutput). A process that runs, recorded, but
// whose read loop has not yet made its recording has no output yet: an
// empty, incomplete summary, not not_found. It is rt.Host().Logs.
func (rt *Runtime) Logs(ctx context.Context, id string, fn func(OutputChunk) error) (OutputSummary, error) {
	return rt.c.Host().Logs(ctx, id, fn)
}

// Egress returns a sandbox's recorded egress decisions, oldest first
// (bounded: recorder.MaxDecisionBytes per file, the newest two files). A
// sandbox with none, or not an allowlist sandbox, gives none (nil). ctx
// is only checked: a ctx already done fails cancelled. It has
// host.Runtime's Egress shape.
func (rt *Runtime) Egress(ctx context.Context, id string) ([]EgressDecision, error) {
	if ctx.Err() != nil {
		return nil, spec.Wrap(spec.CodeCancelled, "runtime", ctx.Err(), "reading the egress decisions of sandbox %s", id)
	}
	var out []EgressDecision
	err := rt.c.Egress(id, func(d EgressDecision) error { out = append(out, d); return nil })
	return out, err
}

// Changes says what a process of this runtime's journal did under
// /workspace, as journaled with its exit (see host.ProcessChanges):
// conflict while the process has not ended, not_found for an unknown
// process. It is rt.Host().Changes.
func (rt *Runtime) Changes(ctx context.Context, processID string) (host.ProcessChanges, error) {
	return rt.c.Host().Changes(ctx, processID)
}

// Usage is the usage ledger of the sandboxes q picks (see host.Usage): a
// running sandbox's workload sampled for the answer, the rest as
// journaled, so it holds across restarts. It is rt.Host().Usage.
func (rt *Runtime) Usage(ctx context.Context, q host.UsageQuery) (host.Usage, error) {
	return rt.c.Host().Usage(ctx, q)
}

// Doctor checks the runtime's Docker daemon against the runtime's profile
// and returns every check, as the package-level Doctor does for a named
// profile. The error is non-nil only when the daemon could not be asked. It
// is rt.Host().Doctor.
func (rt *Runtime) Doctor(ctx context.Context) (profile.Report, error) {
	return rt.c.Host().Doctor(ctx)
}

// Retain deletes the terminal entities of the journal whose end is older
// than olderThan (journal.Journal.Retain), then the recordings and egress
// decisions of the processes and sandboxes no longer in the journal. It
// returns how many entities were deleted.
func (rt *Runtime) Retain(ctx context.Context, olderThan time.Duration) (int, error) {
	return rt.c.Retain(ctx, olderThan)
}

// Pools lists the runtime's warm pools: their size, what is ready and
// being made, and the claims served warm and cold since Open.
func (rt *Runtime) Pools(ctx context.Context) ([]PoolInfo, error) { return rt.c.Pools(ctx) }

// ResizePool sets a pool's size. Growing starts refills; shrinking removes
// ready sandboxes past the new size. Size 0 empties it.
func (rt *Runtime) ResizePool(ctx context.Context, name string, size int) error {
	return rt.c.ResizePool(ctx, name, size)
}

// Checkpoints lists the store's checkpoints, oldest first: a sandbox's, or
// every one ("").
func (rt *Runtime) Checkpoints(ctx context.Context, sandboxID string) ([]CheckpointInfo, error) {
	return rt.c.Checkpoints(ctx, sandboxID)
}

// RemoveCheckpoint deletes a checkpoint from the store (content no other
// checkpoint shares goes with it). The journal keeps its history.
func (rt *Runtime) RemoveCheckpoint(ctx context.Context, id string) error {
	return rt.c.RemoveCheckpoint(ctx, id)
}

// Metrics returns this runtime's Prometheus metrics (package metrics),
// counted from the first call on: serve them with Metrics().Handler(), or
// gather Registry() with a host's own.
func (rt *Runtime) Metrics() (*metrics.Metrics, error) { return rt.c.Metrics() }

// Host returns the runtime as a host.Runtime: the interface the served
// runtime's client (client.Dial) also implements, so a Go host switches
// between embedded and served with one line. Closing it closes rt.
func (rt *Runtime) Host() host.Runtime { return rt.c.Host() }

// Close stops the actor system and releases the journal, leaving kept
// sandboxes (and pooled ones) running: a later runtime finds them in the
// journal. Processes still running lose their attachment.
func (rt *Runtime) Close() error { return rt.c.Close() }

// Shutdown stops every sandbox of this runtime (exited, resources kept;
// one-shot and pooled sandboxes are removed), then closes the runtime.
func (rt *Runtime) Shutdown(ctx context.Context) error { return rt.c.Shutdown(ctx) }
