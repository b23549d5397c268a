package dockerio

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"

	"github.com/stockade/stockade/spec"
)

// cleanupTimeout bounds a rollback or teardown that runs after the caller's
// context is done.
const cleanupTimeout = 2 * time.Minute

// labelsMatch reports whether have carries every one of want's labels with
// the same value (an image may add labels of its own to a container).
func labelsMatch(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

func (a *Adapter) admit(ctx context.Context, req SandboxRequest) (imageFacts, error) {
	if err := checkSandboxRequest(req); err != nil {
		return imageFacts{}, err
	}
	a.mu.Lock()
	report, ncpu := a.report, a.facts.NCPU
	a.mu.Unlock()
	if err := admitOnDaemon(req.Spec.Policy, ncpu); err != nil {
		return imageFacts{}, err
	}
	if req.Spec.Policy.Network == spec.NetworkAllowlist && !a.profile.Allowlist {
		return imageFacts{}, unsupported("dockerio.egress", "profile %s has not verified the allowlist network's isolation on its engine (an internal network's routes changed between engine releases): allowlist sandboxes are refused", a.profile.Name)
	}
	if len(req.Spec.Datasets) > 0 {
		if err := report.DatasetsErr(a.profile); err != nil {
			return imageFacts{}, err
		}
		for _, d := range req.Spec.Datasets {
			f, err := a.imageFacts(ctx, d.Image)
			if err != nil {
				return imageFacts{}, spec.Wrap(spec.CodeUnsupported, "dockerio.datasets", err, "dataset image %s is not present", d.Image)
			}
			if f.ID != d.Image || f.Os != "linux" {
				return imageFacts{}, unsupported("dockerio.datasets", "dataset image %s is not an exact local Linux image", d.Image)
			}
		}
	}
	img, err := a.imageFacts(ctx, req.Spec.Image)
	if err != nil {
		return imageFacts{}, spec.Wrap(spec.CodeUnsupported, "dockerio.image", err, "sandbox image %s is not present", req.Spec.Image)
	}
	return img, admitImage(a.profile, req.Spec.Image, img)
}

// CreateSandbox makes (or adopts by name) the volume, the network unless
// isolated, the export and workload containers; verifies both by readback;
// and seeds /workspace/work through the export container. On failure it
// returns the error and leaves what it made for the caller's rollback
// (RemoveSandbox), which the caller journals as a removal first.
func (a *Adapter) CreateSandbox(ctx context.Context, req SandboxRequest) (Sandbox, error) {
	cli, err := a.ready(ctx)
	if err != nil {
		return Sandbox{}, err
	}
	img, err := a.admit(ctx, req)
	if err != nil {
		return Sandbox{}, err
	}
	sb := Sandbox{Owner: req.Owner, ID: req.ID, Spec: req.Spec, Revision: a.profile.Revision()}
	if sb, err = a.create(ctx, cli, sb, img); err != nil {
		return Sandbox{}, err
	}
	return sb, nil
}

func (a *Adapter) create(ctx context.Context, cli *client.Client, sb Sandbox, img imageFacts) (Sandbox, error) {
	rev := sb.Revision
	volName := Name(sb.Owner, sb.ID, RoleVolume)
	v, err := cli.VolumeCreate(ctx, volume.CreateOptions{Name: volName, Driver: "local", Labels: Labels(sb.Owner, sb.ID, RoleVolume, rev)})
	if err != nil {
		return sb, translate(err, "dockerio.create", "volume %s", volName)
	}
	if !labelsMatch(v.Labels, Labels(sb.Owner, sb.ID, RoleVolume, rev)) {
		return sb, spec.Errorf(spec.CodeConflict, "dockerio.create", "volume %s exists with labels %v, not ours", volName, v.Labels)
	}
	sb.Volume = volName
	switch sb.Spec.Policy.Network.Canonical() {
	case spec.NetworkOpen:
		if sb.Network, err = a.openNetwork(ctx, cli, sb); err != nil {
			return sb, err
		}
	case spec.NetworkAllowlist:
		if !a.hasEgress() {
			return sb, spec.Errorf(spec.CodeUnsupported, "dockerio.egress", "this runtime has no stockade-egress binary, which the allowlist network needs (none is embedded for this platform): point $STOCKADE_EGRESS at a static build of ./cmd/egress")
		}
		internal, err := a.internalNetwork(ctx, cli, sb)
		if err != nil {
			return sb, err
		}
		sb.Network, sb.Proxy = internal.ID, netip.AddrPortFrom(proxyAddr(internal.Subnet), proxyPort).String()
		// The egress role is made beside the workload's containers: it
		// shares nothing with them but the network, now made.
		type made struct {
			sb  Sandbox
			err error
		}
		done := make(chan made, 1)
		go func() {
			e, err := a.createEgressRole(ctx, cli, sb, internal)
			done <- made{e, err}
		}()
		sb, err = a.createContainers(ctx, cli, sb, img)
		m := <-done
		sb.Outside, sb.Egress = m.sb.Outside, m.sb.Egress
		if err != nil {
			return sb, err
		}
		return sb, m.err
	case spec.NetworkIsolated, spec.NetworkBridge:
		// Isolated: network mode none, no network to make. Bridge:
		// Canonical turned it into NetworkOpen.
	}
	return a.createContainers(ctx, cli, sb, img)
}

// createContainers makes the workload container and reads it back, begins
// its start, then makes the export container, reads it back and begins the
// workspace's seed through it (see seed.go for the order and what holds).
func (a *Adapter) createContainers(ctx context.Context, cli *client.Client, sb Sandbox, img imageFacts) (Sandbox, error) {
	id, err := a.ensureContainer(ctx, cli, sb, RoleWorkload)
	if err != nil {
		return sb, err
	}
	sb.Workload = id
	if err := a.readback(ctx, cli, sb, RoleWorkload, id, img.Env, false); err != nil {
		return sb, err
	}
	started := sb
	a.starts.begin(ctx, sb, func(ctx context.Context) error { return startWorkload(ctx, cli, started) })
	if id, err = a.ensureContainer(ctx, cli, sb, RoleExport); err != nil {
		return sb, err
	}
	sb.Export = id
	if err := a.readback(ctx, cli, sb, RoleExport, id, img.Env, false); err != nil {
		return sb, err
	}
	seeded := sb
	a.seeds.begin(ctx, sb, func(ctx context.Context) error { return a.seed(ctx, cli, seeded) })
	return sb, nil
}

// openNetwork makes or adopts an open sandbox's own bridge network, its
// subnet from the daemon's default pool.
func (a *Adapter) openNetwork(ctx context.Context, cli *client.Client, sb Sandbox) (string, error) {
	f, err := a.ensureNetworkOf(ctx, cli, Name(sb.Owner, sb.ID, RoleNetwork), Labels(sb.Owner, sb.ID, RoleNetwork, sb.Revision), nil, false, 0)
	return f.ID, err
}

func (a *Adapter) ensureContainer(ctx context.Context, cli *client.Client, sb Sandbox, role Role) (string, error) {
	b := body(a.profile, sb.Spec, sb.Owner, sb.ID, role, sb.Volume, sb.Network)
	id, _, err := createOrAdopt(ctx, cli, "dockerio.create", Name(sb.Owner, sb.ID, role), b, nil)
	return id, err
}

// createOrAdopt makes the container b under name. One found by that name (a
// create retried after a crash) is adopted only if every label of b's
// matches, and returned with its inspect; readback then checks the rest.
func createOrAdopt(ctx context.Context, cli *client.Client, op, name string, b Body, nc *network.NetworkingConfig) (string, *container.InspectResponse, error) {
	resp, err := cli.ContainerCreate(ctx, b.Config, b.HostConfig, nc, nil, name)
	if err == nil {
		return resp.ID, nil, nil
	}
	err = translate(err, op, "container %s", name)
	if !spec.IsCode(err, spec.CodeConflict) {
		return "", nil, err
	}
	c, ierr := cli.ContainerInspect(ctx, name)
	if ierr != nil {
		return "", nil, translate(ierr, op, "inspecting existing container %s", name)
	}
	var labels map[string]string
	if c.Config != nil {
		labels = c.Config.Labels
	}
	if !labelsMatch(labels, b.Config.Labels) {
		return "", nil, spec.Errorf(spec.CodeConflict, op, "container %s exists with labels %v, not ours", name, labels)
	}
	return c.ID, &c, nil
}

// readback inspects a container and verifies it (see verify).
func (a *Adapter) readback(ctx context.Context, cli *client.Client, sb Sandbox, role Role, id string, imageEnv []string, started bool) (err error) {
	ctx, span := readbackSpan(ctx, sb, role, started)
	defer func() { endSpan(span, err) }()
	_, raw, err := cli.ContainerInspectWithRaw(ctx, id, false)
	if err != nil {
		return translate(err, "dockerio.readback", "inspecting %s container %s", role, id)
	}
	return verify(raw, expectFor(a.profile, sb.Spec, sb.Owner, sb.ID, role, sb.Volume, sb.Network, imageEnv, started))
}

// StartSandbox finishes the workload's start and the workspace's seed its
// create began (or does them now: see seed.go) and verifies the workload
// again, now running. On a mismatch it returns unsupported naming the
// field, and on a failed start or seed its error; either way it leaves the
// resources for the caller's journaled rollback.
func (a *Adapter) StartSandbox(ctx context.Context, sb Sandbox) error {
	cli, err := a.ready(ctx)
	if err != nil {
		return err
	}
	seedDone := make(chan error, 1)
	go func() {
		seedDone <- a.seeds.finish(ctx, sb, func(ctx context.Context) error { return a.seed(ctx, cli, sb) })
	}()
	egressDone := make(chan error, 1)
	if sb.Egress != "" {
		// The proxy's start began with the create (its address is the
		// last of the subnet: no start order can take it); it ends, read
		// back running, beside the workload's start.
		go func() { egressDone <- a.egressStarted(ctx, cli, sb) }()
	} else {
		egressDone <- nil
	}
	err = a.starts.finish(ctx, sb, func(ctx context.Context) error { return startWorkload(ctx, cli, sb) })
	if err == nil {
		err = a.verify(ctx, cli, sb)
	}
	if eerr := <-egressDone; err == nil {
		err = eerr
	}
	if serr := <-seedDone; err == nil {
		err = serr
	}
	return err
}

func (a *Adapter) verify(ctx context.Context, cli *client.Client, sb Sandbox) error {
	img, err := a.imageFacts(ctx, sb.Spec.Image)
	if err != nil {
		return err
	}
	if sb.Revision != a.profile.Revision() {
		return unsupported("dockerio.verify", "sandbox %s has revision %s, not %s", sb.ID, sb.Revision, a.profile.Revision())
	}
	return a.readback(ctx, cli, sb, RoleWorkload, sb.Workload, img.Env, true)
}

// VerifySandbox re-reads the workload: running, same identity (name and
// labels), revision and policy. It changes nothing.
func (a *Adapter) VerifySandbox(ctx context.Context, sb Sandbox) error {
	cli, err := a.ready(ctx)
	if err != nil {
		return err
	}
	return a.verify(ctx, cli, sb)
}

// StopSandbox stops the workload (TERM, KILL after grace) and reports how it
// ended. Every resource stays.
func (a *Adapter) StopSandbox(ctx context.Context, sb Sandbox, grace time.Duration) (ContainerExit, error) {
	cli, err := a.ready(ctx)
	if err != nil {
		return ContainerExit{}, err
	}
	if sb.Workload == "" { // never created: nothing to stop
		return ContainerExit{ExitCode: -1}, nil
	}
	a.starts.settle(ctx, sb, false) // a start in flight would outlive the stop
	// Docker refuses to stop a paused container: thaw it first.
	if err := a.unpause(ctx, cli, sb.Workload); err != nil {
		return ContainerExit{}, err
	}
	if sb.Egress != "" {
		// The proxy stops with its workload (beside it: it holds an
		// address of the owner's outside network while it runs).
		egressDone := make(chan error, 1)
		go func() { egressDone <- a.stopEgress(ctx, cli, sb) }()
		exit, err := a.stopWorkload(ctx, cli, sb, grace)
		if eerr := <-egressDone; err == nil && eerr != nil {
			return exit, eerr
		}
		return exit, err
	}
	return a.stopWorkload(ctx, cli, sb, grace)
}

// stopEgress stops the egress container (the proxy holds nothing to save:
// a short grace). One already gone is stopped.
func (a *Adapter) stopEgress(ctx context.Context, cli *client.Client, sb Sandbox) error {
	a.settleEgress(sb)
	secs := 1
	err := cli.ContainerStop(ctx, sb.Egress, container.StopOptions{Timeout: &secs})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return translate(err, "dockerio.stop", "stopping egress %s", sb.Egress)
	}
	return nil
}

func (a *Adapter) stopWorkload(ctx context.Context, cli *client.Client, sb Sandbox, grace time.Duration) (ContainerExit, error) {
	secs := int((grace + time.Second - 1) / time.Second)
	err := cli.ContainerStop(ctx, sb.Workload, container.StopOptions{Timeout: &secs})
	if cerrdefs.IsNotFound(err) {
		return ContainerExit{ExitCode: -1}, nil
	}
	if err != nil {
		return ContainerExit{}, translate(err, "dockerio.stop", "stopping workload %s", sb.Workload)
	}
	c, err := cli.ContainerInspect(ctx, sb.Workload)
	if cerrdefs.IsNotFound(err) {
		return ContainerExit{ExitCode: -1}, nil
	}
	if err != nil {
		return ContainerExit{}, translate(err, "dockerio.stop", "inspecting workload %s", sb.Workload)
	}
	return ContainerExit{ExitCode: c.State.ExitCode, OOMKilled: c.State.OOMKilled}, nil
}

// RemoveSandbox force-removes every resource labelled with the sandbox's
// owner and id. Resources already gone are not an error.
func (a *Adapter) RemoveSandbox(ctx context.Context, sb Sandbox) error {
	cli, err := a.ready(ctx)
	if err != nil {
		return err
	}
	if err := checkSandboxIDs(sb.Owner, sb.ID); err != nil {
		return err
	}
	a.settleEgress(sb)
	a.starts.settle(ctx, sb, true)
	a.seeds.settle(ctx, sb, true)
	if err := a.removeLabelled(ctx, cli, sb.Owner, sb.ID); err != nil {
		return err
	}
	if sb.Outside == "" && sb.Egress == "" && sb.Spec.Policy.Network != spec.NetworkAllowlist {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	defer cancel()
	return a.dropOutsideIfUnused(ctx, cli, sb.Owner)
}

// removeLabelled removes, containers first, every resource carrying both
// the owner and the sandbox label. An empty owner or sandbox removes
// nothing.
func (a *Adapter) removeLabelled(ctx context.Context, cli *client.Client, owner, sandbox string) error {
	if owner == "" || sandbox == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	defer cancel()
	for pass := 1; ; pass++ {
		rs, err := a.list(ctx, cli, owner, sandbox)
		if err != nil {
			return err
		}
		// Kind by kind (a network or volume in use by a container cannot
		// go), the resources of one kind side by side: the workload's
		// removal (its rootfs unmounted, its layer deleted) is the slow
		// one.
		errs := make([]error, len(rs))
		for _, k := range []Kind{KindContainer, KindNetwork, KindVolume} {
			var wg sync.WaitGroup
			for i, r := range rs {
				if r.Kind == k {
					wg.Add(1)
					go func() {
						defer wg.Done()
						errs[i] = remove(ctx, cli, r)
					}()
				}
			}
			wg.Wait()
		}
		inUse := false
		for i, r := range rs {
			inUse = inUse || r.Kind != KindContainer && spec.IsCode(errs[i], spec.CodeConflict)
		}
		err = errors.Join(errs...)
		// A volume or network still in use: a container the list did
		// not show yet holds it (a create the daemon was finishing when
		// an earlier runtime died under it). Listed and removed again.
		if err == nil || !inUse || pass == removePasses {
			return err
		}
		select {
		case <-time.After(removeRetry):
		case <-ctx.Done():
			return err
		}
	}
}

// removePasses bounds the passes of removeLabelled; removeRetry is the
// pause between them.
const (
	removePasses = 4
	removeRetry  = 250 * time.Millisecond
)

func remove(ctx context.Context, cli *client.Client, r Resource) error {
	var err error
	switch r.Kind {
	case KindContainer:
		err = cli.ContainerRemove(ctx, r.ID, container.RemoveOptions{Force: true})
	case KindNetwork:
		err = cli.NetworkRemove(ctx, r.ID)
	case KindVolume:
		err = cli.VolumeRemove(ctx, r.ID, true)
	default:
		return spec.Errorf(spec.CodeInvalidArgument, "dockerio.remove", "unknown kind %q", r.Kind)
	}
	if err != nil && !cerrdefs.IsNotFound(err) {
		return translate(err, "dockerio.remove", "%s %s (%s)", r.Kind, r.Name, r.ID)
	}
	return nil
}

func resource(kind Kind, id, name string, labels map[string]string) Resource {
	return Resource{Kind: kind, ID: id, Name: name, Role: Role(labels[LabelRole]), Owner: labels[LabelOwner],
		Sandbox: labels[LabelSandbox], Revision: labels[labelRevision], Labels: maps.Clone(labels)}
}

// list returns every resource labelled with owner (and sandbox, if not
// empty): containers, then networks, then volumes, each asked side by side.
func (a *Adapter) list(ctx context.Context, cli *client.Client, owner, sandbox string) ([]Resource, error) {
	f := filters.NewArgs(filters.Arg("label", LabelOwner+"="+owner))
	if sandbox != "" {
		f.Add("label", LabelSandbox+"="+sandbox)
	}
	var (
		cs         []container.Summary
		ns         []network.Summary
		vs         volume.ListResponse
		cerr, nerr error
		wg         sync.WaitGroup
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		cs, cerr = cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	}()
	go func() {
		defer wg.Done()
		ns, nerr = cli.NetworkList(ctx, network.ListOptions{Filters: f})
	}()
	vs, verr := cli.VolumeList(ctx, volume.ListOptions{Filters: f})
	wg.Wait()
	switch {
	case cerr != nil:
		return nil, translate(cerr, "dockerio.list", "containers of owner %s", owner)
	case nerr != nil:
		return nil, translate(nerr, "dockerio.list", "networks of owner %s", owner)
	case verr != nil:
		return nil, translate(verr, "dockerio.list", "volumes of owner %s", owner)
	}
	var out []Resource
	for _, c := range cs {
		name := ""
		if len(c.Names) > 0 {
			name = c.Names[0][1:]
		}
		out = append(out, resource(KindContainer, c.ID, name, c.Labels))
	}
	for _, n := range ns {
		out = append(out, resource(KindNetwork, n.ID, n.Name, n.Labels))
	}
	for _, v := range vs.Volumes {
		out = append(out, resource(KindVolume, v.Name, v.Name, v.Labels))
	}
	return out, nil
}

// ListOwned lists every container, network and volume labelled with the
// owner, grouped by sandbox id (in first-seen order).
func (a *Adapter) ListOwned(ctx context.Context, owner string) ([]Owned, error) {
	cli, err := a.ready(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkID("owner", owner); err != nil {
		return nil, err
	}
	rs, err := a.list(ctx, cli, owner, "")
	if err != nil {
		return nil, err
	}
	var out []Owned
	index := map[string]int{}
	for _, r := range rs {
		i, ok := index[r.Sandbox]
		if !ok {
			i = len(out)
			index[r.Sandbox] = i
			out = append(out, Owned{Sandbox: r.Sandbox})
		}
		out[i].Resources = append(out[i].Resources, r)
	}
	return out, nil
}

// InspectSandbox reports what Docker shows of a sandbox (for reconcile):
// the resources present, whether the workload runs, its exit if not, and
// the first readback mismatch if it runs.
func (a *Adapter) InspectSandbox(ctx context.Context, sb Sandbox) (Observed, error) {
	cli, err := a.ready(ctx)
	if err != nil {
		return Observed{}, err
	}
	rs, err := a.list(ctx, cli, sb.Owner, sb.ID)
	if err != nil {
		return Observed{}, err
	}
	obs := Observed{Present: rs}
	for _, r := range rs {
		if r.Kind != KindContainer || r.Role != RoleWorkload {
			continue
		}
		obs.Revision = r.Revision
		c, raw, err := cli.ContainerInspectWithRaw(ctx, r.ID, false)
		if err != nil {
			if cerrdefs.IsNotFound(err) {
				continue
			}
			return Observed{}, translate(err, "dockerio.inspect", "workload %s", r.ID)
		}
		if c.State != nil && c.State.Running {
			obs.Running, obs.Paused = true, c.State.Paused
			img, err := a.imageFacts(ctx, sb.Spec.Image)
			if err != nil {
				obs.Mismatch = "Image"
				continue
			}
			s := sb
			s.Workload = r.ID
			if err := verify(raw, expectFor(a.profile, s.Spec, s.Owner, s.ID, RoleWorkload, s.Volume, s.Network, img.Env, true)); err != nil {
				obs.Mismatch = err.Error()
			} else if r.Revision != a.profile.Revision() {
				obs.Mismatch = labelRevision
			}
		} else if c.State != nil {
			obs.Exit = &ContainerExit{ExitCode: c.State.ExitCode, OOMKilled: c.State.OOMKilled}
		}
	}
	return obs, nil
}

// RemoveOwned removes one listed resource (an orphan). It re-reads the
// resource's owner label first and refuses (conflict) to touch one that
// does not carry r.Owner.
func (a *Adapter) RemoveOwned(ctx context.Context, r Resource) error {
	cli, err := a.ready(ctx)
	if err != nil {
		return err
	}
	if r.Owner == "" {
		return spec.Errorf(spec.CodeInvalidArgument, "dockerio.remove", "resource %s has no owner", r.ID)
	}
	var labels map[string]string
	switch r.Kind {
	case KindContainer:
		c, err := cli.ContainerInspect(ctx, r.ID)
		if cerrdefs.IsNotFound(err) {
			return nil
		} else if err != nil {
			return translate(err, "dockerio.remove", "container %s", r.ID)
		}
		if c.Config != nil {
			labels = c.Config.Labels
		}
	case KindNetwork:
		n, err := cli.NetworkInspect(ctx, r.ID, network.InspectOptions{})
		if cerrdefs.IsNotFound(err) {
			return nil
		} else if err != nil {
			return translate(err, "dockerio.remove", "network %s", r.ID)
		}
		labels = n.Labels
	case KindVolume:
		v, err := cli.VolumeInspect(ctx, r.ID)
		if cerrdefs.IsNotFound(err) {
			return nil
		} else if err != nil {
			return translate(err, "dockerio.remove", "volume %s", r.ID)
		}
		labels = v.Labels
	default:
		return spec.Errorf(spec.CodeInvalidArgument, "dockerio.remove", "unknown kind %q", r.Kind)
	}
	if labels[LabelOwner] != r.Owner {
		return spec.Errorf(spec.CodeConflict, "dockerio.remove", "%s %s carries owner %q, not %q: not touched", r.Kind, r.ID, labels[LabelOwner], r.Owner)
	}
	return remove(ctx, cli, r)
}
