package stockade

import (
	"context"
	"io"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/core"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// Sandbox is a sandbox made or recovered by this runtime.
type Sandbox struct{ s *core.Sandbox }

func sandboxOf(s *core.Sandbox, err error) (*Sandbox, error) {
	if s == nil {
		return nil, err
	}
	return &Sandbox{s}, err
}

// ID is the sandbox's id.
func (s *Sandbox) ID() string { return s.s.ID() }

// State returns the sandbox's folded state: from its actor while it lives,
// from the journal once it is removed. A sandbox out of service returns its
// journaled state with the unreconciled error; no zero state is ever
// returned without an error.
func (s *Sandbox) State(ctx context.Context) (lifecycle.Sandbox, error) { return s.s.State(ctx) }

// Start runs a process in the sandbox. It returns once the process runs
// (its start journaled), with its streams; every piped stream must be read.
// A Stdout or Stderr left "" is a pipe.
func (s *Sandbox) Start(ctx context.Context, p spec.Process) (*Process, error) {
	h, err := s.s.Start(ctx, p)
	return processOf(s.s.Runtime(), h, err)
}

// Files is the sandbox's /workspace as files: write (parents made), read,
// list, stat, make directories, remove, rename (host.Files says how).
func (s *Sandbox) Files() host.Files { return core.HostSandbox(s.s).Files() }

// Stop stops the sandbox: admission closes, every process ends with reason
// sandbox_stopped, the workload stops. Resources are kept (the workspace can
// still be read). It returns once the sandbox is exited.
func (s *Sandbox) Stop(ctx context.Context) error { return s.s.Stop(ctx) }

// Remove stops the sandbox if needed and deletes every resource. It returns
// once the removal is journaled.
func (s *Sandbox) Remove(ctx context.Context) error { return s.s.Remove(ctx) }

// Put extracts a tar stream into a workspace directory (dir relative to
// /workspace, or absolute under it: spec.WorkspaceRel) through the export
// container; entries are owned by the sandbox's user. The whole archive is
// checked before anything is extracted: an entry, symlink or hardlink that
// would resolve outside dir fails the put with invalid_argument and nothing
// of it lands. Put returns when ctx ends, even while tar's Read blocks.
func (s *Sandbox) Put(ctx context.Context, dir string, tar io.Reader) error {
	return s.s.Put(ctx, dir, tar)
}

// Get returns a tar stream of a workspace path (the same rule). With pause, a running
// workload is paused for a consistent copy until the stream is closed;
// otherwise live reports that the copy was taken from a live filesystem. The
// caller closes the stream; ctx bounds its whole life.
func (s *Sandbox) Get(ctx context.Context, path string, pause bool) (rc io.ReadCloser, live bool, err error) {
	return s.s.Get(ctx, path, pause)
}

// SetEgress replaces an allowlist sandbox's egress rules while it runs, no
// restart: the change is journaled (sandbox.egress_changed), then the
// sandbox's proxy applies it, and SetEgress returns once the proxy holds
// the new rules. Rules are checked first (invalid_argument; nothing is
// journaled). A sandbox of another network kind is refused: the kind is
// fixed at create. If the proxy cannot be reached now, the error says so;
// the journaled rules are applied when its link is back.
func (s *Sandbox) SetEgress(ctx context.Context, rules []spec.EgressRule) error {
	return s.s.SetEgress(ctx, rules)
}

// SetSecrets gives the values of the sandbox's secret variables
// (spec.SecretVar) again: a runtime opened after they were given does not
// have them (they are never journaled), and refuses the sandbox's processes
// (conflict, naming each) until it does. Every one of the sandbox's and no
// other; a Ref, when given, must be the journaled one.
func (s *Sandbox) SetSecrets(ctx context.Context, secrets []spec.SecretVar) error {
	return s.s.SetSecrets(ctx, secrets)
}

// Checkpoint captures /workspace/work into the runtime's content-addressed
// checkpoint store with the workload frozen for the copy (a pause and
// unpause journaled around it), with what a restart needs (env, dir,
// image), and journals sandbox.checkpointed. name is optional, unique
// among the sandbox's checkpoints ([a-z0-9][a-z0-9._-]{0,62}). A full
// store fails resource_exhausted and keeps nothing of this one.
func (s *Sandbox) Checkpoint(ctx context.Context, name string) (CheckpointInfo, error) {
	return s.s.Checkpoint(ctx, name)
}

// Rollback restores a checkpoint (its id, or a name among this sandbox's
// checkpoints) into /workspace/work. Write-ahead (lifecycle.RollingBack):
// admission closes, the sandbox's processes are stopped (each journaled),
// the checkpoint is written beside the workspace and the two are exchanged
// in one rename, then the fact is journaled. A crash at any point leaves
// the old workspace or the new one, never a mix; recovery journals which.
func (s *Sandbox) Rollback(ctx context.Context, ck string) error { return s.s.Rollback(ctx, ck) }
