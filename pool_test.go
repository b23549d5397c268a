package stockade_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/internal/metricstest"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// withPool configures one pool of size n over fakeImage.
func withPool(name string, n int) func(*stockade.Options) {
	return func(o *stockade.Options) {
		o.Pools = append(o.Pools, stockade.PoolSpec{Name: name, Sandbox: spec.Sandbox{Image: fakeImage}, Size: n})
	}
}

// awaitPool waits until pool name reports ready sandboxes ready and none
// filling, and returns its line.
func awaitPool(t testing.TB, rt *stockade.Runtime, name string, ready int) stockade.PoolInfo {
	t.Helper()
	ctx := context.Background()
	var last stockade.PoolInfo
	defer func() {
		if t.Failed() {
			t.Logf("pool %s's last line: %+v", name, last)
		}
	}()
	testutil.Eventually(t, fmt.Sprintf("pool %s to have %d ready and none filling", name, ready), func() bool {
		ps, err := rt.Pools(ctx)
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

// awaitRemoved waits until the journal shows sandbox id removed (its
// removal may still be under way) and returns its last state.
func awaitRemoved(t testing.TB, rt *stockade.Runtime, id string) lifecycle.Sandbox {
	t.Helper()
	var st lifecycle.Sandbox
	testutil.Eventually(t, "sandbox "+id+" to be journaled removed", func() bool {
		st, _ = rt.ReplaySandbox(context.Background(), id, 0)
		return st.Phase == lifecycle.PhaseRemoved
	})
	return st
}

// pooledIDs lists the pooled sandboxes of the runtime.
func pooledIDs(t testing.TB, rt *stockade.Runtime) []string {
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

func TestPoolClaimAppliesTheCallersSpec(t *testing.T) {
	f := testutil.NewFake(t)
	var mu sync.Mutex
	var seen []dockerio.ExecRequest
	f.Script = func(_ dockerio.Sandbox, req dockerio.ExecRequest) dockerio.FakeRun {
		mu.Lock()
		seen = append(seen, req)
		mu.Unlock()
		return dockerio.FakeRun{}
	}
	rt := testutil.OpenFake(t, f, "", withPool("py", 2))
	ctx := context.Background()
	awaitPool(t, rt, "py", 2)
	before := pooledIDs(t, rt)
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage, Lifetime: spec.OneShot, TTL: time.Hour,
		Env: []string{"A=1", "B=2"}, Dir: "/tmp", Labels: map[string]string{"team": "x"}})
	if !slices.Contains(before, sb.ID()) {
		t.Fatalf("sandbox %s is not one of the pooled %v: the create was cold", sb.ID(), before)
	}
	st, err := sb.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Claimed || st.Pooled() || st.Spec.Lifetime != spec.OneShot || st.Spec.TTL != time.Hour || st.Deadline.IsZero() ||
		st.Spec.Labels["team"] != "x" || st.Spec.Dir != "/tmp" || !st.Admits() {
		t.Fatalf("claimed state %+v", st)
	}
	types := historyTypes(t, rt, sb.ID(), journal.KindSandbox)
	if want := "sandbox.reserved sandbox.created sandbox.started sandbox.warden_started sandbox.claimed"; strings.Join(types, " ") != want {
		t.Fatalf("history %v, want %s", types, want)
	}
	// The sandbox's env goes before the process's own; the process's
	// variable of the same name wins; the sandbox's dir is the default.
	if _, _, res, err := run(t, sb, spec.Process{Argv: []string{"x"}, Env: []string{"B=3"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("run: %+v %v", res, err)
	}
	mu.Lock()
	req := seen[len(seen)-1]
	mu.Unlock()
	if got := strings.Join(req.Spec.Env, " "); got != "A=1 B=3" || req.Spec.Dir != "/tmp" {
		t.Fatalf("exec env %q dir %q", got, req.Spec.Dir)
	}
	// Listed as claimed, with its pool and labels; the pool refills.
	list, err := rt.Sandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if s.ID == sb.ID() && (s.Pool != "py" || s.Phase != lifecycle.PhaseStarted || s.Labels["team"] != "x") {
			t.Fatalf("listed %+v", s)
		}
	}
	p := awaitPool(t, rt, "py", 2)
	if p.Warm != 1 || p.Cold != 0 {
		t.Fatalf("pool %+v, want 1 warm claim", p)
	}
	if slices.Contains(pooledIDs(t, rt), sb.ID()) {
		t.Fatal("the claimed sandbox is still listed pooled")
	}
}

func TestPoolMatchesOnTheKeyOnly(t *testing.T) {
	f := testutil.NewFake(t)
	rt := testutil.OpenFake(t, f, "", withPool("small", 1))
	awaitPool(t, rt, "small", 1)
	before := pooledIDs(t, rt)
	// Another memory limit: another key, a cold create not counted
	// against the pool.
	other := mustCreate(t, rt, spec.Sandbox{Image: fakeImage, Policy: spec.Policy{MemoryBytes: 256 << 20}})
	if slices.Contains(before, other.ID()) {
		t.Fatal("a sandbox with another memory limit was claimed from the pool")
	}
	if p := awaitPool(t, rt, "small", 1); p.Warm != 0 || p.Cold != 0 {
		t.Fatalf("pool %+v after a create of another key", p)
	}
	// The same key with everything a claim may change: warm.
	warm := mustCreate(t, rt, spec.Sandbox{Image: fakeImage, Lifetime: spec.Kept, Env: []string{"X=1"}, Labels: map[string]string{"a": "b"}})
	if !slices.Contains(before, warm.ID()) {
		t.Fatal("a sandbox of the pool's key was made cold")
	}
	// An empty pool: cold, counted.
	if err := rt.ResizePool(context.Background(), "small", 0); err != nil {
		t.Fatal(err)
	}
	awaitPool(t, rt, "small", 0)
	cold := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
	p := awaitPool(t, rt, "small", 0)
	if p.Warm != 1 || p.Cold != 1 || slices.Contains(before, cold.ID()) {
		t.Fatalf("pool %+v; cold sandbox %s, pooled before %v", p, cold.ID(), before)
	}
}

func TestPoolPooledSandboxTakesNoWork(t *testing.T) {
	f := testutil.NewFake(t)
	rt := testutil.OpenFake(t, f, "", withPool("p", 1))
	awaitPool(t, rt, "p", 1)
	id := pooledIDs(t, rt)[0]
	ctx := context.Background()
	sb, err := rt.Sandbox(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Start(ctx, spec.Process{Argv: []string{"x"}}); !spec.IsCode(err, spec.CodeAdmissionClosed) {
		t.Fatalf("start in a pooled sandbox: %v, want admission_closed", err)
	}
	if err := sb.Put(ctx, ".", strings.NewReader("")); !spec.IsCode(err, spec.CodeAdmissionClosed) {
		t.Fatalf("put into a pooled sandbox: %v, want admission_closed", err)
	}
	if _, _, err := sb.Get(ctx, ".", false); !spec.IsCode(err, spec.CodeAdmissionClosed) {
		t.Fatalf("get from a pooled sandbox: %v, want admission_closed", err)
	}
	// Removing one by hand is allowed; the pool makes another.
	if err := sb.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "a pooled sandbox other than the removed "+id, func() bool {
		got := pooledIDs(t, rt)
		return len(got) == 1 && got[0] != id
	})
}

func TestPoolSurvivesReopen(t *testing.T) {
	f := testutil.NewFake(t)
	path := filepath.Join(t.TempDir(), "journal.db")
	rt := testutil.OpenFake(t, f, path, withPool("p", 2))
	awaitPool(t, rt, "p", 2)
	before := pooledIDs(t, rt)
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	// The same pool: the pooled sandboxes are re-adopted and taken back,
	// none made anew.
	rt = testutil.OpenFake(t, f, path, withPool("p", 2))
	awaitPool(t, rt, "p", 2)
	if got := pooledIDs(t, rt); !slices.Equal(got, before) {
		t.Fatalf("after reopen pooled %v, before %v", got, before)
	}
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
	if !slices.Contains(before, sb.ID()) {
		t.Fatal("a re-adopted pooled sandbox was not claimed")
	}
	awaitPool(t, rt, "p", 2)
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	// A runtime with no pool at all (a CLI command's while the server is
	// down) leaves the pooled sandboxes alone.
	rt = testutil.OpenFake(t, f, path)
	kept := pooledIDs(t, rt)
	if len(kept) != 2 {
		t.Fatalf("a runtime without pools touched the pooled sandboxes: %v", kept)
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	// A runtime whose pools do not want them (the pool emptied) removes
	// them (journaled); the claimed one stays.
	rt = testutil.OpenFake(t, f, path, withPool("p", 0))
	testutil.Eventually(t, "no pooled sandbox left once their pool is empty", func() bool { return len(pooledIDs(t, rt)) == 0 })
	if _, err := rt.Sandbox(context.Background(), sb.ID()); err != nil {
		t.Fatalf("the claimed sandbox: %v", err)
	}
	for _, id := range before {
		if id == sb.ID() {
			continue
		}
		if st := awaitRemoved(t, rt, id); st.Phase != lifecycle.PhaseRemoved {
			t.Fatalf("pooled sandbox %s is %s, want removed", id, st.Phase)
		}
	}
}

func TestPoolShutdownRemovesPooled(t *testing.T) {
	f := testutil.NewFake(t)
	rt := testutil.OpenFake(t, f, "", withPool("p", 2))
	awaitPool(t, rt, "p", 2)
	ids := pooledIDs(t, rt)
	if err := rt.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	owned, err := f.ListOwned(context.Background(), rt.Owner())
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range owned {
		if slices.Contains(ids, g.Sandbox) {
			t.Fatalf("pooled sandbox %s left after Shutdown: %+v", g.Sandbox, g.Resources)
		}
	}
}

func TestPoolRefillFailureIsCountedAndClaimsGoCold(t *testing.T) {
	f := testutil.NewFake(t)
	var broken sync.Mutex
	fail := true
	f.Fault = func(op string) error {
		broken.Lock()
		defer broken.Unlock()
		if op == "CreateSandbox" && fail {
			fail = false // the next create (the cold one) passes
			return errors.New("no space left on device")
		}
		return nil
	}
	rt := testutil.OpenFake(t, f, "", func(o *stockade.Options) {
		o.Pools = []stockade.PoolSpec{{Name: "p", Sandbox: spec.Sandbox{Image: fakeImage}, Size: 1}}
	})
	var p stockade.PoolInfo
	testutil.Eventually(t, "the pool's refill failure counted", func() bool {
		ps, err := rt.Pools(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		p = ps[0]
		return p.Failures > 0
	})
	if p.Failures != 1 || !strings.Contains(p.LastError, "no space left") {
		t.Fatalf("pool %+v, want one failure naming its cause", p)
	}
	// The pool backs off; a create meanwhile is cold and works.
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
	if _, err := sb.State(context.Background()); err != nil {
		t.Fatal(err)
	}
	p = awaitPool(t, rt, "p", 1)
	if p.Failures != 1 {
		t.Fatalf("pool %+v after the back-off", p)
	}
}

func TestPoolOptionsRefused(t *testing.T) {
	img := spec.Sandbox{Image: fakeImage}
	for _, tc := range []struct {
		name  string
		pools []stockade.PoolSpec
		want  string
	}{
		{"no name", []stockade.PoolSpec{{Sandbox: img, Size: 1}}, "empty"},
		{"bad name", []stockade.PoolSpec{{Name: "Py", Sandbox: img, Size: 1}}, "only a-z"},
		{"twice", []stockade.PoolSpec{{Name: "a", Sandbox: img, Size: 1}, {Name: "a", Sandbox: img, Size: 1}}, "named twice"},
		{"negative", []stockade.PoolSpec{{Name: "a", Sandbox: img, Size: -1}}, "outside"},
		{"too big", []stockade.PoolSpec{{Name: "a", Sandbox: img, Size: stockade.MaxPoolSize + 1}}, "outside"},
		{"ttl", []stockade.PoolSpec{{Name: "a", Sandbox: spec.Sandbox{Image: fakeImage, TTL: time.Hour}, Size: 1}}, "set at the claim"},
		{"env", []stockade.PoolSpec{{Name: "a", Sandbox: spec.Sandbox{Image: fakeImage, Env: []string{"A=1"}}, Size: 1}}, "set at the claim"},
		{"rules", []stockade.PoolSpec{{Name: "a", Sandbox: spec.Sandbox{Image: fakeImage, Policy: spec.Policy{Network: spec.NetworkAllowlist,
			Egress: []spec.EgressRule{{Host: "example.com", Port: 443}}}}, Size: 1}}, "allowlist rules"},
		{"root", []stockade.PoolSpec{{Name: "a", Sandbox: spec.Sandbox{Image: fakeImage, Policy: spec.Policy{User: spec.User{UID: 0, GID: 5}}}, Size: 1}}, "root"},
		{"no image", []stockade.PoolSpec{{Name: "a", Size: 1}}, "no image"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.db")
			_, err := stockade.Open(context.Background(), stockade.Options{Journal: path, Engine: testutil.NewFake(t), Pools: tc.pools})
			if !spec.IsCode(err, spec.CodeInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open: %v, want invalid_argument naming %q", err, tc.want)
			}
		})
	}
}

// TestPoolMetrics: the pool's figures, the sandboxes by phase and the time
// to first command move on a scrape as claims happen.
func TestPoolMetrics(t *testing.T) {
	f := testutil.NewFake(t)
	rt := testutil.OpenFake(t, f, "", withPool("p", 1))
	m, err := rt.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	url := srv.URL + "/metrics"
	awaitPool(t, rt, "p", 1)
	metricstest.Await(t, url, 30*time.Second, `stockade_pool_ready{pool="p"} 1`+"\n", `stockade_pool_size{pool="p"} 1`+"\n",
		`stockade_sandboxes{phase="pooled"} 1`+"\n", `stockade_pool_claims_total{outcome="warm",pool="p"} 0`+"\n")
	warm := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
	if _, _, _, err := run(t, warm, spec.Process{Argv: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	if err := rt.ResizePool(context.Background(), "p", 0); err != nil {
		t.Fatal(err)
	}
	awaitPool(t, rt, "p", 0)
	cold := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
	if _, _, _, err := run(t, cold, spec.Process{Argv: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	metricstest.Await(t, url, 30*time.Second,
		`stockade_pool_claims_total{outcome="warm",pool="p"} 1`+"\n", `stockade_pool_claims_total{outcome="cold",pool="p"} 1`+"\n",
		`stockade_time_to_first_command_seconds_count{path="warm"} 1`+"\n", `stockade_time_to_first_command_seconds_count{path="cold"} 1`+"\n",
		`stockade_sandboxes{phase="started"} 2`+"\n", `stockade_pool_size{pool="p"} 0`+"\n")
}

// TestPoolTagResolvedBesideTheClaim: a pool configured by tag claims by
// the pin it resolved at Open while the request's tag is resolved; a tag
// moved since then discards the claimed sandbox and makes the create cold,
// of the image the tag names now, and the pool follows the tag.
func TestPoolTagResolvedBesideTheClaim(t *testing.T) {
	f := testutil.NewFake(t)
	const tag = "toolbox:dev"
	other := "sha256:" + strings.Repeat("2", 64)
	f.SetTag(tag, fakeImage)
	rt := testutil.OpenFake(t, f, "", func(o *stockade.Options) {
		o.Pools = []stockade.PoolSpec{{Name: "p", Sandbox: spec.Sandbox{Image: tag}, Size: 1}}
	})
	awaitPool(t, rt, "p", 1)
	before := pooledIDs(t, rt)
	warm := mustCreate(t, rt, spec.Sandbox{Image: tag})
	if !slices.Contains(before, warm.ID()) {
		t.Fatal("a create by the pool's tag was cold")
	}
	awaitPool(t, rt, "p", 1)
	before = pooledIDs(t, rt)
	f.SetTag(tag, other)
	moved := mustCreate(t, rt, spec.Sandbox{Image: tag})
	st, err := moved.State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(before, moved.ID()) || st.Claimed || st.Spec.Image != other {
		t.Fatalf("after the tag moved: sandbox %s claimed %v image %s (pooled before %v)", moved.ID(), st.Claimed, st.Spec.Image, before)
	}
	// The pooled sandbox the speculative claim took is gone, and not
	// counted warm.
	ctx := context.Background()
	if gone := awaitRemoved(t, rt, before[0]); gone.Phase != lifecycle.PhaseRemoved || !gone.Claimed {
		t.Fatalf("the sandbox claimed for a moved tag is %s (claimed %v), want claimed then removed", gone.Phase, gone.Claimed)
	}
	// The pool follows the tag: refilled with the image it names now,
	// claimed warm again.
	p := awaitPool(t, rt, "p", 1)
	if p.Warm != 1 || p.Cold != 1 || p.Image != other {
		t.Fatalf("pool %+v, want one warm and one cold claim, image %s", p, other)
	}
	again := mustCreate(t, rt, spec.Sandbox{Image: tag})
	if st, err := again.State(ctx); err != nil || !st.Claimed || st.Spec.Image != other {
		t.Fatalf("a create by the moved tag once the pool followed it: claimed %v image %s (%v)", st.Claimed, st.Spec.Image, err)
	}
	// An unknown tag fails as Docker says, claiming nothing.
	if _, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: "nope:1"}); !spec.IsCode(err, spec.CodeNotFound) {
		t.Fatalf("create of an unknown tag: %v", err)
	}
}

// TestPoolUnreadyIsReplaced: a pooled sandbox stopped behind the pool's
// back is no longer counted ready: the pool removes it and makes another.
// Its rules cannot be set either: they are its claimant's.
func TestPoolUnreadyIsReplaced(t *testing.T) {
	f := testutil.NewFake(t)
	rt := testutil.OpenFake(t, f, "", withPool("p", 1))
	awaitPool(t, rt, "p", 1)
	id := pooledIDs(t, rt)[0]
	ctx := context.Background()
	sb, err := rt.Sandbox(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.SetEgress(ctx, nil); !spec.IsCode(err, spec.CodeAdmissionClosed) {
		t.Fatalf("rules set on a pooled sandbox: %v, want admission_closed", err)
	}
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if st := awaitRemoved(t, rt, id); st.Phase != lifecycle.PhaseRemoved {
		t.Fatalf("the stopped pooled sandbox is %s, want removed", st.Phase)
	}
	var got []string
	testutil.Eventually(t, "a pooled sandbox after the stop", func() bool {
		got = pooledIDs(t, rt)
		return len(got) == 1
	})
	if got[0] == id {
		t.Fatalf("pooled after the stop: %v", got)
	}
}

// TestPoolShutdownDuringRefill: a Shutdown while a refill is mid-create
// waits for it and removes what it made: nothing is left.
func TestPoolShutdownDuringRefill(t *testing.T) {
	f := testutil.NewFake(t)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.Fault = func(op string) error {
		if op == "StartSandbox" {
			once.Do(func() { close(entered); <-release })
		}
		return nil
	}
	rt := testutil.OpenFake(t, f, "", withPool("p", 1))
	<-entered
	done := make(chan error, 1)
	go func() { done <- rt.Shutdown(context.Background()) }()
	time.Sleep(50 * time.Millisecond) // let the Shutdown reach the pools' close (its outcome does not depend on it)
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	owned, err := f.ListOwned(context.Background(), rt.Owner())
	if err != nil {
		t.Fatal(err)
	}
	if len(owned) > 0 {
		t.Fatalf("left after Shutdown: %+v", owned)
	}
}
