package pool

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/test/testkit"
)

// TestServePoolCLI: `stockade serve --pool` on the real daemon keeps a warm
// pool that `pool ls` reports; `sandbox create` and `run` through the CLI
// claim from it (a pooled id, the warm count rising) with their env, dir
// and labels applied at the claim; `sandbox ls` hides the pooled sandboxes
// and `--all` shows them; `pool resize` empties it. Everything is removed
// by the test (the journal owner's cleanup catches what a failure leaves).
func TestServePoolCLI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e := testkit.NewCLI(t) // its owner cleanup is registered first, so runs last
	// The pool's spec is what the creates below ask for: the default image
	// (stockade/toolbox:dev) and testkit.SmallPolicy's limits.
	const policy = "memory=128m,pids=64"
	s := e.Serve(t, ctx, "--pool", "tb="+policy+",size=2", "--pool-refills", "2")

	pools := func() host.PoolInfo {
		t.Helper()
		code, out, errOut := e.Run(t, "", "pool", "ls", "--json")
		if code != 0 {
			t.Fatalf("pool ls: %d %q", code, errOut)
		}
		var p host.PoolInfo
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 1 {
			t.Fatalf("pool ls: want one pool, got %q", out)
		}
		if err := json.Unmarshal([]byte(lines[0]), &p); err != nil || p.Name != "tb" {
			t.Fatalf("pool ls: %q: %+v %v", out, p, err)
		}
		return p
	}
	await := func(what string, ok func(host.PoolInfo) bool) host.PoolInfo {
		t.Helper()
		var p host.PoolInfo
		for p = pools(); !ok(p); p = pools() {
			if ctx.Err() != nil || p.Failures > 0 {
				t.Fatalf("pool never %s: %+v\nserver:\n%s", what, p, s.Logs.String())
			}
			time.Sleep(200 * time.Millisecond)
		}
		return p
	}
	sandboxes := func(all bool) []host.SandboxInfo {
		t.Helper()
		args := []string{"--json", "sandbox", "ls"}
		if all {
			args = append(args, "--all")
		}
		code, out, errOut := e.Run(t, "", args...)
		if code != 0 {
			t.Fatalf("%q: %d %q", args, code, errOut)
		}
		var list []host.SandboxInfo
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if line == "" {
				continue
			}
			var si host.SandboxInfo
			if err := json.Unmarshal([]byte(line), &si); err != nil {
				t.Fatalf("%q: %q: %v", args, line, err)
			}
			list = append(list, si)
		}
		return list
	}
	pooledIDs := func() []string {
		t.Helper()
		var ids []string
		for _, si := range sandboxes(true) {
			if si.Phase == lifecycle.PhasePooled {
				if si.Pool != "tb" {
					t.Fatalf("pooled sandbox listed %+v", si)
				}
				ids = append(ids, si.ID)
			}
		}
		return ids
	}

	p := await("ready 2", func(p host.PoolInfo) bool { return p.Ready == 2 && p.Filling == 0 })
	if p.Size != 2 || p.Warm != 0 || p.Cold != 0 || !strings.HasPrefix(p.Image, "sha256:") {
		t.Fatalf("a full pool: %+v", p)
	}
	before := pooledIDs()
	if len(before) != 2 {
		t.Fatalf("sandbox ls --all: pooled %v, want 2", before)
	}
	if list := sandboxes(false); len(list) != 0 {
		t.Fatalf("sandbox ls lists pooled sandboxes: %+v", list)
	}
	if code, out, _ := e.Run(t, "", "pool", "ls"); code != 0 || !strings.HasPrefix(out, "NAME") || !strings.Contains(out, "tb ") {
		t.Fatalf("pool ls: %d %q", code, out)
	}

	code, out, errOut := e.Run(t, "", "sandbox", "create", "--memory", "128m", "--pids", "64",
		"--env", "GREETING=hi", "--dir", "/tmp", "--label", "job=pool-serve")
	id := strings.TrimSpace(out)
	if code != 0 || id == "" {
		t.Fatalf("create: %d %q %q", code, out, errOut)
	}
	if !slices.Contains(before, id) {
		t.Fatalf("sandbox %s is not one of the pooled %v: the create was cold", id, before)
	}
	p = await("warm 1 and refilled", func(p host.PoolInfo) bool { return p.Warm == 1 && p.Ready == 2 && p.Filling == 0 })
	if p.Cold != 0 {
		t.Fatalf("after a claim: %+v", p)
	}
	if code, out, errOut := e.Run(t, "", "exec", "-e", "OTHER=x", id, "--", "sh", "-c", `echo "$GREETING $OTHER"; pwd`); code != 0 || out != "hi x\n/tmp\n" {
		t.Fatalf("exec in the claimed sandbox: %d %q %q", code, out, errOut)
	}
	list := sandboxes(false)
	if len(list) != 1 || list[0].ID != id || list[0].Phase != lifecycle.PhaseStarted || list[0].Pool != "tb" || list[0].Labels["job"] != "pool-serve" {
		t.Fatalf("sandbox ls: %+v, want the claimed %s only", list, id)
	}
	if all := sandboxes(true); len(all) != 3 {
		t.Fatalf("sandbox ls --all: %+v, want the claimed one and 2 pooled", all)
	}
	if code, out, _ := e.Run(t, "", "sandbox", "ls"); code != 0 || !strings.Contains(out, "POOL") || !strings.Contains(out, id) || strings.Contains(out, "pooled") {
		t.Fatalf("sandbox ls table: %d %q", code, out)
	}

	// run claims too: a one-shot sandbox, removed after.
	inPool := pooledIDs()
	if code, out, errOut := e.Run(t, "", "run", "--memory", "128m", "--pids", "64", "--label", "k=v", "--history", "--", "echo", "ok"); code != 0 || !strings.HasPrefix(out, "ok\n") || !strings.Contains(out, "sandbox.claimed") {
		t.Fatalf("run: %d %q %q", code, out, errOut)
	} else if !slices.ContainsFunc(inPool, func(id string) bool { return strings.Contains(out, id) }) {
		t.Fatalf("run's sandbox is not one of the pooled %v:\n%s", inPool, out)
	}
	await("warm 2", func(p host.PoolInfo) bool { return p.Warm == 2 })

	if code, out, errOut := e.Run(t, "", "pool", "resize", "tb", "0"); code != 0 || out != "tb: size=0\n" {
		t.Fatalf("pool resize: %d %q %q", code, out, errOut)
	}
	await("empty", func(p host.PoolInfo) bool { return p.Size == 0 && p.Ready == 0 && p.Filling == 0 })
	if left := pooledIDs(); len(left) != 0 {
		t.Fatalf("pooled sandboxes left after resize 0: %v", left)
	}
	if code, _, errOut := e.Run(t, "", "pool", "resize", "nope", "1"); code != 1 || !strings.Contains(errOut, "not_found") {
		t.Fatalf("resize of an unknown pool: %d %q", code, errOut)
	}
	if code, _, errOut := e.Run(t, "", "sandbox", "rm", "-f", id); code != 0 {
		t.Fatalf("rm: %d %q", code, errOut)
	}
	// A refill that was under way when the pool was emptied ends with its
	// sandbox discarded in the background: gone soon, not at once.
	for all := sandboxes(true); len(all) != 0; all = sandboxes(true) {
		if ctx.Err() != nil {
			t.Fatalf("left after rm: %+v", all)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := s.Stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("serve: %v\n%s", err, s.Logs.String())
	}
}
