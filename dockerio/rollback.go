package dockerio

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/spec"
)

// A rollback runs as root twice: the daemon extracts the checkpoint into a
// staging directory beside /workspace/work, and a rename as uid 0
// exchanges the two (the sandbox's user cannot rename entries of the
// root-owned /workspace). A process of the sandbox may outlive the
// runtime's view of it (setsid, a double fork, a thread whose leader
// exited, code written into the container's own init or keeper through
// /proc/<pid>/mem) and race either step: so before them KillWorkload stops
// the workload container, which ends every process of its pid namespace
// (the kernel's proof that none is left), both steps run while it is
// stopped, and RestartWorkload starts it again and reads it back.
// ExchangeWorkspace runs its rename in a one-off container of its own,
// from a copy of the warden binary in that container's layer, after
// checking the workspace is as only root could have left it. The proof
// that the exchange happened is a marker the sandbox's user cannot make:
// a root-owned directory, which it can neither create nor move from one
// directory to another (moving a directory needs write permission on it),
// stamped with an mtime derived from its name (which only its owner could
// change), so neither a planted look-alike nor an earlier rollback's
// marker renamed passes for it. It is read while the workload is stopped,
// or before any process of the user's runs again.

// MarkerPrefix begins every rollback marker's name.
const MarkerPrefix = ".stockade-rollback-"

// exchangeBin is where the one-off container holds its copy of the warden.
const exchangeBin = "/.stockade-exchange"

// exchangeWait bounds the one-off container's run.
const exchangeWait = time.Minute

// MarkerTime is the mtime of the marker named marker: a function of the
// name alone, so recovery reads the same proof from the journal's intent.
func MarkerTime(marker string) time.Time {
	h := sha256.Sum256([]byte(marker))
	return time.Unix(1_000_000_000+int64(binary.BigEndian.Uint32(h[:4])%1_000_000_000), 0).UTC()
}

// markerName checks a marker's name: one plain entry with the prefix.
func markerName(marker string) error {
	rest, ok := strings.CutPrefix(marker, MarkerPrefix)
	if !ok || rest == "" || len(marker) > 128 || strings.ContainsAny(marker, "/\x00") {
		return spec.Errorf(spec.CodeInvalidArgument, "dockerio.workspace", "%q is not a rollback marker's name (%s…)", marker, MarkerPrefix)
	}
	return nil
}

// stagingTar is the staging directory (the sandbox user's, 0700) holding
// root's marker directory.
func stagingTar(staging, marker string, u spec.User) io.Reader {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	now := time.Now()
	// Writes to a bytes.Buffer do not fail; the headers are well formed.
	_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: staging + "/", Mode: 0o700, Uid: int(u.UID), Gid: int(u.GID), ModTime: now, Format: tar.FormatPAX})
	_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: staging + "/" + marker + "/", Mode: 0o755, ModTime: MarkerTime(marker), Format: tar.FormatPAX})
	_ = tw.Close()
	return &b
}

// KillWorkload: see Workspaces.
func (a *Adapter) KillWorkload(ctx context.Context, sb Sandbox) error {
	cli, err := a.ready(ctx)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, exchangeWait)
	defer cancel()
	// Waited for from before the kill: a quick exit is not missed.
	waitC, errC := cli.ContainerWait(wctx, sb.Workload, container.WaitConditionNotRunning)
	if err := cli.ContainerKill(ctx, sb.Workload, "KILL"); err != nil && !strings.Contains(strings.ToLower(err.Error()), "is not running") {
		return translate(err, "dockerio.workspace", "killing workload %s", sb.Workload)
	}
	select {
	case w := <-waitC:
		if w.Error != nil {
			return spec.Errorf(spec.CodeEngine, "dockerio.workspace", "waiting for workload %s to stop: %s", sb.Workload, w.Error.Message)
		}
	case err := <-errC:
		return translate(err, "dockerio.workspace", "waiting for workload %s to stop", sb.Workload)
	}
	c, err := cli.ContainerInspect(ctx, sb.Workload)
	if err != nil {
		return translate(err, "dockerio.workspace", "inspecting workload %s", sb.Workload)
	}
	if c.State != nil && c.State.Running {
		return spec.Errorf(spec.CodeEngine, "dockerio.workspace", "workload %s still runs after SIGKILL", sb.Workload)
	}
	return nil
}

// RestartWorkload: see Workspaces.
func (a *Adapter) RestartWorkload(ctx context.Context, sb Sandbox) error {
	cli, err := a.ready(ctx)
	if err != nil {
		return err
	}
	if err := startWorkload(ctx, cli, sb); err != nil {
		return err
	}
	return a.verify(ctx, cli, sb)
}

// StageRollback: see Workspaces. One extraction of a tar made here (never
// the caller's), through the export container.
func (a *Adapter) StageRollback(ctx context.Context, sb Sandbox, staging, marker string) error {
	if err := stagingName(staging); err != nil {
		return err
	}
	if err := markerName(marker); err != nil {
		return err
	}
	cli, err := a.ready(ctx)
	if err != nil {
		return err
	}
	a.seeds.settle(ctx, sb, false)
	if err := cli.CopyToContainer(ctx, sb.Export, WorkspaceDir, stagingTar(staging, marker, sb.Spec.Policy.User), container.CopyToContainerOptions{}); err != nil {
		return translate(err, "dockerio.workspace", "making the staging directory %s through export container %s", staging, sb.Export)
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
	bin, err := a.warden.Bytes()
	if err != nil {
		return payloadError(err, "dockerio.workspace", "reading the warden binary")
	}
	cli, err := a.ready(ctx)
	if err != nil {
		return err
	}
	name := Name(sb.Owner, sb.ID, RoleExchange)
	// One left by a crash mid-exchange goes first (its name is taken).
	if err := cli.ContainerRemove(ctx, name, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return translate(err, "dockerio.workspace", "removing a leftover exchange container %s", name)
	}
	pids, mem := int64(16), int64(64<<20)
	cfg := &container.Config{
		Image: sb.Spec.Image, User: "0:0", WorkingDir: "/",
		Entrypoint: []string{exchangeBin}, Cmd: []string{"exchange", WorkspaceDir, staging},
		Env: append([]string(nil), environment...), NetworkDisabled: true,
		Healthcheck: &container.HealthConfig{Test: []string{"NONE"}},
		Labels:      Labels(sb.Owner, sb.ID, RoleExchange, a.profile.Revision()),
	}
	hc := &container.HostConfig{
		CapDrop: []string{"ALL"}, SecurityOpt: []string{"no-new-privileges:true"},
		NetworkMode: "none", IpcMode: "private", CgroupnsMode: "private",
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		Mounts:        []mount.Mount{{Type: mount.TypeVolume, Source: sb.Volume, Target: WorkspaceDir}},
		Resources:     container.Resources{Memory: mem, MemorySwap: mem, PidsLimit: &pids},
	}
	created, err := cli.ContainerCreate(ctx, cfg, hc, nil, nil, name)
	if err != nil {
		return translate(err, "dockerio.workspace", "creating the exchange container for sandbox %s", sb.ID)
	}
	defer func() {
		// Removed whatever happened; the caller's ctx may have ended.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		_ = cli.ContainerRemove(rctx, created.ID, container.RemoveOptions{Force: true}) // a leftover is removed by the next exchange, or with the sandbox
	}()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(exchangeBin, "/"), Mode: 0o700, Size: int64(len(bin)), ModTime: time.Now(), Format: tar.FormatPAX})
	_, _ = tw.Write(bin) // a bytes.Buffer
	_ = tw.Close()
	if err := cli.CopyToContainer(ctx, created.ID, "/", &b, container.CopyToContainerOptions{}); err != nil {
		return translate(err, "dockerio.workspace", "copying the warden into the exchange container %s", created.ID)
	}
	wctx, cancel := context.WithTimeout(ctx, exchangeWait)
	defer cancel()
	waitC, errC := cli.ContainerWait(wctx, created.ID, container.WaitConditionNextExit)
	if err := cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		return translate(err, "dockerio.workspace", "starting the exchange container %s", created.ID)
	}
	var code int64
	select {
	case w := <-waitC:
		if w.Error != nil {
			return spec.Errorf(spec.CodeEngine, "dockerio.workspace", "waiting for the exchange container %s: %s", created.ID, w.Error.Message)
		}
		code = w.StatusCode
	case err := <-errC:
		return translate(err, "dockerio.workspace", "waiting for the exchange container %s", created.ID)
	}
	if code == 0 {
		return nil
	}
	why := a.containerOutput(ctx, created.ID)
	if code == 4 {
		return spec.Errorf(spec.CodeConflict, "dockerio.workspace", "sandbox %s: the exchange refused the workspace, which is not as root left it (nothing was exchanged; remove the sandbox): %s", sb.ID, why)
	}
	return spec.Errorf(spec.CodeEngine, "dockerio.workspace", "exchanging %s and %s in sandbox %s: exit %d: %s", WorkDir, staging, sb.ID, code, why)
}

// containerOutput is what a one-off container wrote (at most 64 KiB), or
// why it cannot be read.
func (a *Adapter) containerOutput(ctx context.Context, id string) string {
	cli, err := a.ready(ctx)
	if err != nil {
		return err.Error()
	}
	rc, err := cli.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return "its output cannot be read: " + err.Error()
	}
	defer func() { _ = rc.Close() }() // only read
	var out, errb limitedBuffer
	_, _ = framing.Copy(&out, &errb, rc) // what was read is what is shown
	return strings.TrimSpace(errb.String() + out.String())
}

// MarkerProof: see Workspaces.
func (a *Adapter) MarkerProof(ctx context.Context, sb Sandbox, dir, marker string) (bool, error) {
	if err := markerName(marker); err != nil {
		return false, err
	}
	p, err := archivePath(dir + "/" + marker)
	if err != nil {
		return false, err
	}
	cli, err := a.ready(ctx)
	if err != nil {
		return false, err
	}
	a.seeds.settle(ctx, sb, false)
	rc, _, err := cli.CopyFromContainer(ctx, sb.Export, p)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return false, nil
		}
		return false, translate(err, "dockerio.workspace", "reading %s through export container %s", p, sb.Export)
	}
	defer func() { _ = rc.Close() }() // only read
	return markerIn(tar.NewReader(rc), marker)
}

// markerIn reads a tar stream of the marker's path: the proof is one
// root-owned directory entry of that name with the marker's mtime, and
// nothing in it.
func markerIn(tr *tar.Reader, marker string) (bool, error) {
	h, err := tr.Next()
	if err == io.EOF {
		return false, nil
	}
	if err != nil {
		return false, spec.Wrap(spec.CodeEngine, "dockerio.workspace", err, "reading the rollback's marker back")
	}
	ok := h.Typeflag == tar.TypeDir && h.Uid == 0 && path.Clean(h.Name) == marker && h.ModTime.Unix() == MarkerTime(marker).Unix()
	if _, err := tr.Next(); !errors.Is(err, io.EOF) {
		ok = false // something in it, or a stream that does not end well
	}
	return ok, nil
}

// RetireWarden: see Wardens.
func (a *Adapter) RetireWarden(ctx context.Context, sb Sandbox, pid int, socket string) error {
	if !a.HasWarden() {
		return spec.Errorf(spec.CodeUnsupported, "dockerio.warden", "this runtime has no warden binary")
	}
	argv := []string{wardenPath, "retire", strconv.Itoa(pid)}
	switch {
	case pid == 0 && socket == "":
		argv[2] = "all"
	case pid <= 1:
		return spec.Errorf(spec.CodeInvalidArgument, "dockerio.warden", "warden pid %d is not a warden's", pid)
	}
	if socket != "" {
		if !strings.HasPrefix(socket, TmpDir+"/") || path.Clean(socket) != socket || len(socket) > 108 {
			return spec.Errorf(spec.CodeInvalidArgument, "dockerio.warden", "warden socket %q is not a path under %s", socket, TmpDir)
		}
		argv = append(argv, socket)
	}
	_, err := a.runWarden(ctx, sb, "dockerio.warden", fmt.Sprintf("retiring warden %d", pid), argv...)
	return err
}
