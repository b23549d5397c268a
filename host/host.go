// Package host is the API a Go agent host programs against, whether the
// runtime is embedded (stockade.Open, then Runtime.Host) or served
// (client.Dial): the Runtime, Sandbox and Process interfaces and the
// request and response types both sides share. It imports only spec/,
// lifecycle/, egress/ (for its decision type) and profile/ (the doctor's
// report), so a client links neither the actor system nor the Docker
// client.
//
// Inspector, the journal-reading half of Runtime (History, ReplaySandbox,
// ReplayProcess, Live, Verify, Export), is also answered by package inspect
// on a journal file no runtime holds: a tool written against it reads a
// served runtime, an embedded one or a file alike.
//
// Switching is one line:
//
//	var rt host.Runtime = embedded.Host() // or: rt, err := client.Dial(socket)
//
// Caveats shared by both: every piped output stream must be read (stdout
// and stderr share one connection), and a Process's streams follow the io
// contracts (the caller closes what it is handed).
package host

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"syscall"
	"time"

	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/profile"
	"github.com/stockade/stockade/spec"
)

// Runtime is an open stockade runtime: one journal, one Docker daemon.
type Runtime interface {
	// CreateSandbox makes a sandbox and starts its workload; it returns once
	// the sandbox is started and verified, or with the error that stopped it.
	CreateSandbox(ctx context.Context, s spec.Sandbox) (Sandbox, error)
	// Sandbox returns a live sandbox by id (not_found when there is none).
	Sandbox(ctx context.Context, id string) (Sandbox, error)
	// Sandboxes lists the live sandboxes, sorted by reservation time.
	Sandboxes(ctx context.Context) ([]SandboxInfo, error)
	// Inspector reads the runtime's journal: History, the replays, the
	// live index, Verify and Export.
	Inspector
	// Recovery returns the report of the recovery the runtime's Open ran.
	Recovery(ctx context.Context) (RecoveryReport, error)
	// Egress returns a sandbox's recorded egress decisions, oldest first.
	Egress(ctx context.Context, sandboxID string) ([]egress.Decision, error)
	// Process returns a journaled process by id, running or ended, from
	// any runtime of the journal, after any restart (not_found when the
	// journal has none). It has no streams (nil Stdout, Stderr and Stdin:
	// they are its starter's): Attach has its output, from any offset.
	// Wait gives its end from the journal; Signal and Stop reach it while
	// it runs.
	Process(ctx context.Context, id string) (Process, error)
	// Logs hands fn a process's recorded output in the order it was
	// written (stdout and stderr interleaved, gaps where the recording
	// does not hold it), then says how the recording ends.
	Logs(ctx context.Context, processID string, fn func(OutputChunk) error) (OutputSummary, error)
	// Follow hands fn a sandbox's history, then each of its events (its
	// processes' included) as it is committed, until ctx ends (nil) or fn
	// fails; "" follows every entity's new events and gives no past.
	Follow(ctx context.Context, sandboxID string, fn func(HistoryEvent) error) error
	// Pools lists the runtime's warm pools (none unless configured when it
	// was opened or started), in the order they were given.
	Pools(ctx context.Context) ([]PoolInfo, error)
	// ResizePool sets a pool's size: growing starts refills, shrinking
	// removes ready sandboxes past it; not_found for a pool the runtime
	// was not opened (or `stockade serve` started) with: pools are
	// configured there (stockade.Options.Pools, serve --pool).
	ResizePool(ctx context.Context, name string, size int) error
	// Checkpoints lists the checkpoints in the runtime's store, oldest
	// first: a sandbox's (its id), or all ("").
	Checkpoints(ctx context.Context, sandboxID string) ([]CheckpointInfo, error)
	// Changes says what a process did under /workspace, as journaled with
	// its exit: the typed list (created, modified, deleted, renamed,
	// omitted past the bound, incomplete and why) and, for each small
	// text file the recorder kept, a unified diff (else a line of what is
	// known). conflict while the process has not ended (its changes come
	// with its exit); not_found for an unknown process.
	Changes(ctx context.Context, processID string) (ProcessChanges, error)
	// Usage is the usage ledger of the sandboxes q picks (UsageQuery):
	// each one's workload as its cgroup counted it (a running one's
	// sampled for the answer), each process's use as journaled with its
	// end, output and egress, and their sum. It reads the journal, so it
	// holds across restarts; not_found for a sandbox id it does not hold.
	Usage(ctx context.Context, q UsageQuery) (Usage, error)
	// RemoveCheckpoint deletes a checkpoint from the store (the content
	// no other checkpoint shares goes with it); not_found when unknown.
	RemoveCheckpoint(ctx context.Context, id string) error
	// Doctor checks the runtime's Docker daemon against its profile and
	// returns every check (the report's Err says what fails). The error is
	// only for a daemon that could not be asked.
	Doctor(ctx context.Context) (profile.Report, error)
	// Shutdown stops every sandbox of the runtime (a kept one exits with
	// its resources kept; a one-shot one is removed), removes the warm
	// pools' sandboxes, and closes the runtime. Served, the server does so
	// and stops serving; the client is then closed too. Close, by
	// contrast, leaves every sandbox and pooled sandbox running for the
	// next runtime.
	Shutdown(ctx context.Context) error
	// Close releases the runtime (embedded) or the connection (served);
	// kept sandboxes, running processes and pooled sandboxes stay up
	// either way (Shutdown stops them).
	Close() error
}

// Inspector reads a journal: the runtime's own (embedded: Runtime's
// methods; served: the client) or a file no runtime holds (inspect.Open).
// Every implementation gives the same answers for the same journal.
type Inspector interface {
	// History returns a sandbox's journaled events and its processes', in
	// time order; not_found when the journal has no such sandbox.
	History(ctx context.Context, sandboxID string) ([]HistoryEvent, error)
	// ReplaySandbox folds a sandbox's stream up to sequence at (0: to its
	// end) and returns its state there.
	ReplaySandbox(ctx context.Context, id string, at uint64) (lifecycle.Sandbox, error)
	// ReplayProcess is ReplaySandbox for a process's stream.
	ReplayProcess(ctx context.Context, id string, at uint64) (lifecycle.Process, error)
	// Live lists the journal's live index.
	Live(ctx context.Context) ([]LiveEntity, error)
	// Verify checks the whole journal: every record decodes, sequences
	// have no gap, the indexes agree and every stream folds.
	Verify(ctx context.Context) error
	// Export writes the whole journal as JSON lines, a consistent snapshot.
	Export(ctx context.Context, w io.Writer) error
}

// Sandbox is a live sandbox.
type Sandbox interface {
	ID() string
	// State returns the sandbox's folded state.
	State(ctx context.Context) (lifecycle.Sandbox, error)
	// Start runs a process; it returns once the process runs, with its
	// streams. Every piped stream must be read.
	Start(ctx context.Context, p spec.Process) (Process, error)
	// Stop stops the sandbox (resources kept); it returns once it exited.
	Stop(ctx context.Context) error
	// Remove stops the sandbox if needed and deletes every resource.
	Remove(ctx context.Context) error
	// Put extracts a tar stream into a workspace directory: dir relative
	// to /workspace or absolute under it (spec.WorkspaceRel).
	Put(ctx context.Context, dir string, tar io.Reader) error
	// Get returns a tar stream of a workspace path (the same rule); live
	// says the copy was
	// taken from a running workload's filesystem. The caller closes it.
	Get(ctx context.Context, path string, pause bool) (tar io.ReadCloser, live bool, err error)
	// SetEgress replaces an allowlist sandbox's egress rules while it
	// runs: journaled, then applied by its proxy, no restart.
	SetEgress(ctx context.Context, rules []spec.EgressRule) error
	// SetSecrets gives the values of the sandbox's secret variables
	// (spec.SecretVar) again: a runtime opened after they were given does
	// not have them (they are never journaled) and refuses its processes
	// until it does. Every one of the sandbox's, no other; a Ref, when
	// given, must be the journaled one.
	SetSecrets(ctx context.Context, secrets []spec.SecretVar) error
	// Checkpoint captures /workspace/work with the workload frozen into
	// the runtime's content-addressed checkpoint store, with what a
	// restart needs (env, dir, image), and journals it. name is optional
	// and unique among the sandbox's checkpoints.
	Checkpoint(ctx context.Context, name string) (CheckpointInfo, error)
	// Files is the sandbox's /workspace as files: write, read, list,
	// stat, make directories, remove, rename (see Files).
	Files() Files
	// Rollback restores a checkpoint (its id, or a name of this
	// sandbox's) into /workspace/work: the sandbox's processes are stopped
	// first, and the workspace is exchanged whole (see
	// lifecycle.RollingBack).
	Rollback(ctx context.Context, checkpoint string) error
}

// CheckpointInfo describes a checkpoint in the store.
type CheckpointInfo struct {
	ID      string    `json:"id"`
	Name    string    `json:"name,omitempty"`
	Sandbox string    `json:"sandbox"`
	Image   string    `json:"image"`
	Created time.Time `json:"created"`
	// Files counts the entries (directories and links included); Bytes
	// the files' content.
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
	// Env and Dir are the sandbox's process defaults when it was taken.
	Env []string `json:"env,omitempty"`
	Dir string   `json:"dir,omitempty"`
	// Skipped names the entries not kept (FIFOs, devices, relative links
	// climbing out of /workspace), each with why.
	Skipped []string `json:"skipped,omitempty"`
}

// Process is a process running in a sandbox.
type Process interface {
	ID() string
	// Stdout is the piped stdout, or nil when discarded.
	Stdout() io.ReadCloser
	// Stderr is the piped stderr, or nil when discarded.
	Stderr() io.ReadCloser
	// Stdin is the process's stdin, or nil when not asked for. Close
	// half-closes it.
	Stdin() io.WriteCloser
	// Done is closed when the process has exited.
	Done() <-chan struct{}
	// Wait waits for the exit; err is the result's typed error (nil for a
	// plain exit, whatever its code) or the context's.
	Wait(ctx context.Context) (spec.Result, error)
	// Signal sends sig to the process's group.
	Signal(ctx context.Context, sig syscall.Signal) error
	// Stop stops the process's group: TERM, then KILL after the grace.
	Stop(ctx context.Context) error
	// Attach hands fn the process's output from o.From on, as the
	// runtime records it: what is recorded first, then each chunk as it
	// is written, every byte once, stdout and stderr interleaved in the
	// order the process wrote them, each chunk with its stream and offset
	// (a gap where the recording does not hold the bytes: beyond its
	// bounds, or lost). It returns when the process has ended and its
	// output is all handed out, with the recording's summary and the
	// result (a process that ended badly, a timeout say, has its typed
	// error in Result.Err: the attach itself went well); err is why the
	// attach ended first: ctx's end (cancelled), fn's error, the
	// runtime's close or its sandbox taken out of service.
	//
	// It works for any process the journal holds, running or ended, from
	// any runtime of the journal: after a crash, a new host attaches from
	// the offset its last chunk ended at and misses nothing within the
	// recording's bounds (spec.Record: by default the first 64 KiB and the
	// last 1 MiB, up to 256 MiB each; what fell between them is a gap
	// chunk). An offset past the output's end hands out nothing: for a
	// running process Attach waits for the output to reach it. A process
	// started with recording off has no output to attach to
	// (unsupported). Its own piped streams are apart from any attach: a
	// pipe nobody reads still stops the process once full, so start it
	// with Stdout and Stderr spec.Discard to only attach. See
	// AttachStreams for two readers instead of fn.
	Attach(ctx context.Context, o AttachOptions, fn func(OutputChunk) error) (Attached, error)
	// Resize sets the size of the process's terminal: invalid_argument for
	// a process started without TTY or a zero dimension. Only a sandbox
	// with a warden has terminals (elsewhere a TTY start is refused with
	// unsupported). Served, it travels on the process's exec stream.
	Resize(ctx context.Context, rows, cols uint16) error
}

// AttachOptions says where Process.Attach starts.
type AttachOptions struct {
	// From is the output offset (stdout and stderr together, in the order
	// written) to start at: 0 for the beginning, or where the last chunk
	// a caller saw ended (its Offset plus its length or Gap).
	From int64
}

// Attached is how Process.Attach ended: the recording's summary (what was
// handed out, and whether the recording is complete) and the process's
// result.
type Attached struct {
	Output OutputSummary `json:"output"`
	Result spec.Result   `json:"result"`
}

// PoolSpec configures a warm pool: Size sandboxes made from Sandbox ahead
// of demand, each claimed by a CreateSandbox whose spec has the same pool
// key (image, limits, network kind, user, datasets).
type PoolSpec struct {
	Name    string
	Sandbox spec.Sandbox
	Size    int
}

// PoolInfo is one line of Pools.
type PoolInfo struct {
	Name  string `json:"name"`
	Image string `json:"image"`
	// Size is the target; Ready the pooled sandboxes waiting for a claim;
	// Filling the creates under way.
	Size    int `json:"size"`
	Ready   int `json:"ready"`
	Filling int `json:"filling"`
	// Warm counts the creates served from the pool, Cold the ones that
	// matched it and found it empty, since the runtime opened.
	Warm uint64 `json:"warm"`
	Cold uint64 `json:"cold"`
	// Failures counts refills that failed; LastError is the latest.
	Failures  uint64 `json:"failures,omitempty"`
	LastError string `json:"last_error,omitempty"`
}

// SandboxInfo is one line of Sandboxes.
type SandboxInfo struct {
	ID        string          `json:"id"`
	Phase     lifecycle.Phase `json:"phase"`
	Image     string          `json:"image"`
	Lifetime  spec.Lifetime   `json:"lifetime"`
	Adopted   bool            `json:"adopted,omitempty"`
	Processes []string        `json:"processes,omitempty"`
	Reserved  time.Time       `json:"reserved"`
	// Pool is the warm pool the sandbox was made for (its Phase is
	// "pooled" until a claim); Labels are the caller's.
	Pool   string            `json:"pool,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	// Claimed: made for a pool and handed to a caller. A sandbox with a
	// Pool and not Claimed is the runtime's (pooled, or being made or
	// removed for its pool).
	Claimed bool `json:"claimed,omitempty"`
	// Unreconciled: recovery could not observe it or fold its journal, or
	// its actor failed; it is refused for work. Why says which.
	Unreconciled bool   `json:"unreconciled,omitempty"`
	Why          string `json:"why,omitempty"`
}

// HistoryEvent is one journaled event of a sandbox or one of its processes.
type HistoryEvent struct {
	// Kind is "sandbox" or "process".
	Kind string    `json:"kind"`
	ID   string    `json:"id"`
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	Type string    `json:"type"`
	// Payload is the event's JSON.
	Payload json.RawMessage `json:"payload,omitempty"`
}

// RecoveryReport says what the recovery run by Open found and did (or,
// planned, would do). The embedded runtime, its planner and the client all
// give this one type.
type RecoveryReport struct {
	// Sandboxes lists each live sandbox found, its decision and where it
	// settled.
	Sandboxes []RecoveredSandbox `json:"sandboxes"`
	// Processes counts the live processes found.
	Processes int `json:"processes"`
	// Orphans lists the resources removed for carrying this owner's label
	// but no live sandbox of the journal.
	Orphans  []Orphan      `json:"orphans,omitempty"`
	Duration time.Duration `json:"duration"`
}

// Orphan is a Docker resource recovery removed (or would remove). Served,
// only Kind and Name travel (the wire carries String()).
type Orphan struct {
	// Kind is "container", "network" or "volume".
	Kind string `json:"kind"`
	// ID is the container or network id, or the volume's name.
	ID      string `json:"id,omitempty"`
	Name    string `json:"name"`
	Role    string `json:"role,omitempty"`
	Sandbox string `json:"sandbox,omitempty"`
}

// String is "<kind> <name>", the orphan as the wire carries it.
func (o Orphan) String() string { return o.Kind + " " + o.Name }

// ParseOrphan reads an orphan from its String form.
func ParseOrphan(s string) Orphan {
	kind, name, _ := strings.Cut(s, " ")
	return Orphan{Kind: kind, Name: name}
}

// RecoveredSandbox is one line of a RecoveryReport.
type RecoveredSandbox struct {
	ID   string          `json:"id"`
	From lifecycle.Phase `json:"from"`
	// Decision is the recovery table's decision ("re-adopt", "stop and remove",
	// ...), or "unreconciled" for a sandbox recovery could not observe.
	Decision string `json:"decision"`
	// Observed says what recovery saw that led to the decision.
	Observed string          `json:"observed"`
	Settled  lifecycle.Phase `json:"settled,omitempty"`
	// Error is why the decision could not be carried out, if it could not.
	Error string `json:"error,omitempty"`
}

// LiveEntity is one entry of the journal's live index.
type LiveEntity struct {
	Kind    string    `json:"kind"`
	ID      string    `json:"id"`
	Parent  string    `json:"parent,omitempty"` // a process's sandbox
	Last    string    `json:"last"`             // the type of its last event
	Seq     uint64    `json:"seq"`              // the sequence of its last event
	Updated time.Time `json:"updated"`
}

// OutputSummary says how a process's recording ends.
type OutputSummary struct {
	// Complete: the output ended and was synced before the exit was
	// journaled; only the gaps (bounds, write errors) are missing.
	Complete bool `json:"complete"`
	// Torn: the recording ends inside a record (a crash, or a process
	// still being recorded): without Complete, later output may be missing.
	Torn bool `json:"torn"`
	// StdoutBytes and StderrBytes are the output's totals when Complete,
	// else what was recorded up to the recording's end.
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`
	// Recorded is the bytes handed out as chunks; Missing those in gaps;
	// Dropped those a write error kept out.
	Recorded int64 `json:"recorded"`
	Missing  int64 `json:"missing"`
	Dropped  int64 `json:"dropped"`
	// Head and Tail are the bounds the recording was made with.
	Head int64 `json:"head"`
	Tail int64 `json:"tail"`
}

// OutputChunk is a piece of a process's recorded output, or a gap in it.
type OutputChunk struct {
	// Stream is "stdout" or "stderr"; "" for a gap.
	Stream string `json:"stream,omitempty"`
	// Offset is where it starts in the process's output (both streams
	// together, in arrival order).
	Offset int64  `json:"offset"`
	Data   []byte `json:"data,omitempty"`
	// Gap is, for a gap, how many bytes are not in the recording there.
	Gap int64 `json:"gap,omitempty"`
	// Lost: the gap's bytes are known lost (a write error, or output the
	// in-sandbox warden had dropped: the journal's process.output_gap
	// says why), not merely beyond the recording's bounds.
	Lost bool `json:"lost,omitempty"`
}

// ProcessChanges is what one process did under /workspace (Runtime.Changes;
// `stockade diff --json` prints it).
type ProcessChanges struct {
	Process string `json:"process"`
	Sandbox string `json:"sandbox"`
	// Changes is the journaled list; nil for a journal from before
	// changes were tracked.
	Changes *lifecycle.Changes `json:"changes"`
	// Diffs has one entry per changed file whose text, or what is known
	// of it, says more than its line in Changes, in Changes' order.
	Diffs []FileDiff `json:"diffs,omitempty"`
}

// FileDiff is one changed file: Unified, a unified diff of its text
// before and after (kept for small text files), or Summary, what is known
// of it (binary or large, a size and a hash).
type FileDiff struct {
	Path    string `json:"path"`
	Unified string `json:"unified,omitempty"`
	Summary string `json:"summary,omitempty"`
}

// Streams is an attach as two readers, one per stream (AttachStreams).
type Streams struct {
	// Stdout and Stderr hand out the process's output from the offset on;
	// both must be read or closed (one attach writes them in turn). A
	// closed one's bytes are dropped. They end at the process's end (EOF)
	// or with the attach's error.
	Stdout, Stderr io.ReadCloser

	done chan struct{}
	end  Attached
	err  error
}

// Wait waits for the attach to end and returns what Process.Attach
// returned: gaps in the output (bytes the recording does not hold) are
// counted in its Output.Missing, not written to either reader.
func (s *Streams) Wait() (Attached, error) {
	<-s.done
	return s.end, s.err
}

// AttachStreams is Process.Attach as two readers: a convenience for a
// caller that wants stdout and stderr apart (their interleaving is lost;
// Attach keeps it). ctx's end ends the attach and both readers.
func AttachStreams(ctx context.Context, p Process, o AttachOptions) *Streams {
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	s := &Streams{Stdout: outR, Stderr: errR, done: make(chan struct{})}
	go func() {
		// A reader that is never read would hold the attach for ever:
		// ctx's end closes both, and the write blocked on one returns.
		select {
		case <-ctx.Done():
			_ = outR.CloseWithError(ctx.Err()) // always nil
			_ = errR.CloseWithError(ctx.Err()) // always nil
		case <-s.done:
		}
	}()
	go func() {
		defer close(s.done)
		var outGone, errGone bool
		s.end, s.err = p.Attach(ctx, o, func(c OutputChunk) error {
			w, gone := outW, &outGone
			switch c.Stream {
			case "stdout":
			case "stderr":
				w, gone = errW, &errGone
			default:
				return nil // a gap: counted in the summary
			}
			if !*gone {
				if _, err := w.Write(c.Data); err != nil {
					*gone = true // the reader was closed: its bytes are dropped
				}
			}
			return nil
		})
		_ = outW.CloseWithError(s.err) // always nil
		_ = errW.CloseWithError(s.err) // always nil
	}()
	return s
}
