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
	// KillWorkload kills the workload container (SIGKILL: the kernel
	// ends every process of its pid namespace, the container's own init
	// and keeper included, however a process left its group or whatever
	// it wrote into another) and returns once the daemon reports it not
	// running. The volume, networks and every other resource stay.
	KillWorkload(ctx context.Context, sb Sandbox) error
	// RestartWorkload starts a workload KillWorkload stopped and reads it
	// back running, exactly as made (its tmpfs mounts are fresh).
	RestartWorkload(ctx context.Context, sb Sandbox) error
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
	argv := []string{wardenPath, "empty", WorkspaceDir + "/" + dir}
	for _, f := range files {
		p, err := archivePath(f)
		if err != nil {
			return err
		}
		argv = append(argv, p)
	}
	_, err := a.runWarden(ctx, sb, "dockerio.workspace", "emptying "+dir, argv...)
	return err
}

// runWarden runs the delivered warden binary (argv[0]), read back as ours
// first, as the sandbox's user in one exec, for what (said in its errors),
// and returns its stdout;
// a non-zero exit is an engine error carrying its stderr.
func (a *Adapter) runWarden(ctx context.Context, sb Sandbox, op, what string, argv ...string) (string, error) {
	if !a.HasWarden() {
		return "", spec.Errorf(spec.CodeUnsupported, op, "%s needs the warden binary", what)
	}
	// What it says must be ours: read back (and written again) first.
	if err := a.EnsureWarden(ctx, sb); err != nil {
		return "", err
	}
	cli, err := a.ready(ctx)
	if err != nil {
		return "", err
	}
	code, out, errOut, err := a.run(ctx, cli, sb, argv...)
	if err != nil {
		return "", err
	}
	if code != 0 {
		return out, spec.Errorf(spec.CodeEngine, op, "%s in sandbox %s: exit %d: %s", what, sb.ID, code, strings.TrimSpace(errOut+" "+out))
	}
	return out, nil
}
