package dockerio

import (
	"context"
	"path"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/stockade/stockade/spec"
)

// Workspaces changes a sandbox's workspace as a whole: a rollback writes a
// checkpoint beside /workspace/work and exchanges the two in one rename
// (rollback.go says how each step is kept from the sandbox's user).
type Workspaces interface {
	// SweepWorkload kills every process of the sandbox's user but the
	// container's own (its init and keeper) and proves none is left; it
	// returns how many it ended. The warden is among them.
	SweepWorkload(ctx context.Context, sb Sandbox) (int, error)
	// StageRollback makes /workspace/<staging> (the sandbox user's, 0700)
	// holding the rollback's marker: an empty directory owned by root,
	// which the sandbox's user can neither make nor move (MarkerProof).
	StageRollback(ctx context.Context, sb Sandbox, staging, marker string) error
	// ExchangeWorkspace checks the workspace (root-owned 0755, the
	// warden's directory and binary root's, no links where directories
	// belong) and exchanges
	// /workspace/work and /workspace/<staging> atomically (renameat2
	// RENAME_EXCHANGE), as uid 0 in a one-off container of its own: no
	// uid-0 code runs in the workload or from the workspace volume.
	ExchangeWorkspace(ctx context.Context, sb Sandbox, staging string) error
	// MarkerProof reports whether /workspace/<dir>/<marker> is the
	// rollback's marker as StageRollback made it (a root-owned empty
	// directory with the marker's own mtime), read through the export
	// container: the proof of an exchange the sandbox's user cannot forge.
	MarkerProof(ctx context.Context, sb Sandbox, dir, marker string) (bool, error)
	// WorkspaceHas reports whether /workspace/<p> exists, read through the
	// export container (no exec, the workload may be stopped).
	WorkspaceHas(ctx context.Context, sb Sandbox, p string) (bool, error)
	// EmptyWorkspaceDir removes everything under /workspace/<dir> (the
	// directory stays: its root-owned parent keeps it) and then each of
	// the files named (paths under /workspace), as the sandbox's user,
	// never following a symlink.
	EmptyWorkspaceDir(ctx context.Context, sb Sandbox, dir string, files ...string) error
}

// stagingName checks a staging directory's name: one plain entry of
// /workspace, never the work directory or the warden's.
func stagingName(name string) error {
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." ||
		name == path.Base(WorkDir) || name == path.Base(WardenDir) || len(name) > 128 || !strings.HasPrefix(name, ".") {
		return spec.Errorf(spec.CodeInvalidArgument, "dockerio.workspace", "%q is not a staging directory name (a hidden entry of %s)", name, WorkspaceDir)
	}
	return nil
}

// WorkspaceHas: see Workspaces.
func (a *Adapter) WorkspaceHas(ctx context.Context, sb Sandbox, p string) (bool, error) {
	dst, err := archivePath(p)
	if err != nil {
		return false, err
	}
	cli, err := a.ready(ctx)
	if err != nil {
		return false, err
	}
	a.seeds.settle(ctx, sb, false)
	if _, err := cli.ContainerStatPath(ctx, sb.Export, dst); err != nil {
		if errdefs.IsNotFound(err) {
			return false, nil
		}
		return false, translate(err, "dockerio.workspace", "looking for %s through export container %s", dst, sb.Export)
	}
	return true, nil
}

// EmptyWorkspaceDir: see Workspaces.
func (a *Adapter) EmptyWorkspaceDir(ctx context.Context, sb Sandbox, dir string, files ...string) error {
	if err := stagingName(dir); err != nil {
		return err
	}
	argv := []string{WardenPath, "empty", WorkspaceDir + "/" + dir}
	for _, f := range files {
		p, err := archivePath(f)
		if err != nil {
			return err
		}
		argv = append(argv, p)
	}
	if !a.HasWarden() {
		return spec.Errorf(spec.CodeUnsupported, "dockerio.workspace", "emptying a workspace directory needs the warden binary")
	}
	cli, err := a.ready(ctx)
	if err != nil {
		return err
	}
	code, _, errOut, err := a.run(ctx, cli, sb, argv...)
	if err != nil {
		return err
	}
	if code != 0 {
		return spec.Errorf(spec.CodeEngine, "dockerio.workspace", "emptying %s in sandbox %s: exit %d: %s", dir, sb.ID, code, strings.TrimSpace(errOut))
	}
	return nil
}
