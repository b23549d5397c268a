package dockerio

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"syscall"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/client"

	"github.com/stockade/stockade/profile"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/tracing"
)

// Options configures an Adapter.
type Options struct {
	// Profile names the profile; "" means $STOCKADE_PROFILE, else
	// DefaultProfile. It is never chosen by probing the daemon.
	Profile string
	// ClientOpts are extra options for the Docker client (the environment,
	// DOCKER_HOST and friends, is always read first).
	ClientOpts []client.Opt
	// WardenBinary is the stockade-warden binary delivered into every sandbox's
	// workspace, read at each delivery; nil makes sandboxes without a
	// warden (processes run as Docker execs).
	WardenBinary Payload
	// EgressBinary is the stockade-egress binary, imported as the egress image
	// of allowlist sandboxes (read when the image is built); nil refuses
	// the allowlist network.
	EgressBinary Payload
	// Subnets is the range allowlist sandboxes' networks are cut from: ""
	// is $STOCKADE_SUBNETS, else 10.213.0.0/16 (defaultSubnets).
	Subnets string
	// NoHostCgroups reads usage from the daemon's stats API only, never
	// the host's cgroupfs (which is read only when the runtime shares
	// the daemon's host anyway).
	NoHostCgroups bool
}

// Payload is a helper binary the adapter copies into Docker. Bytes is
// called at each copy, so a source that verifies its content (helpers.Binary
// checks a sha256) is trusted no longer than one copy.
type Payload interface {
	Bytes() ([]byte, error)
}

// Adapter implements Engine against a real Docker daemon.
//
// It holds two clients: one with API version negotiation (mandatory: the
// v28 client otherwise speaks 1.51 to every daemon) used only for /version
// and /info, and, once preflight admitted the daemon, one pinned to the
// profile's API version used for everything else.
type Adapter struct {
	profile profile.Profile
	opts    []client.Opt
	probe   *client.Client

	mu     sync.Mutex
	cli    *client.Client // pinned; nil until preflight passes
	report profile.Report
	daemon Daemon
	facts  profile.Facts

	warden Payload

	// netMu serialises network allocation (list, pick a free subnet,
	// create) and the egress image's import.
	netMu         sync.Mutex
	egress        Payload
	egressImageID string
	subnets       netip.Prefix
	outside       map[string]netFacts   // by owner, once read back
	pendingEgress map[string]chan error // egress starts a create began, by owner/id
	// outsideMu serialises the outside network's lifecycle: from making
	// or adopting it to joining an egress container, and from finding it
	// unused to removing it, so a removal never takes the network a
	// create has just chosen.
	outsideMu sync.Mutex

	imgMu  sync.Mutex
	images map[string]imageFacts // by image ID; images are immutable

	// The workloads' starts and the workspaces' seeds a create began, for
	// StartSandbox to finish (seed.go).
	starts, seeds pending
	// cgroups reads the workloads' cgroups from the host (cgroup.go).
	cgroups cgroups
}

var _ Engine = (*Adapter)(nil)

// NewAdapter selects the profile and makes the negotiating client. It does
// not talk to the daemon; Preflight (or the first call that needs the
// daemon) does.
func NewAdapter(opts Options) (*Adapter, error) {
	p, err := profile.Select(opts.Profile)
	if err != nil {
		return nil, err
	}
	// The client's own spans (one per API call) only inside the
	// runtime's: a background call starts no trace.
	base := append([]client.Opt{client.FromEnv, client.WithTraceProvider(tracing.Nested())}, opts.ClientOpts...)
	probe, err := client.NewClientWithOpts(append(base, client.WithAPIVersionNegotiation())...)
	if err != nil {
		return nil, translate(err, "dockerio.client", "making the Docker client")
	}
	subnets, err := parseSubnets(opts.Subnets)
	if err != nil {
		return nil, err
	}
	return &Adapter{cgroups: cgroups{off: opts.NoHostCgroups}, profile: p, opts: base, probe: probe, images: map[string]imageFacts{}, warden: opts.WardenBinary, egress: opts.EgressBinary, subnets: subnets}, nil
}

// Profile returns the profile in use.
func (a *Adapter) Profile() profile.Profile { return a.profile }

// Report returns the last preflight's doctor report (zero before one ran).
func (a *Adapter) Report() profile.Report {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.report
}

// ClientVersion is the API version the adapter drives ("" before preflight).
func (a *Adapter) ClientVersion() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cli == nil {
		return ""
	}
	return a.cli.ClientVersion()
}

// Close closes the clients. Attachments already handed out stay usable
// until closed.
func (a *Adapter) Close() error {
	// A start or seed in flight would fail on a closed client.
	a.starts.settleAll()
	a.seeds.settleAll()
	a.mu.Lock()
	defer a.mu.Unlock()
	var err error
	if a.cli != nil {
		err = a.cli.Close()
	}
	return errors.Join(err, a.probe.Close())
}

// gather reads the controller and daemon facts. /version and /info are
// asked side by side: every Open waits for both.
func gather(ctx context.Context, cli *client.Client) (profile.Facts, error) {
	var v types.Version
	verr := make(chan error, 1)
	go func() {
		var err error
		v, err = cli.ServerVersion(ctx)
		verr <- err
	}()
	info, err := cli.Info(ctx)
	if vErr := <-verr; vErr != nil {
		return profile.Facts{}, translate(vErr, "dockerio.preflight", "GET /version")
	}
	if err != nil {
		return profile.Facts{}, translate(err, "dockerio.preflight", "GET /info")
	}
	f := profile.Facts{
		Version: v.Version, APIVersion: v.APIVersion, MinAPIVersion: v.MinAPIVersion, Os: v.Os, Arch: v.Arch,
		ID: info.ID, OSType: info.OSType, Architecture: info.Architecture,
		CgroupVersion: info.CgroupVersion, CgroupDriver: info.CgroupDriver,
		SecurityOptions: info.SecurityOptions, OperatingSystem: info.OperatingSystem, Driver: info.Driver,
		MemoryLimit: info.MemoryLimit, SwapLimit: info.SwapLimit, PidsLimit: info.PidsLimit,
		CPUCfsPeriod: info.CPUCfsPeriod, CPUCfsQuota: info.CPUCfsQuota, InitBinary: info.InitBinary, NCPU: info.NCPU,
	}
	f.ControllerOS, f.ControllerArch = runtime.GOOS, runtime.GOARCH
	f.DriverStatus = append(f.DriverStatus, info.DriverStatus...)
	f.DockerRootDir, f.RootFree = info.DockerRootDir, -1
	if local(cli.DaemonHost()) {
		var fs syscall.Statfs_t
		if err := syscall.Statfs(info.DockerRootDir+"/volumes", &fs); err == nil {
			f.RootFree = int64(fs.Bavail) * int64(fs.Bsize) // Bsize is uint32 on darwin
		}
	}
	return f, nil
}

// local reports whether a daemon at host (a client's DaemonHost) is on
// this machine: a unix socket.
func local(host string) bool { return strings.HasPrefix(host, "unix://") }

// Doctor checks the daemon in the environment against the named profile
// ("" selects as profile.Select does) and returns every check. The error is
// non-nil only when the daemon could not be asked; a daemon that fails the
// profile gives a report whose Err says why.
func Doctor(ctx context.Context, name string) (profile.Report, error) {
	a, err := NewAdapter(Options{Profile: name})
	if err != nil {
		return profile.Report{}, err
	}
	defer func() { _ = a.Close() }() // its clients only asked: closing them loses nothing
	f, err := gather(ctx, a.probe)
	if err != nil {
		return profile.Report{}, err
	}
	return profile.CheckDaemon(a.profile, f), nil
}

// Preflight checks the daemon against the profile, pins the client to the
// profile's API version and returns what it observed. Open runs it once
// (ready runs it if a call comes first); the pinned client is made once. A
// daemon replaced under a live runtime is not noticed here: the journal's
// daemon id check at the next Open is what refuses it.
func (a *Adapter) Preflight(ctx context.Context) (Daemon, error) {
	f, err := gather(ctx, a.probe)
	if err != nil {
		return Daemon{}, err
	}
	r := profile.CheckDaemon(a.profile, f)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.report, a.facts = r, f
	if err := r.Err(); err != nil {
		return Daemon{}, err
	}
	if a.cli == nil {
		cli, err := client.NewClientWithOpts(append(a.opts, client.WithVersion(a.profile.APIVersion))...)
		if err != nil {
			return Daemon{}, translate(err, "dockerio.client", "making the pinned Docker client")
		}
		a.cli = cli
	}
	a.daemon = Daemon{ID: f.ID, Version: f.Version, APIVersion: a.profile.APIVersion, Profile: a.profile.Name, Revision: a.profile.Revision()}
	return a.daemon, nil
}

// ready returns the pinned client, running preflight first if it has not
// passed yet.
func (a *Adapter) ready(ctx context.Context) (*client.Client, error) {
	if err := ctx.Err(); err != nil {
		return nil, translate(err, "dockerio", "context done")
	}
	a.mu.Lock()
	cli := a.cli
	a.mu.Unlock()
	if cli != nil {
		return cli, nil
	}
	if _, err := a.Preflight(ctx); err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cli, nil
}

// ResolveImage resolves a tag or ID to the image's exact ID and admits it
// under the profile.
func (a *Adapter) ResolveImage(ctx context.Context, ref string) (string, error) {
	if err := checkImageRef(ref); err != nil {
		return "", err
	}
	img, err := a.imageFacts(ctx, ref)
	if err != nil {
		return "", err
	}
	if err := admitImage(a.profile, "", img); err != nil {
		return "", err
	}
	return img.ID, nil
}

// imageFacts inspects an image; by-ID results are cached.
func (a *Adapter) imageFacts(ctx context.Context, ref string) (imageFacts, error) {
	a.imgMu.Lock()
	f, ok := a.images[ref]
	a.imgMu.Unlock()
	if ok {
		return f, nil
	}
	cli, err := a.ready(ctx)
	if err != nil {
		return imageFacts{}, err
	}
	img, err := cli.ImageInspect(ctx, ref)
	if err != nil {
		return imageFacts{}, translate(err, "dockerio.image", "image %s", ref)
	}
	f = imageFacts{ID: img.ID, Os: img.Os, Architecture: img.Architecture}
	if img.Config != nil {
		f.Volumes = len(img.Config.Volumes)
		f.Env = append([]string(nil), img.Config.Env...)
		f.Labels = maps.Clone(img.Config.Labels)
	}
	// Kept by ID (an image ID names immutable content), also when a tag
	// was asked: the create that follows a tag's resolution asks by the
	// ID it resolved to. A tag itself is never kept (it can move).
	if spec.IsImageID(f.ID) {
		a.imgMu.Lock()
		a.images[f.ID] = f
		a.imgMu.Unlock()
	}
	return f, nil
}
