package test

import (
	"context"
	"testing"
	"time"

	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/spec"
)

// csOutsideExists reports whether the owner's outside network exists.
func csOutsideExists(t *testing.T, cli *client.Client, owner string) bool {
	t.Helper()
	_, err := cli.NetworkInspect(context.Background(), dockerio.OutsideName(owner), network.InspectOptions{})
	if client.IsErrNotFound(err) {
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
	e := newAPI(t, stockade.Options{})
	owner := e.rt.Owner()
	gw := bridgeGateway(t, e.cli)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	create := func() *stockade.Sandbox {
		t.Helper()
		sb, err := e.rt.CreateSandbox(ctx, stockade.SandboxSpec{Image: e.image, Policy: allowlistPolicy(gw + ":1"), Lifetime: spec.Kept})
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
	if !csOutsideExists(t, e.cli, owner) {
		t.Fatal("no outside network after an allowlist create")
	}
	remove(one)
	if csOutsideExists(t, e.cli, owner) {
		t.Fatal("the outside network outlived its only allowlist sandbox")
	}

	a, b := create(), create()
	remove(a)
	if !csOutsideExists(t, e.cli, owner) {
		t.Fatal("the outside network went while another allowlist sandbox uses it")
	}
	remove(b)
	if csOutsideExists(t, e.cli, owner) {
		t.Fatal("the outside network outlived the last allowlist sandbox")
	}

	// A leftover (a crash between the last removal and the network's):
	// recovery removes it when no sandbox needs it. A kept sandbox without
	// the allowlist stays and does not keep it.
	plain := e.sandbox(t, spec.Kept)
	if _, err := e.cli.NetworkCreate(ctx, dockerio.OutsideName(owner), network.CreateOptions{
		Labels: map[string]string{dockerio.LabelOwner: owner, dockerio.LabelRole: string(dockerio.RoleOutside)},
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.rt.Close(); err != nil {
		t.Fatal(err)
	}
	rt, err := stockade.Open(ctx, stockade.Options{Journal: e.journal})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer rt.Close()
	if csOutsideExists(t, e.cli, owner) {
		t.Fatal("recovery left the outside network though no sandbox needs it")
	}
	if _, err := rt.Sandbox(plain.ID()); err != nil {
		t.Fatalf("the kept sandbox after recovery: %v", err)
	}
}
