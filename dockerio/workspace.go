package dockerio

import (
	"context"
	"path"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/stockade/stockade/spec"
)

// Workspaces changes a sandbox's workspace as a whole: a rollback writes a
// checkpoint beside /workspace/work (PutArchive into a staging directory)
// and exchanges the two in one rename. The sandbox's user cannot rename an
// entry of the root-owned /workspace, so the exchange is a one-off exec of
// the delivered warden binary as uid 0, which holds no capability (the
// workload's are all dropped) and can do nothing but what root's ownership
// of /workspace allows; everything else runs as the sandbox's user.
type Workspaces interface {
	// ExchangeWorkspace exchanges /workspace/work and /workspace/<staging>
	// atomically (renameat2 RENAME_EXCHANGE): afterwards each holds what
	// the other held, and no instant shows a mix or neither.
	ExchangeWorkspace(ctx context.Context, sb Sandbox, staging string) error
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

// ExchangeWorkspace: see Workspaces.
func (a *Adapter) ExchangeWorkspace(ctx context.Context, sb Sandbox, staging string) error {
	if err := stagingName(staging); err != nil {
		return err
	}
	if !a.HasWarden() {
		return spec.Errorf(spec.CodeUnsupported, "dockerio.workspace", "exchanging a workspace needs the warden binary")
	}
	cli, err := a.ready(ctx)
	if err != nil {
		return err
	}
	if err := a.EnsureWarden(ctx, sb); err != nil {
		return err // the binary run as root must be ours
	}
	code, _, errOut, err := a.runAs(ctx, cli, sb, "0:0", WardenPath, "swap", WorkDir, WorkspaceDir+"/"+staging)
	if err != nil {
		return err
	}
	if code != 0 {
		return spec.Errorf(spec.CodeEngine, "dockerio.workspace", "exchanging %s and %s in sandbox %s: exit %d: %s", WorkDir, staging, sb.ID, code, strings.TrimSpace(errOut))
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
