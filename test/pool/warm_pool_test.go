package pool

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// poolConcurrency is how many claims TestPoolClaims makes at once.
const poolConcurrency = 10

// poolTestSpec is the pool's spec: the toolbox image, small limits.
func poolTestSpec() spec.Sandbox {
	return spec.Sandbox{Image: dockertest.ImageTag, Policy: testkit.SmallPolicy()}
}

// openPooled opens a runtime on a fresh journal with one pool of size
// sandboxes of poolTestSpec; the owner's resources go when t ends.
func openPooled(t testing.TB, size, refills int) *stockade.Runtime {
	t.Helper()
	cli := dockertest.Client(t)
	dockertest.ImageID(t, cli)
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt, err := stockade.Open(ctx, stockade.Options{Journal: filepath.Join(dir, "j.db"), PoolRefills: refills,
		Pools: []stockade.PoolSpec{{Name: "t", Sandbox: poolTestSpec(), Size: size}}})
	if err != nil {
		t.Fatal(err)
	}
	dockertest.CleanupOwner(t, cli, rt.Owner())
	t.Cleanup(func() {
		_ = rt.Shutdown(context.Background())
		testkit.CheckAnswered(t, rt)
	})
	return rt
}

// awaitFull waits until the pool "t" has size sandboxes ready.
func awaitFull(t testing.TB, rt *stockade.Runtime, size int) stockade.PoolInfo {
	t.Helper()
	var last stockade.PoolInfo
	for end := time.Now().Add(5 * time.Minute); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		ps, err := rt.Pools(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if last = ps[0]; last.Ready >= size {
			return last
		}
	}
	t.Fatalf("the pool never had %d ready: %+v", size, last)
	return last
}

// claimResult is one claim's figures and what its sandbox showed.
type claimResult struct {
	sb    *stockade.Sandbox
	id    string
	ttfc  time.Duration
	warm  bool
	clean string // why it is not clean; "" when it is
	err   error
}

// cleanCheck lists what a fresh sandbox must not hold: files in the
// workspace's work dir, /tmp and the home, and processes other than the
// keeper, its init, the warden and this check.
const cleanCheck = `ls -A /workspace/work /tmp /home/sandbox; echo ---; ps -o comm`

var wardenSocket = regexp.MustCompile(`(?m)^\.stockade-warden-[0-9]+\.sock\n`)

// claimOne claims a sandbox (a cold create when the pool is empty), times
// the first output byte of its first command and checks it is clean; the
// caller removes it (r.sb).
func claimOne(ctx context.Context, rt *stockade.Runtime, i int) (r claimResult) {
	t0 := time.Now()
	sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: dockertest.ImageTag, Policy: testkit.SmallPolicy(), Lifetime: spec.OneShot,
		Env: []string{"CLAIM=" + strconv.Itoa(i)}, Labels: map[string]string{"claim": strconv.Itoa(i)}})
	if err != nil {
		return claimResult{err: err}
	}
	r.sb, r.id = sb, sb.ID()
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", `echo "claim $CLAIM"; ` + cleanCheck}, Stderr: spec.Discard})
	if err != nil {
		r.err = err
		return r
	}
	first := make([]byte, 1)
	if _, err := io.ReadFull(p.Stdout(), first); err != nil {
		r.err = err
		return r
	}
	r.ttfc = time.Since(t0)
	rest, err := io.ReadAll(p.Stdout())
	if err != nil {
		r.err = err
		return r
	}
	if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 {
		r.err = fmt.Errorf("the check ended %+v: %v", res, err) //nolint:errorlint // err is nil when the result is what failed: %w would print %!w(<nil>)
		return r
	}
	out := string(first) + string(rest)
	head, procs, _ := strings.Cut(out, "---\n")
	// The warden's own socket is in /tmp in every sandbox, fresh or
	// claimed.
	head = wardenSocket.ReplaceAllString(head, "")
	want := fmt.Sprintf("claim %d\n/home/sandbox:\n\n/tmp:\n\n/workspace/work:\n", i)
	if head != want {
		r.clean = fmt.Sprintf("files or env from before: %q, want %q", head, want)
	}
	for _, c := range strings.Fields(procs) {
		switch c {
		case "COMMAND", "init", "docker-init", "sh", "sleep", "stockade-warden", "ps":
		default:
			r.clean += fmt.Sprintf("; a process %q from before", c)
		}
	}
	st, err := sb.State(ctx)
	if err != nil {
		r.err = err
		return r
	}
	r.warm = st.Claimed
	return r
}

// TestPoolClaims claims sandboxes from a warm pool, poolConcurrency at a
// time (STOCKADE_POOL_CLAIMS of them, 20 by default; `make bench-pool`
// claims 200), each round once the pool is full again: every claim is
// warm, every claimed sandbox is clean (no file, no process from before,
// the claimant's env), its history shows the claim with the warden's
// secret rotated, and its time to first command (CreateSandbox called →
// the first output byte) is reported (STOCKADE_POOL_REPORT names a JSON
// file to write the figures to).
func TestPoolClaims(t *testing.T) {
	n := 20
	if s := os.Getenv("STOCKADE_POOL_CLAIMS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n <= 0 {
			t.Fatalf("STOCKADE_POOL_CLAIMS=%q is not a positive number", s)
		}
	}
	rt := openPooled(t, poolConcurrency, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	var results []claimResult
	for round := 0; len(results) < n; round++ {
		awaitFull(t, rt, poolConcurrency)
		k := min(poolConcurrency, n-len(results))
		batch := make([]claimResult, k)
		var wg sync.WaitGroup
		for j := range k {
			wg.Add(1)
			go func() {
				defer wg.Done()
				batch[j] = claimOne(ctx, rt, len(results)+j)
			}()
		}
		wg.Wait()
		// Removed once the whole batch is measured: a removal is the
		// daemon's heaviest work, and would share the machine with the
		// batch's later claims.
		for j := range batch {
			if sb := batch[j].sb; sb != nil {
				if err := sb.Remove(ctx); err != nil && batch[j].err == nil {
					batch[j].err = err
				}
			}
		}
		results = append(results, batch...)
	}
	var ttfc []time.Duration
	seen := map[string]bool{}
	for i, r := range results {
		switch {
		case r.err != nil:
			t.Fatalf("claim %d: %v", i, r.err)
		case !r.warm:
			t.Errorf("claim %d (%s) was made cold though the pool was full", i, r.id)
		case r.clean != "":
			t.Errorf("claim %d (%s) is not clean: %s", i, r.id, r.clean)
		case seen[r.id]:
			t.Errorf("sandbox %s was handed out twice", r.id)
		}
		seen[r.id] = true
		ttfc = append(ttfc, r.ttfc)
	}
	// The claim's history: made for the pool, no process before the
	// claim, the warden's secret rotated by it.
	checkClaimHistory(t, rt, results[0].id)
	p := awaitFull(t, rt, poolConcurrency)
	if p.Warm != uint64(n) || p.Cold != 0 {
		t.Errorf("pool counted %d warm and %d cold claims, want %d warm", p.Warm, p.Cold, n)
	}
	summary := map[string]any{"claims": n, "concurrency": poolConcurrency, "p50_ms": testkit.Ms(testkit.Percentile(ttfc, 0.5)),
		"p99_ms": testkit.Ms(testkit.Percentile(ttfc, 0.99)), "max_ms": testkit.Ms(slices.Max(ttfc)), "min_ms": testkit.Ms(slices.Min(ttfc))}
	t.Logf("time to first command, warm, embedded: %v", summary)
	if path := os.Getenv("STOCKADE_POOL_REPORT"); path != "" {
		b, _ := json.MarshalIndent(summary, "", "  ")
		if err := os.WriteFile(path, append(b, '\n'), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// checkClaimHistory checks a claimed sandbox's journal: reserved for the
// pool, started, its warden up, claimed before any process, with a new
// secret.
func checkClaimHistory(t *testing.T, rt *stockade.Runtime, id string) {
	t.Helper()
	h, err := rt.History(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	var warden lifecycle.WardenStarted
	var claim lifecycle.SandboxClaimed
	var reserved lifecycle.SandboxReserved
	for _, e := range h {
		types = append(types, e.Type)
		switch e.Type {
		case reserved.Type():
			_ = json.Unmarshal(e.Payload, &reserved)
		case warden.Type():
			_ = json.Unmarshal(e.Payload, &warden)
		case claim.Type():
			_ = json.Unmarshal(e.Payload, &claim)
		}
	}
	ci := slices.Index(types, claim.Type())
	pi := slices.IndexFunc(types, func(s string) bool { return strings.HasPrefix(s, "process.") })
	switch {
	case reserved.Pool != "t":
		t.Errorf("sandbox %s reserved for pool %q, want t", id, reserved.Pool)
	case ci < 0 || pi >= 0 && pi < ci:
		t.Errorf("sandbox %s: history %v: no claim, or a process before it", id, types)
	case warden.Secret == "" || claim.Secret == "" || claim.Secret == warden.Secret:
		t.Errorf("sandbox %s: the claim did not rotate the warden's secret (started %q, claimed %q)", id, warden.Secret, claim.Secret)
	case claim.Lifetime != spec.OneShot || claim.Labels["claim"] == "":
		t.Errorf("sandbox %s: claim %+v, want one-shot with the claimant's labels", id, claim)
	}
}

// TestPoolSurvivesRestart: a runtime closed with a full pool leaves its
// pooled sandboxes running; the next Open re-adopts them (their wardens
// reattached) and a claim of one runs a command at once. A runtime whose
// pool is emptied removes them.
func TestPoolSurvivesRestart(t *testing.T) {
	cli := dockertest.Client(t)
	dockertest.ImageID(t, cli)
	path := filepath.Join(t.TempDir(), "j.db")
	opts := stockade.Options{Journal: path, Pools: []stockade.PoolSpec{{Name: "t", Sandbox: poolTestSpec(), Size: 2}}}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rt, err := stockade.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	dockertest.CleanupOwner(t, cli, rt.Owner())
	awaitFull(t, rt, 2)
	before := pooledOf(t, rt)
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	rt, err = stockade.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	awaitFull(t, rt, 2)
	if after := pooledOf(t, rt); !slices.Equal(after, before) {
		t.Fatalf("pooled after reopen %v, before %v", after, before)
	}
	r := claimOne(ctx, rt, 7)
	if r.err != nil || !r.warm || r.clean != "" || !slices.Contains(before, r.id) {
		t.Fatalf("claim of a re-adopted pooled sandbox: %+v", r)
	}
	checkClaimHistory(t, rt, r.id)
	if err := r.sb.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	// The pool emptied: the runtime removes the pooled sandboxes.
	opts.Pools[0].Size = 0
	rt, err = stockade.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rt.Close() }()
	for end := time.Now().Add(time.Minute); len(pooledOf(t, rt)) > 0 && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
	}
	if left := pooledOf(t, rt); len(left) > 0 {
		t.Fatalf("pooled sandboxes left though their pool is empty: %v", left)
	}
}

func pooledOf(t testing.TB, rt *stockade.Runtime) []string {
	t.Helper()
	list, err := rt.Sandboxes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range list {
		if s.Phase == lifecycle.PhasePooled {
			out = append(out, s.ID)
		}
	}
	slices.Sort(out)
	return out
}

var _ host.PoolInfo = stockade.PoolInfo{}

// TestPoolAllowlistRulesAtClaim: an allowlist pool's sandbox is made with
// no rules (its proxy refuses everything); a claim journals the
// claimant's rules after the claim and has the proxy apply them before it
// answers.
func TestPoolAllowlistRulesAtClaim(t *testing.T) {
	cli := dockertest.Client(t)
	dockertest.ImageID(t, cli)
	pol := testkit.SmallPolicy()
	pol.Network = spec.NetworkAllowlist
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rt, err := stockade.Open(ctx, stockade.Options{Journal: filepath.Join(t.TempDir(), "j.db"),
		Pools: []stockade.PoolSpec{{Name: "a", Sandbox: spec.Sandbox{Image: dockertest.ImageTag, Policy: pol}, Size: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	dockertest.CleanupOwner(t, cli, rt.Owner())
	defer func() { _ = rt.Shutdown(context.Background()) }()
	awaitFull(t, rt, 1)
	before := pooledOf(t, rt)
	rules, err := spec.ParseEgressRules("example.com:443,10.213.255.1")
	if err != nil {
		t.Fatal(err)
	}
	claimed := pol
	claimed.Egress = rules
	sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: dockertest.ImageTag, Policy: claimed, Lifetime: spec.OneShot})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sb.Remove(context.Background()) }()
	st, err := sb.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(before, sb.ID()) || !st.Claimed {
		t.Fatalf("sandbox %s (claimed %v) is not one of the pooled %v", sb.ID(), st.Claimed, before)
	}
	if spec.FormatEgressRules(st.Spec.Policy.Egress) != spec.FormatEgressRules(rules) || st.RulesVersion == 0 {
		t.Fatalf("rules after the claim %v (version %d), want %v", st.Spec.Policy.Egress, st.RulesVersion, rules)
	}
	h, err := rt.History(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range h {
		types = append(types, e.Type)
	}
	ci, ei := slices.Index(types, "sandbox.claimed"), slices.Index(types, "sandbox.egress_changed")
	if ci < 0 || ei < ci {
		t.Fatalf("history %v: the rules are not journaled after the claim", types)
	}
}

// TestPoolClaimLosesItsWarden (issue 30, defect 3): a pooled sandbox whose
// warden is lost while its claim rotates the secret is not handed out: the
// claim is served by another sandbox (here a cold create, the pool holding
// one), whose first command runs. The warden is frozen first, so the
// claim's rekey waits for it, and killed once the claim is journaled.
func TestPoolClaimLosesItsWarden(t *testing.T) {
	rt := openPooled(t, 1, 1)
	awaitFull(t, rt, 1)
	victim := pooledOf(t, rt)[0]
	st, err := rt.ReplaySandbox(t.Context(), victim, 0)
	if err != nil || st.Warden == nil || st.Created == nil {
		t.Fatalf("pooled sandbox %s: %+v %v", victim, st.Warden, err)
	}
	pid := strconv.Itoa(st.Warden.PID)
	testkit.DockerExec(t, st.Created.Workload, "kill", "-STOP", pid)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		for ctx.Err() == nil {
			if s, err := rt.ReplaySandbox(ctx, victim, 0); err == nil && s.Claimed {
				// The claim is journaled: its rekey waits on the frozen
				// warden, which now dies.
				_ = exec.Command("docker", "exec", "-u", "65532:65532", st.Created.Workload, "kill", "-KILL", pid).Run()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	r := claimOne(ctx, rt, 1)
	<-killed
	if r.sb != nil {
		t.Cleanup(func() { _ = r.sb.Remove(context.Background()) })
	}
	switch {
	case r.err != nil:
		t.Fatalf("the claim's sandbox does not run its first command: %v", r.err)
	case r.id == victim:
		t.Fatalf("the claim handed out sandbox %s, whose warden was lost during the claim", victim)
	case r.clean != "":
		t.Fatalf("the sandbox served instead is not clean: %s", r.clean)
	}
	// The victim is discarded: removed, its history naming the loss.
	for end := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		s, err := rt.ReplaySandbox(ctx, victim, 0)
		if err == nil && s.Phase == lifecycle.PhaseRemoved {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the victim %s was not removed: %s %v", victim, s.Phase, err)
		}
	}
}
