package server_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/client"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// withPool configures one pool of size n over fakeImage.
func withPool(name string, n int) func(*stockade.Options) {
	return func(o *stockade.Options) {
		o.Pools = append(o.Pools, stockade.PoolSpec{Name: name, Sandbox: spec.Sandbox{Image: fakeImage}, Size: n})
	}
}

// awaitServedPool waits, through the client, until pool name reports ready
// sandboxes ready and none filling, and returns its line.
func awaitServedPool(t *testing.T, c *client.Client, name string, ready int) host.PoolInfo {
	t.Helper()
	ctx := ctxFor(t)
	var last host.PoolInfo
	defer func() {
		if t.Failed() {
			t.Logf("pool %s's last line: %+v", name, last)
		}
	}()
	testutil.Eventually(t, fmt.Sprintf("pool %s to have %d ready and none filling", name, ready), func() bool {
		ps, err := c.Pools(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if p.Name == name {
				last = p
			}
		}
		return last.Ready == ready && last.Filling == 0
	})
	return last
}

// servedPooled lists the pooled sandboxes, through the client.
func servedPooled(t *testing.T, c *client.Client) []host.SandboxInfo {
	t.Helper()
	list, err := c.Sandboxes(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	var out []host.SandboxInfo
	for _, s := range list {
		if s.Phase == lifecycle.PhasePooled {
			out = append(out, s)
		}
	}
	return out
}

// TestPoolsServed: a served runtime's pools are listed and resized through
// the client; a create through the client claims a pooled sandbox and its
// env, dir and labels travel, to the claim and to the listing.
func TestPoolsServed(t *testing.T) {
	fx := serve(t, withPool("py", 2))
	ctx := ctxFor(t)
	c := fx.c
	p := awaitServedPool(t, c, "py", 2)
	if p.Size != 2 || p.Image != fakeImage || p.Warm != 0 || p.Cold != 0 || p.Failures != 0 || p.LastError != "" {
		t.Fatalf("pool line %+v", p)
	}
	pooled := servedPooled(t, c)
	var ids []string
	for _, s := range pooled {
		if s.Pool != "py" || s.Lifetime != spec.Kept || s.Claimed {
			t.Fatalf("pooled line %+v", s)
		}
		ids = append(ids, s.ID)
	}
	if len(ids) != 2 {
		t.Fatalf("pooled sandboxes %v, want 2", ids)
	}

	labels := map[string]string{"team": "x", "io.example/run": "7"}
	sb, err := c.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage, Lifetime: spec.Kept, Env: []string{"A=1", "B=2"}, Dir: "/tmp", Labels: labels})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(ids, sb.ID()) {
		t.Fatalf("sandbox %s is not one of the pooled %v: the create was cold", sb.ID(), ids)
	}
	st, err := sb.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Claimed || st.Spec.Dir != "/tmp" || strings.Join(st.Spec.Env, " ") != "A=1 B=2" || st.Spec.Labels["io.example/run"] != "7" {
		t.Fatalf("claimed state: claimed %v, spec %+v", st.Claimed, st.Spec)
	}
	// The sandbox's env goes before the process's own, its dir is the
	// default.
	var mu sync.Mutex
	var last spec.Process // what the warden was asked to spawn
	fx.fake.Script = func(_ dockerio.Sandbox, req dockerio.ExecRequest) dockerio.FakeRun {
		mu.Lock()
		defer mu.Unlock()
		last = req.Spec
		return dockerio.FakeRun{}
	}
	proc, err := sb.Start(ctx, spec.Process{Argv: []string{"true"}, Env: []string{"B=3"}, Stdout: spec.Pipe, Stderr: spec.Pipe})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, res, err := collect(t, ctx, proc); err != nil || res.ExitCode != 0 {
		t.Fatalf("run: %+v %v", res, err)
	}
	mu.Lock()
	if strings.Join(last.Env, " ") != "A=1 B=3" || last.Dir != "/tmp" {
		t.Fatalf("spawn env %q dir %q", last.Env, last.Dir)
	}
	mu.Unlock()
	list, err := c.Sandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var listed host.SandboxInfo
	for _, s := range list {
		if s.ID == sb.ID() {
			listed = s
		}
	}
	if listed.Pool != "py" || !listed.Claimed || listed.Phase != lifecycle.PhaseStarted || listed.Labels["team"] != "x" || listed.Labels["io.example/run"] != "7" {
		t.Fatalf("the claimed sandbox is listed %+v", listed)
	}
	if p := awaitServedPool(t, c, "py", 2); p.Warm != 1 || p.Cold != 0 {
		t.Fatalf("after the claim: %+v, want 1 warm", p)
	}

	// Shrunk to nothing: no pooled sandbox is left, the claimed one stays.
	if err := c.ResizePool(ctx, "py", 0); err != nil {
		t.Fatal(err)
	}
	if p := awaitServedPool(t, c, "py", 0); p.Size != 0 {
		t.Fatalf("after resize 0: %+v", p)
	}
	if left := servedPooled(t, c); len(left) != 0 {
		t.Fatalf("pooled sandboxes left after resize 0: %+v", left)
	}
	if _, err := c.Sandbox(ctx, sb.ID()); err != nil {
		t.Fatalf("the claimed sandbox went with the pool: %v", err)
	}
	// A cold create (the pool is empty) counts as cold, and carries the
	// caller's spec just the same.
	cold, err := c.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage, Dir: "/srv", Labels: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := cold.State(ctx); err != nil || st.Claimed || st.Spec.Dir != "/srv" || st.Spec.Labels["k"] != "v" {
		t.Fatalf("cold state: claimed %v spec %+v %v", st.Claimed, st.Spec, err)
	}
	if p := awaitServedPool(t, c, "py", 0); p.Cold != 1 {
		t.Fatalf("after a cold create: %+v, want 1 cold", p)
	}
}

// TestPoolsServedErrors: the runtime's refusals keep their codes through
// the server; a runtime without pools lists none.
func TestPoolsServedErrors(t *testing.T) {
	fx := serve(t, withPool("py", 0))
	ctx := ctxFor(t)
	for _, tc := range []struct {
		name string
		size int
		code spec.Code
	}{
		{"nope", 1, spec.CodeNotFound},
		{"py", -1, spec.CodeInvalidArgument},
		{"py", stockade.MaxPoolSize + 1, spec.CodeInvalidArgument},
		{"py", 1 << 40, spec.CodeInvalidArgument},
	} {
		if err := fx.c.ResizePool(ctx, tc.name, tc.size); !spec.IsCode(err, tc.code) {
			t.Errorf("resize %s to %d: %v, want %s", tc.name, tc.size, err, tc.code)
		}
	}
	// A bad label is refused by the runtime, through the server.
	if _, err := fx.c.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage, Labels: map[string]string{"bad key": "v"}}); !spec.IsCode(err, spec.CodeInvalidArgument) {
		t.Errorf("a bad label key: %v", err)
	}
	bare := serve(t)
	if ps, err := bare.c.Pools(ctx); err != nil || len(ps) != 0 {
		t.Fatalf("a runtime without pools: %+v %v", ps, err)
	}
}
