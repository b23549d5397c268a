package dockerio

import (
	"archive/tar"
	"bytes"
	"context"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/stockade/stockade/spec"
)

// The workspace's seed (work/ owned by the sandbox's uid:gid, the warden's
// directory and binary) is one archive call through the export container,
// and on Engine 20.10 with fuse-overlayfs it is slow (≈ 50 ms: the daemon
// mounts the export container's root, extracts in a chroot, unmounts). It
// needs only the export container, so CreateSandbox begins it as soon as
// that is made and read back, and it runs beside the workload's create and
// StartSandbox's container start; StartSandbox returns only once it has
// succeeded. Nothing but the keeper (our fixed command) runs in the
// workload before then: no process, not the warden, is started in a
// sandbox before StartSandbox has returned, so every process still finds
// the workspace seeded. A failed seed fails StartSandbox, which the caller
// rolls back like any failed start.
//
// The seed must not start before the first container's create has
// returned: that create copies the image's /workspace (with work/, the
// working directory the create made) into the fresh volume, and an
// extraction beside it would make that copy fail with "file exists".

// seeding is one seed in flight or done: done is closed once err is set.
type seeding struct {
	done chan struct{}
	err  error
}

// beginSeed starts sb's seed in the background (bounded by cleanupTimeout,
// not by the create's context, which ends when CreateSandbox returns) and
// registers it under the sandbox's key. A seed already registered (a create
// retried by the same adapter) is waited for first: two extractions into one
// workspace never overlap.
func (a *Adapter) beginSeed(ctx context.Context, cli *client.Client, sb Sandbox) {
	s := &seeding{done: make(chan struct{})}
	a.seedMu.Lock()
	if a.seeds == nil {
		a.seeds = map[string]*seeding{}
	}
	prev := a.seeds[pendingKey(sb)]
	a.seeds[pendingKey(sb)] = s
	a.seedMu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	//nolint:gosec // G118: the seed outlives the create's request on purpose (see above); it is bounded by cleanupTimeout.
	go func() {
		defer cancel()
		defer close(s.done)
		if prev != nil {
			<-prev.done
		}
		s.err = a.seed(ctx, cli, sb)
	}()
}

// seeded waits for the seed its create began and forgets it; without one
// registered (a create by another adapter, or a second start), it seeds
// now: the seed is idempotent. It returns early, leaving the seed
// registered for RemoveSandbox to settle, when ctx ends.
func (a *Adapter) seeded(ctx context.Context, cli *client.Client, sb Sandbox) error {
	s := a.pendingSeed(sb)
	if s == nil {
		return a.seed(ctx, cli, sb)
	}
	select {
	case <-s.done:
	case <-ctx.Done():
		return translate(ctx.Err(), "dockerio.seed", "waiting for the seed of sandbox %s", sb.ID)
	}
	a.forgetSeed(sb, s)
	return s.err
}

// settleSeed waits (bounded) for a seed in flight of sb, so no extraction
// races a removal (a volume in use cannot be removed) or another archive
// call through the export container. forget drops it once done.
func (a *Adapter) settleSeed(ctx context.Context, sb Sandbox, forget bool) {
	s := a.pendingSeed(sb)
	if s == nil {
		return
	}
	select {
	case <-s.done:
	case <-ctx.Done():
		return
	case <-time.After(cleanupTimeout):
		return
	}
	if forget {
		a.forgetSeed(sb, s)
	}
}

func (a *Adapter) pendingSeed(sb Sandbox) *seeding {
	a.seedMu.Lock()
	defer a.seedMu.Unlock()
	return a.seeds[pendingKey(sb)]
}

// forgetSeed drops s if it is still the one registered for sb.
func (a *Adapter) forgetSeed(sb Sandbox, s *seeding) {
	a.seedMu.Lock()
	defer a.seedMu.Unlock()
	if a.seeds[pendingKey(sb)] == s {
		delete(a.seeds, pendingKey(sb))
	}
}

// settleSeeds waits (bounded) for every seed in flight (Close).
func (a *Adapter) settleSeeds() {
	a.seedMu.Lock()
	var all []*seeding
	for _, s := range a.seeds {
		all = append(all, s)
	}
	a.seedMu.Unlock()
	deadline := time.After(cleanupTimeout)
	for _, s := range all {
		select {
		case <-s.done:
		case <-deadline:
			return
		}
	}
}

// seed makes /workspace/work owned by the sandbox's uid:gid through the
// export container's archive API (a fresh volume is root:root 0755), and
// writes the warden's directory and binary in the same archive.
func (a *Adapter) seed(ctx context.Context, cli *client.Client, sb Sandbox) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	u := sb.Spec.Policy.User
	now := time.Now()
	if a.HasWarden() {
		// One archive call for both: the warden adds nothing to a create.
		bin, err := a.warden.Bytes()
		if err != nil {
			return payloadError(err, "dockerio.seed", "reading the warden binary")
		}
		if err := wardenTar(tw, bin, now); err != nil {
			return spec.Wrap(spec.CodeEngine, "dockerio.seed", err, "building the seed archive")
		}
	}
	hdr := &tar.Header{Typeflag: tar.TypeDir, Name: "work/", Mode: 0o755, Uid: int(u.UID), Gid: int(u.GID), ModTime: now, Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return spec.Wrap(spec.CodeEngine, "dockerio.seed", err, "building the seed archive")
	}
	if err := tw.Close(); err != nil {
		return spec.Wrap(spec.CodeEngine, "dockerio.seed", err, "building the seed archive")
	}
	if err := cli.CopyToContainer(ctx, sb.Export, WorkspaceDir, &buf, container.CopyToContainerOptions{}); err != nil {
		return translate(err, "dockerio.seed", "seeding %s through export container %s", WorkspaceDir, sb.Export)
	}
	return nil
}
