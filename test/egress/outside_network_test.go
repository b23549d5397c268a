package egress

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// csOutsideExists reports whether the owner's outside network exists.
func csOutsideExists(t *testing.T, cli *client.Client, owner string) bool {
	t.Helper()
	_, err := cli.NetworkInspect(context.Background(), dockerio.OutsideName(owner), network.InspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

// TestEgressOutsideNetworkLifecycle: the owner's outside network goes with
// the last allowlist sandbox that uses it, stays while another needs it,
// and a leftover one with no allowlist sandbox is removed by recovery.
func TestEgressOutsideNetworkLifecycle(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	owner := e.RT.Owner()
	srv := testkit.StartOutside(t)
	target := fmt.Sprintf("%s:%d", testkit.BridgeGateway(t, e.Docker), srv.Port)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	create := func() *stockade.Sandbox {
		t.Helper()
		sb, err := e.RT.CreateSandbox(ctx, spec.Sandbox{Image: e.Image, Policy: testkit.AllowlistPolicy(target), Lifetime: spec.Kept})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		return sb
	}
	remove := func(sb *stockade.Sandbox) {
		t.Helper()
		if err := sb.Remove(ctx); err != nil {
			t.Fatalf("remove: %v", err)
		}
	}

	one := create()
	if !csOutsideExists(t, e.Docker, owner) {
		t.Fatal("no outside network after an allowlist create")
	}
	remove(one)
	if csOutsideExists(t, e.Docker, owner) {
		t.Fatal("the outside network outlived its only allowlist sandbox")
	}

	a, b := create(), create()
	remove(a)
	if !csOutsideExists(t, e.Docker, owner) {
		t.Fatal("the outside network went while another allowlist sandbox uses it")
	}
	remove(b)
	if csOutsideExists(t, e.Docker, owner) {
		t.Fatal("the outside network outlived the last allowlist sandbox")
	}

	// The last one removed while the next is made: the new one keeps a
	// working outside network, whichever goes first.
	last := create()
	removed := make(chan error, 1)
	go func() { removed <- last.Remove(ctx) }()
	next := create()
	if err := <-removed; err != nil {
		t.Fatalf("remove: %v", err)
	}
	if out, _ := sh(t, next, testkit.ConnectVia(target)); !strings.Contains(out, fmt.Sprintf("hello %d", srv.Port)) {
		t.Fatalf("the sandbox made while the last one was removed does not reach out:\n%s", out)
	}
	remove(next)
	if csOutsideExists(t, e.Docker, owner) {
		t.Fatal("the outside network outlived the last allowlist sandbox")
	}

	// A leftover (a crash between the last removal and the network's):
	// recovery removes it when no sandbox needs it. A kept sandbox without
	// the allowlist stays and does not keep it.
	plain := e.Sandbox(t, spec.Kept)
	if _, err := e.Docker.NetworkCreate(ctx, dockerio.OutsideName(owner), network.CreateOptions{
		Labels: map[string]string{dockerio.LabelOwner: owner, dockerio.LabelRole: string(dockerio.RoleOutside)},
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.RT.Close(); err != nil {
		t.Fatal(err)
	}
	rt, err := stockade.Open(ctx, stockade.Options{Journal: e.Journal})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer func() { _ = rt.Close() }()
	if csOutsideExists(t, e.Docker, owner) {
		t.Fatal("recovery left the outside network though no sandbox needs it")
	}
	if _, err := rt.Sandbox(ctx, plain.ID()); err != nil {
		t.Fatalf("the kept sandbox after recovery: %v", err)
	}
}

// TestEgressHostNeedsExplicitRule: a broad rule (0.0.0.0/0, the host's own
// /16) does not reach the host itself at its primary address; a rule
// naming that address does. The denial says why, and the decision log
// has it.
func TestEgressHostNeedsExplicitRule(t *testing.T) {
	ha := hostAddress(t)
	if ha == "" {
		// Every machine of this kind has one: under CI its absence is a
		// failure, never a silent skip of the host's protection.
		if os.Getenv("CI") == "true" {
			t.Fatal("the host has no non-loopback IPv4 address outside Docker's bridges: nothing to probe")
		}
		t.Skip("the host has no non-loopback IPv4 address outside Docker's bridges")
	}
	e := testkit.NewAPI(t, stockade.Options{})
	srv := testkit.StartOutside(t)
	target := fmt.Sprintf("%s:%d", ha, srv.Port)
	wide := netip.PrefixFrom(netip.MustParseAddr(ha), 16).Masked()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	broad := []string{fmt.Sprintf("0.0.0.0/0:%d", srv.Port), fmt.Sprintf("%s:%d", wide, srv.Port)}
	sb, err := e.RT.CreateSandbox(ctx, spec.Sandbox{Image: e.Image, Policy: testkit.AllowlistPolicy(broad...), Lifetime: spec.Kept})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	defer func() { _ = sb.Remove(context.Background()) }()
	read := func() []egress.Decision { return decisions(t, e.RT, sb.ID()) }

	for _, via := range []struct{ name, script string }{
		{"CONNECT", testkit.ConnectVia(target)},
		{"plain HTTP", testkit.GetVia("http://" + target + "/")},
	} {
		if out, _ := sh(t, sb, via.script); strings.Contains(out, "hello") || !strings.Contains(out, "403") {
			t.Fatalf("%s to the host's address %s under %v reached it:\n%s", via.name, target, broad, out)
		}
	}
	if n := srv.Hits.Load(); n != 0 {
		t.Fatalf("the host's server was reached %d times under broad rules", n)
	}
	waitDecision(t, read, "deny "+target, func(d egress.Decision) bool {
		return d.Verdict == egress.VerdictDeny && d.Port == uint16(srv.Port) && strings.Contains(d.Reason, "host's own address")
	})

	// An explicit host rule: the address itself.
	rule, err := spec.ParseEgressRule(target)
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.SetEgress(ctx, []spec.EgressRule{rule}); err != nil {
		t.Fatalf("set egress: %v", err)
	}
	if out, _ := sh(t, sb, testkit.ConnectVia(target)); !strings.Contains(out, fmt.Sprintf("hello %d", srv.Port)) {
		t.Fatalf("CONNECT to %s with the explicit rule %s:\n%s", target, rule, out)
	}
}
