package dockerio

import (
	"archive/tar"
	"bytes"
	"context"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/stockade/stockade/spec"
)

// A create's slow steps run side by side. On Engine 20.10 with
// fuse-overlayfs a container start takes ≈ 190 ms, a container create
// ≈ 20 ms and the workspace's seed (work/ owned by the sandbox's uid:gid,
// the warden's directory and binary: one archive call through the export
// container, which mounts its root, extracts in a chroot and unmounts)
// ≈ 50 ms. So CreateSandbox makes the workload container and reads it back,
// then begins its start in the background (as the egress container's start
// is begun, egress.go), and meanwhile makes the export container, reads it
// back and begins the seed through it. StartSandbox waits for both, reads
// the workload back running, and returns only once all have succeeded.
//
// What still holds:
//   - Every container is read back before it can run: the workload's
//     start begins only after its created readback has passed.
//   - Every Docker resource is known to the journal: the sandbox's
//     reservation is journaled before the create, and its resources are
//     labelled; a crash before the created or started fact is journaled
//     is rolled back by recovery (reserved: remove all, running or not).
//   - Nothing of the caller's runs before the workspace is seeded: until
//     StartSandbox has returned (and the start is journaled) the workload
//     runs only its keeper, our fixed command; the warden and every
//     process are started after. A failed seed or start fails
//     StartSandbox, which the caller rolls back like any failed start.
//   - StopSandbox and RemoveSandbox wait for a start or seed in flight;
//     Put, Get and EnsureWarden for a seed in flight.
//
// The order: the workload container first, since the first container's
// create copies the image's /workspace (with work/, the working directory
// the create made) into the fresh volume; a second create, or an
// extraction, beside that copy makes it fail with "file exists". After
// it, the volume is not empty and no other create copies.

// inflight is one background call (a seed, a workload's start): done is
// closed once err is set.
type inflight struct {
	done chan struct{}
	err  error
}

// pending holds the background calls a create began, by sandbox
// (pendingKey), for the call that finishes them to wait for.
type pending struct {
	mu sync.Mutex
	m  map[string]*inflight
}

// begin runs f in the background (bounded by cleanupTimeout, not by ctx,
// which ends when the create returns) and registers it under sb's key. One
// already registered (a create retried by the same adapter) is waited for
// first: two never overlap.
func (p *pending) begin(ctx context.Context, sb Sandbox, f func(ctx context.Context) error) {
	c := &inflight{done: make(chan struct{})}
	p.mu.Lock()
	if p.m == nil {
		p.m = map[string]*inflight{}
	}
	prev := p.m[pendingKey(sb)]
	p.m[pendingKey(sb)] = c
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	//nolint:gosec // G118: the call outlives the create's request on purpose (see seed.go); it is bounded by cleanupTimeout.
	go func() {
		defer cancel()
		defer close(c.done)
		if prev != nil {
			<-prev.done
		}
		c.err = f(ctx)
	}()
}

// finish waits for the call its create began and forgets it; without one
// registered (a create by another adapter, or a second call), it runs f
// now: both calls it finishes (the seed, a start) are idempotent. It
// returns early, leaving the call registered for a removal to settle, when
// ctx ends.
func (p *pending) finish(ctx context.Context, sb Sandbox, f func(ctx context.Context) error) error {
	c := p.get(sb)
	if c == nil {
		return f(ctx)
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		return translate(ctx.Err(), "dockerio", "waiting for sandbox %s's create to finish", sb.ID)
	}
	p.forget(sb, c)
	return c.err
}

// settle waits (bounded) for a call in flight of sb, so that nothing races
// a stop, a removal (a volume in use cannot be removed) or an archive call
// through the export container. forget drops it once done.
func (p *pending) settle(ctx context.Context, sb Sandbox, forget bool) {
	c := p.get(sb)
	if c == nil {
		return
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		return
	case <-time.After(cleanupTimeout):
		return
	}
	if forget {
		p.forget(sb, c)
	}
}

func (p *pending) get(sb Sandbox) *inflight {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[pendingKey(sb)]
}

// forget drops c if it is still the one registered for sb.
func (p *pending) forget(sb Sandbox, c *inflight) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m[pendingKey(sb)] == c {
		delete(p.m, pendingKey(sb))
	}
}

// settleAll waits (bounded) for every call in flight (Close).
func (p *pending) settleAll() {
	p.mu.Lock()
	var all []*inflight
	for _, c := range p.m {
		all = append(all, c)
	}
	p.mu.Unlock()
	deadline := time.After(cleanupTimeout)
	for _, c := range all {
		select {
		case <-c.done:
		case <-deadline:
			return
		}
	}
}

// startWorkload starts the workload container (idempotent: a running one
// is left running).
func startWorkload(ctx context.Context, cli *client.Client, sb Sandbox) error {
	if err := cli.ContainerStart(ctx, sb.Workload, container.StartOptions{}); err != nil {
		return translate(err, "dockerio.start", "starting workload %s", sb.Workload)
	}
	return nil
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
