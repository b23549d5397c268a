package dockerio

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/stockade/stockade/spec"
)

// The egress role of an allowlist sandbox: a container of our own image
// (the static stockade-egress binary alone, imported, never pulled) on the
// sandbox's internal network and on the owner's shared outside network,
// running the forward proxy the workload's processes are pointed at.
const (
	// egressBinary is the proxy's path in its image.
	egressBinary = "/stockade-egress"
	// egressControl is the proxy's control socket in its container.
	egressControl = "/run/stockade-egress/control.sock"
	// proxyPort is the proxy's port on the internal network.
	proxyPort = 3128
	// egressRepo is the egress image's repository; its tag is the binary's
	// hash, so a runtime with another binary imports its own.
	egressRepo = "stockade/egress"
	// defaultSubnets is the range sandbox networks are cut from when
	// $STOCKADE_SUBNETS does not name another: outside Docker's default
	// pools (172.17/16.., 192.168/16), so the daemon's own allocations never
	// collide with ours.
	defaultSubnets = "10.213.0.0/16"
	// sandboxSubnetBits sizes an allowlist sandbox's internal network: 16
	// addresses (network, the unused gateway, the proxy, the workload).
	sandboxSubnetBits = 28
	// outsideSubnetBits sizes the shared outside network: 1021 egress
	// containers of one owner at once.
	outsideSubnetBits = 22
	// Options of the networks (moby libnetwork's bridge driver).
	optInhibitIPv4 = "com.docker.network.bridge.inhibit_ipv4"
	optEnableICC   = "com.docker.network.bridge.enable_icc"
	// egress container limits: the proxy splices, it holds little.
	egressMemory = 128 << 20
	egressPids   = 256
)

// Egress resource roles.
const (
	RoleEgress Role = "egress"
	// RoleOutside is the owner's shared outside network. It carries no
	// sandbox label: it belongs to no one sandbox, and recovery never takes
	// it for an orphan.
	RoleOutside Role = "outside"
)

// parseSubnets reads a subnet range: "" is $STOCKADE_SUBNETS, else
// defaultSubnets.
func parseSubnets(s string) (netip.Prefix, error) {
	if s == "" {
		s = os.Getenv("STOCKADE_SUBNETS")
	}
	if s == "" {
		s = defaultSubnets
	}
	p, err := netip.ParsePrefix(s)
	if err != nil || !p.Addr().Is4() || p.Bits() > outsideSubnetBits {
		return netip.Prefix{}, spec.Errorf(spec.CodeInvalidArgument, "dockerio.subnets", "subnet range %q is not an IPv4 CIDR of /%d or wider", s, outsideSubnetBits)
	}
	return p.Masked(), nil
}

// hasEgress reports whether the adapter can make allowlist sandboxes (it
// was given the proxy's binary).
func (a *Adapter) hasEgress() bool { return a.egress != nil }

// egressImage returns the egress image's id, importing it once: a root
// file system holding only the proxy, root-owned and read-only.
func (a *Adapter) egressImage(ctx context.Context, cli *client.Client) (string, error) {
	a.netMu.Lock()
	defer a.netMu.Unlock()
	if a.egressImageID != "" {
		return a.egressImageID, nil
	}
	bin, err := a.egress.Bytes()
	if err != nil {
		return "", payloadError(err, "dockerio.egress", "reading the egress binary")
	}
	sum := sha256.Sum256(bin)
	ref := egressRepo + ":" + hex.EncodeToString(sum[:8])
	if img, err := cli.ImageInspect(ctx, ref); err == nil {
		a.egressImageID = img.ID
		return img.ID, nil
	} else if !cerrdefs.IsNotFound(err) {
		return "", translate(err, "dockerio.egress", "inspecting image %s", ref)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	hdrs := []*tar.Header{
		{Typeflag: tar.TypeDir, Name: "run/", Mode: 0o755, ModTime: now},
		{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o755, ModTime: now},
		{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(egressBinary, "/"), Mode: 0o555, Size: int64(len(bin)), ModTime: now},
	}
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			return "", spec.Wrap(spec.CodeEngine, "dockerio.egress", err, "building the egress image")
		}
	}
	if _, err := tw.Write(bin); err != nil {
		return "", spec.Wrap(spec.CodeEngine, "dockerio.egress", err, "building the egress image")
	}
	if err := tw.Close(); err != nil {
		return "", spec.Wrap(spec.CodeEngine, "dockerio.egress", err, "building the egress image")
	}
	rc, err := cli.ImageImport(ctx, image.ImportSource{Source: &buf, SourceName: "-"}, ref, image.ImportOptions{Message: "stockade egress proxy"})
	if err != nil {
		return "", translate(err, "dockerio.egress", "importing image %s", ref)
	}
	err = progressError(rc)
	_ = rc.Close() // only read; progressError has the import's outcome
	if err != nil {
		return "", spec.Wrap(spec.CodeEngine, "dockerio.egress", err, "importing image %s", ref)
	}
	img, err := cli.ImageInspect(ctx, ref)
	if err != nil {
		return "", translate(err, "dockerio.egress", "inspecting image %s", ref)
	}
	a.egressImageID = img.ID
	return img.ID, nil
}

// progressError reads a JSON progress stream to its end and returns the
// error it reports, if any.
func progressError(r io.Reader) error {
	dec := json.NewDecoder(io.LimitReader(r, 1<<20))
	for {
		var m struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&m); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if m.Error != "" {
			return fmt.Errorf("%s", m.Error)
		}
	}
}

// allocSubnet finds the first block of the given size in the range that no
// network on the daemon overlaps. Callers hold netMu; another runtime's
// concurrent pick is caught by the daemon's overlap refusal (retried).
func (a *Adapter) allocSubnet(nets []network.Summary, bits int, skip []netip.Prefix) (netip.Prefix, error) {
	used := slices.Clone(skip)
	for _, n := range nets {
		for _, c := range n.IPAM.Config {
			if p, err := netip.ParsePrefix(c.Subnet); err == nil {
				used = append(used, p)
			}
		}
	}
	step := uint32(1) << (32 - bits)
	base := a.subnets.Addr().As4()
	start := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	end := start + uint32(1)<<(32-a.subnets.Bits())
	for at := start; at < end; at += step {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(at >> 24), byte(at >> 16), byte(at >> 8), byte(at)}), bits)
		if !slices.ContainsFunc(used, p.Overlaps) {
			return p, nil
		}
	}
	return netip.Prefix{}, spec.Errorf(spec.CodeUnsupported, "dockerio.network", "no free /%d left in %s (set STOCKADE_SUBNETS to a wider range)", bits, a.subnets)
}

// netFacts is what readback checks of a network.
type netFacts struct {
	ID     string
	Subnet netip.Prefix
}

// ensureNetworkOf makes (or adopts by name) a bridge network, and reads it
// back: driver, labels, internal, options, one IPv4 subnet. Its subnet is
// a free /bits of the adapter's range, or, with bits 0, the daemon's pick
// from its default pool. Every network a sandbox has is made here.
func (a *Adapter) ensureNetworkOf(ctx context.Context, cli *client.Client, name string, labels, options map[string]string, internal bool, bits int) (netFacts, error) {
	a.netMu.Lock()
	defer a.netMu.Unlock()
	var tried []netip.Prefix
	for attempt := 0; ; attempt++ {
		// One list serves both: is the name taken (adopt it), and which
		// subnets are.
		list, err := cli.NetworkList(ctx, network.ListOptions{})
		if err != nil {
			return netFacts{}, translate(err, "dockerio.network", "listing networks")
		}
		for _, n := range list {
			if n.Name == name {
				return a.verifyNetwork(ctx, cli, n.ID, name, labels, options, internal)
			}
		}
		// IPv6 off in so many words: a daemon may enable it on every new
		// network by default (default-network-opts), and the readback
		// below refuses a network with it.
		ipv6 := false
		opts := network.CreateOptions{Driver: "bridge", Internal: internal, Options: options, Labels: labels, EnableIPv6: &ipv6}
		var subnet netip.Prefix
		where := "the daemon's default pool"
		if bits > 0 {
			if subnet, err = a.allocSubnet(list, bits, tried); err != nil {
				return netFacts{}, err
			}
			where = subnet.String()
			opts.IPAM = &network.IPAM{Driver: "default", Config: []network.IPAMConfig{{Subnet: where}}}
		}
		resp, err := cli.NetworkCreate(ctx, name, opts)
		if err != nil {
			terr := translate(err, "dockerio.network", "network %s on %s", name, where)
			// Another daemon user took the subnet (or the name) between
			// our list and create: look again.
			if attempt < 8 && (strings.Contains(err.Error(), "overlap") || spec.IsCode(terr, spec.CodeConflict)) {
				tried = append(tried, subnet)
				continue
			}
			return netFacts{}, terr
		}
		return a.verifyNetwork(ctx, cli, resp.ID, name, labels, options, internal)
	}
}

// verifyNetwork reads a network back: ours (labels), a bridge, internal or
// not as asked, with the options asked, and one IPv4 subnet.
func (a *Adapter) verifyNetwork(ctx context.Context, cli *client.Client, id, name string, labels, options map[string]string, internal bool) (netFacts, error) {
	n, err := cli.NetworkInspect(ctx, id, network.InspectOptions{})
	if err != nil {
		return netFacts{}, translate(err, "dockerio.network", "inspecting network %s", name)
	}
	bad := func(field string, got, want any) error {
		return spec.Errorf(spec.CodeUnsupported, "dockerio.readback", "network %s: %s differs: got %s, want %s", name, field, show(got), show(want))
	}
	if !labelsMatch(n.Labels, labels) {
		return netFacts{}, spec.Errorf(spec.CodeConflict, "dockerio.network", "network %s exists with labels %v, not ours", name, n.Labels)
	}
	switch {
	case n.Driver != "bridge":
		return netFacts{}, bad("Driver", n.Driver, "bridge")
	case n.Internal != internal:
		return netFacts{}, bad("Internal", n.Internal, internal)
	case n.EnableIPv6:
		return netFacts{}, bad("EnableIPv6", true, false)
	case len(n.IPAM.Config) != 1:
		return netFacts{}, bad("IPAM.Config", n.IPAM.Config, "one subnet")
	}
	for k, v := range options {
		if n.Options[k] != v {
			return netFacts{}, bad("Options["+k+"]", n.Options[k], v)
		}
	}
	subnet, err := netip.ParsePrefix(n.IPAM.Config[0].Subnet)
	if err != nil || !subnet.Addr().Is4() {
		return netFacts{}, bad("IPAM.Config.Subnet", n.IPAM.Config[0].Subnet, "an IPv4 subnet")
	}
	return netFacts{ID: n.ID, Subnet: subnet}, nil
}

// internalNetwork makes or adopts an allowlist sandbox's network: internal
// (Docker drops its forwarded traffic) and with no address on the host's
// side of the bridge (inhibit_ipv4), so neither the outside nor the host's
// own services are reachable from it; only the egress container is.
func (a *Adapter) internalNetwork(ctx context.Context, cli *client.Client, sb Sandbox) (netFacts, error) {
	return a.ensureNetworkOf(ctx, cli, Name(sb.Owner, sb.ID, RoleNetwork), Labels(sb.Owner, sb.ID, RoleNetwork, sb.Revision),
		map[string]string{optInhibitIPv4: "true"}, true, sandboxSubnetBits)
}

// OutsideName is the owner's shared outside network's name.
func OutsideName(owner string) string { return "stockade-" + owner + "-outside" }

// outsideNetwork makes or adopts the owner's shared outside network, where
// egress containers reach the world. Inter-container traffic on it is off:
// one sandbox's proxy cannot reach another's.
func (a *Adapter) outsideNetwork(ctx context.Context, cli *client.Client, owner string, cached bool) (netFacts, error) {
	if cached {
		a.netMu.Lock()
		f, ok := a.outside[owner]
		a.netMu.Unlock()
		// One cheap inspect: it may have been removed behind our back.
		if ok {
			if _, err := cli.NetworkInspect(ctx, f.ID, network.InspectOptions{}); err == nil {
				return f, nil
			}
			a.forgetOutside(owner)
		}
	}
	// Owner and role only: the network outlives any one revision of the
	// runtime's profile, and belongs to no one sandbox (it goes with the
	// last that uses it), so a revision in its identity would refuse it
	// for good after an upgrade.
	labels := map[string]string{LabelOwner: owner, LabelRole: string(RoleOutside)}
	f, err := a.ensureNetworkOf(ctx, cli, OutsideName(owner), labels, map[string]string{optEnableICC: "false"}, false, outsideSubnetBits)
	if err == nil {
		a.netMu.Lock()
		if a.outside == nil {
			a.outside = map[string]netFacts{}
		}
		a.outside[owner] = f
		a.netMu.Unlock()
	}
	return f, err
}

// dropOutsideIfUnused removes the owner's outside network when no egress
// container of the owner is left, in any state (a stopped sandbox's egress
// still needs it), and none is attached: the last allowlist sandbox that
// used it is gone. It holds outsideMu, so a create in progress either made
// its egress already (it is listed) or has not yet chosen the network (and
// makes it anew). A network that does not carry the owner's outside labels
// is not touched.
func (a *Adapter) dropOutsideIfUnused(ctx context.Context, cli *client.Client, owner string) error {
	a.outsideMu.Lock()
	defer a.outsideMu.Unlock()
	f := filters.NewArgs(filters.Arg("label", LabelOwner+"="+owner), filters.Arg("label", LabelRole+"="+string(RoleEgress)))
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return translate(err, "dockerio.egress", "listing egress containers")
	}
	if len(cs) > 0 {
		return nil
	}
	n, err := cli.NetworkInspect(ctx, OutsideName(owner), network.InspectOptions{})
	if cerrdefs.IsNotFound(err) {
		a.forgetOutside(owner)
		return nil
	} else if err != nil {
		return translate(err, "dockerio.egress", "inspecting network %s", OutsideName(owner))
	}
	if n.Labels[LabelOwner] != owner || n.Labels[LabelRole] != string(RoleOutside) || len(n.Containers) > 0 {
		return nil
	}
	a.forgetOutside(owner)
	return remove(ctx, cli, resource(KindNetwork, n.ID, n.Name, n.Labels))
}

// forgetOutside drops the cached outside network (it failed a use).
func (a *Adapter) forgetOutside(owner string) {
	a.netMu.Lock()
	delete(a.outside, owner)
	a.netMu.Unlock()
}

// proxyAddr is the proxy's address on an internal network: its subnet's
// last host address, away from the low addresses Docker hands out in turn
// (the gateway's, then the workload's), so no start order can take it.
func proxyAddr(subnet netip.Prefix) netip.Addr {
	a := subnet.Masked().Addr().As4()
	n := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	n += uint32(1)<<(32-subnet.Bits()) - 2
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}

// egressTmpfs is the egress container's only writable place: its control
// socket's directory.
func egressTmpfs(u spec.User) map[string]string {
	return map[string]string{"/run": tmpfsOptions(1<<20, u)}
}

// egressCmd is the proxy's command line for a sandbox.
// Its last egressCmdVaries words (the host's addresses, the rules) change
// while the proxy runs, through its control link: readback does not
// compare them.
func egressCmd(sb Sandbox) []string {
	self := HostAddrs()
	texts := make([]string, len(self))
	for i, a := range self {
		texts[i] = a.String()
	}
	return []string{"serve", "--listen", sb.Proxy, "--control", egressControl,
		"--host", strings.Join(texts, ","),
		"--rules-version", strconv.FormatUint(sb.RulesVersion, 10), "--rules", spec.FormatEgressRules(sb.Spec.Policy.Egress)}
}

const egressCmdVaries = 6

// HostAddrs returns the host's own addresses, sorted: every address of
// every interface, up or down (the bridges' gateways among them), but
// loopback and link-local ones, which the proxy refuses anyway. The proxy,
// in a container of its own, cannot see them; the runtime, on the host,
// hands them over (at the proxy's start and on every rules apply, and when
// they change). When the interfaces cannot be read it returns none: the
// special ranges still hold.
func HostAddrs() []netip.Addr {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, i := range ifs {
		addrs, err := i.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(n.IP)
			if ip = ip.Unmap(); ok && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() {
				out = append(out, ip)
			}
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// egressBody is the egress container's create request: the sandbox
// containers' lockdown (read-only root, no capabilities, no new privileges, the sandbox's
// non-root user, private IPC and cgroup namespaces, limits, no restart),
// the proxy as its command, no workspace, the internal network.
func (a *Adapter) egressBody(sb Sandbox, imageID, internalID string) Body {
	pol := sb.Spec.Policy
	pids := int64(egressPids)
	hc := &container.HostConfig{
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges:true"},
		IpcMode:        "private",
		CgroupnsMode:   "private",
		NetworkMode:    container.NetworkMode(internalID),
		RestartPolicy:  container.RestartPolicy{Name: container.RestartPolicyDisabled},
		Tmpfs:          egressTmpfs(pol.User),
		Resources: container.Resources{
			NanoCPUs:   int64(pol.CPUs * 1e9),
			Memory:     egressMemory,
			MemorySwap: egressMemory,
			PidsLimit:  &pids,
		},
	}
	if a.profile.Init {
		t := true
		hc.Init = &t
	}
	return Body{
		Config: &container.Config{
			Image:       imageID,
			User:        pol.User.String(),
			WorkingDir:  "/",
			Entrypoint:  []string{egressBinary},
			Cmd:         egressCmd(sb),
			Env:         append([]string(nil), environment...),
			Healthcheck: &container.HealthConfig{Test: []string{"NONE"}},
			Labels:      Labels(sb.Owner, sb.ID, RoleEgress, a.profile.Revision()),
		},
		HostConfig: hc,
	}
}

// createEgress makes (or adopts by name) the egress container with its
// fixed address on the internal network, then joins it to the outside
// network before it starts (API 1.41 takes one endpoint at create).
func (a *Adapter) createEgress(ctx context.Context, cli *client.Client, sb Sandbox, internal netFacts) (string, error) {
	imageID, err := a.egressImage(ctx, cli)
	if err != nil {
		return "", err
	}
	b := a.egressBody(sb, imageID, internal.ID)
	name := Name(sb.Owner, sb.ID, RoleEgress)
	nc := &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
		internal.ID: {IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: proxyAddr(internal.Subnet).String()}},
	}}
	id, found, err := createOrAdopt(ctx, cli, "dockerio.egress", name, b, nc)
	if err != nil {
		return "", err
	}
	if found != nil && found.NetworkSettings != nil {
		for _, att := range found.NetworkSettings.Networks {
			if att != nil && att.NetworkID == sb.Outside {
				return id, nil // joined before the crash
			}
		}
	}
	if err := cli.NetworkConnect(ctx, sb.Outside, id, nil); err != nil {
		return id, translate(err, "dockerio.egress", "joining %s to the outside network", name)
	}
	return id, nil
}

// startEgress starts the egress container and reads it back running.
func (a *Adapter) startEgress(ctx context.Context, cli *client.Client, sb Sandbox) error {
	if err := cli.ContainerStart(ctx, sb.Egress, container.StartOptions{}); err != nil {
		return translate(err, "dockerio.egress", "starting egress %s", sb.Egress)
	}
	return a.readbackEgress(ctx, cli, sb, true)
}

// createEgressRole makes an allowlist sandbox's egress container on its
// internal network (made by the caller) and the owner's outside network,
// and starts it in the background; sb.Outside and Egress are set as each
// is made.
func (a *Adapter) createEgressRole(ctx context.Context, cli *client.Client, sb Sandbox, internal netFacts) (Sandbox, error) {
	a.outsideMu.Lock()
	defer a.outsideMu.Unlock()
	outside, err := a.outsideNetwork(ctx, cli, sb.Owner, true)
	if err != nil {
		return sb, err
	}
	sb.Outside = outside.ID
	sb.Egress, err = a.createEgress(ctx, cli, sb, internal)
	if err != nil && sb.Egress != "" {
		// Made, but not joined to the outside network: the cached one
		// may be gone (removed by hand). Read it back, made anew if need
		// be (which replaces the cached one), and join once more.
		if outside, oerr := a.outsideNetwork(ctx, cli, sb.Owner, false); oerr == nil && outside.ID != sb.Outside {
			sb.Outside = outside.ID
			if cerr := cli.NetworkConnect(ctx, sb.Outside, sb.Egress, nil); cerr == nil {
				err = nil
			}
		}
	}
	if err != nil {
		a.forgetOutside(sb.Owner)
		return sb, err
	}
	if err := a.readbackEgress(ctx, cli, sb, false); err != nil {
		return sb, err
	}
	// Started now and in the background: a container start on two networks
	// is the slowest step of a create, and it overlaps the workload's
	// containers and start this way. StartSandbox (or a removal) waits for
	// it. The proxy admits only what it was told to.
	done := make(chan error, 1)
	a.netMu.Lock()
	if a.pendingEgress == nil {
		a.pendingEgress = map[string]chan error{}
	}
	a.pendingEgress[pendingKey(sb)] = done
	a.netMu.Unlock()
	//nolint:gosec // G118: the start outlives the create's request on purpose (see above); it is bounded by cleanupTimeout.
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		done <- a.startEgress(ctx, cli, sb)
	}()
	return sb, nil
}

// egressStarted waits for the egress start its create began; without one
// pending (a later runtime, or a second call), it reads the egress back
// running.
func (a *Adapter) egressStarted(ctx context.Context, cli *client.Client, sb Sandbox) error {
	done, ok := a.takePendingEgress(sb)
	if !ok {
		return a.readbackEgress(ctx, cli, sb, true)
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return translate(ctx.Err(), "dockerio.egress", "waiting for egress %s to start", sb.Egress)
	}
}

// settleEgress waits (bounded) for a pending egress start of a sandbox
// about to be removed, so no start races the removal.
func (a *Adapter) settleEgress(sb Sandbox) {
	if done, ok := a.takePendingEgress(sb); ok {
		select {
		case <-done: //nolint:errcheck // the sandbox is going: how its egress started no longer matters
		case <-time.After(cleanupTimeout):
		}
	}
}

// takePendingEgress removes and returns the pending egress start of sb.
func (a *Adapter) takePendingEgress(sb Sandbox) (chan error, bool) {
	key := pendingKey(sb)
	a.netMu.Lock()
	defer a.netMu.Unlock()
	done, ok := a.pendingEgress[key]
	delete(a.pendingEgress, key)
	return done, ok
}

func pendingKey(sb Sandbox) string { return sb.Owner + "/" + sb.ID }

// OpenEgress opens a control link to the sandbox's proxy: an exec of
// `stockade-egress control SOCKET` in the egress container whose stdin and
// stdout are the link.
func (a *Adapter) OpenEgress(ctx context.Context, sb Sandbox, stderr io.Writer) (WardenConn, error) {
	if sb.Egress == "" {
		return WardenConn{}, spec.Errorf(spec.CodeConflict, "dockerio.egress", "sandbox %s has no egress container", sb.ID)
	}
	return a.execLink(ctx, sb.Egress, sb.Spec.Policy.User.String(), "/", stderr, egressBinary, "control", egressControl)
}

// EnsureEgress makes an allowlist sandbox's egress role whole again (after
// a restart of the runtime, or a proxy that died): the networks read back,
// the egress container read back running, or else removed and made anew
// with the sandbox's current rules and started. It returns the sandbox with
// the egress container's id, which changes when it was made anew.
func (a *Adapter) EnsureEgress(ctx context.Context, sb Sandbox) (Sandbox, bool, error) {
	cli, err := a.ready(ctx)
	if err != nil {
		return sb, false, err
	}
	internal, err := a.verifyNetwork(ctx, cli, sb.Network, Name(sb.Owner, sb.ID, RoleNetwork), Labels(sb.Owner, sb.ID, RoleNetwork, sb.Revision),
		map[string]string{optInhibitIPv4: "true"}, true)
	if err != nil {
		return sb, false, err
	}
	if want := netip.AddrPortFrom(proxyAddr(internal.Subnet), proxyPort).String(); sb.Proxy != want {
		return sb, false, unsupported("dockerio.egress", "sandbox %s: its proxy address is %s, its network says %s", sb.ID, sb.Proxy, want)
	}
	a.outsideMu.Lock()
	defer a.outsideMu.Unlock()
	outside, err := a.outsideNetwork(ctx, cli, sb.Owner, false)
	if err != nil {
		return sb, false, err
	}
	if sb.Egress != "" && outside.ID == sb.Outside && a.readbackEgress(ctx, cli, sb, true) == nil {
		return sb, false, nil
	}
	// Gone, stopped or not as made: a new one (it holds nothing but
	// decisions the runtime has not read, a loss the egress log marks).
	if sb.Egress != "" {
		if err := cli.ContainerRemove(ctx, sb.Egress, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return sb, false, translate(err, "dockerio.egress", "removing egress %s", sb.Egress)
		}
	}
	if err := cli.ContainerRemove(ctx, Name(sb.Owner, sb.ID, RoleEgress), container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return sb, false, translate(err, "dockerio.egress", "removing egress %s", Name(sb.Owner, sb.ID, RoleEgress))
	}
	sb.Outside = outside.ID
	if sb.Egress, err = a.createEgress(ctx, cli, sb, internal); err != nil {
		return sb, true, err
	}
	return sb, true, a.startEgress(ctx, cli, sb)
}

// ProxyEnv returns a process's environment in a sandbox with a proxy: its
// own, then HTTP_PROXY, HTTPS_PROXY and NO_PROXY in both cases, unless the
// process set them itself. The proxy's user name is the process id, which
// the proxy records with each decision (as the client claims it).
func ProxyEnv(sb Sandbox, processID string, env []string) []string {
	if sb.Proxy == "" {
		return env
	}
	url := "http://" + processID + "@" + sb.Proxy
	out := slices.Clone(env)
	set := map[string]bool{}
	for _, e := range env {
		n, _, _ := strings.Cut(e, "=")
		set[n] = true
	}
	for _, kv := range [][2]string{{"HTTP_PROXY", url}, {"HTTPS_PROXY", url}, {"NO_PROXY", "localhost,127.0.0.1,::1"}} {
		for _, n := range []string{kv[0], strings.ToLower(kv[0])} {
			if !set[n] {
				out = append(out, n+"="+kv[1])
			}
		}
	}
	return out
}
