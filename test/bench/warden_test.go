package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/client"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/helpers"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// The warden's benchmarks: each runs stockade and its anchor alternately
// in one loop.
//
//	go test -run '^$' -bench BenchmarkWarden -benchtime 50x ./test/bench/

// benchPolicy is testkit.SmallPolicy with the machine's two CPUs: a sandbox's
// processes are spawned inside its CPU quota (the warden is in the
// sandbox), and a one-CPU quota throttles a burst of spawns for the rest of
// each 100 ms CFS period. STOCKADE_BENCH_CPUS overrides it.
func benchPolicy() spec.Policy {
	p := testkit.SmallPolicy()
	p.CPUs = 2
	if v, err := strconv.ParseFloat(os.Getenv("STOCKADE_BENCH_CPUS"), 64); err == nil && v > 0 {
		p.CPUs = v
	}
	return p
}

// BenchmarkWardenExecTrue: `true` through the public API, spawned by the
// warden: the start (process reserved → started journaled and returned to
// the caller) and the round trip (start, output to its end, exit
// journaled), vs `docker exec C true` on the CLI in the same sandbox.
// Targets: start p50 ≤ 5 ms; round trip ≤ 0.15× the CLI.
func BenchmarkWardenExecTrue(b *testing.B) {
	rt := newBenchAPI(b)
	ctx := context.Background()
	sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: dockertest.ImageTag, Policy: benchPolicy()})
	if err != nil {
		b.Fatal(err)
	}
	st, err := sb.State(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var starts, trips []time.Duration
	var api, cli time.Duration
	viaAPI := func() {
		t0 := time.Now()
		p, err := sb.Start(ctx, spec.Process{Argv: []string{"true"}, Stdout: spec.Discard, Stderr: spec.Discard})
		if err != nil {
			b.Fatal(err)
		}
		starts = append(starts, time.Since(t0))
		if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 {
			b.Fatalf("api: %+v %v", res, err)
		}
		d := time.Since(t0)
		trips = append(trips, d)
		api += d
	}
	viaCLI := func() {
		t0 := time.Now()
		if out, err := exec.Command("docker", "exec", "-u", "65532:65532", st.Created.Workload, "true").CombinedOutput(); err != nil {
			b.Fatalf("docker exec: %v %s", err, out)
		}
		cli += time.Since(t0)
	}
	alternate(b.N, viaAPI, viaCLI)
	report(b, "api", api, "docker-exec", cli)
	b.ReportMetric(testkit.Ms(testkit.Percentile(starts, 0.5)), "start-p50-ms")
	b.ReportMetric(testkit.Ms(testkit.Percentile(starts, 0.99)), "start-p99-ms")
	b.ReportMetric(testkit.Ms(testkit.Percentile(trips, 0.5)), "trip-p50-ms")
}

// BenchmarkWardenConcurrent100: 100 processes started at once in one
// sandbox (each `sleep 1`, so all 100 run together): the p50 and p99 of
// their starts. Target p99 ≤ 50 ms.
func BenchmarkWardenConcurrent100(b *testing.B) {
	rt := newBenchAPI(b)
	ctx := context.Background()
	pol := benchPolicy()
	pol.Pids = 512
	sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: dockertest.ImageTag, Policy: pol})
	if err != nil {
		b.Fatal(err)
	}
	var all []time.Duration
	for range b.N {
		var mu sync.Mutex
		var wg sync.WaitGroup
		var procs []*stockade.Process
		for range 100 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t0 := time.Now()
				p, err := sb.Start(ctx, spec.Process{Argv: []string{"sleep", "1"}, Stdout: spec.Discard, Stderr: spec.Discard})
				d := time.Since(t0)
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				all = append(all, d)
				procs = append(procs, p)
				mu.Unlock()
			}()
		}
		wg.Wait()
		for _, p := range procs {
			if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 {
				b.Fatalf("%+v %v", res, err)
			}
		}
	}
	b.ReportMetric(testkit.Ms(testkit.Percentile(all, 0.5)), "start-p50-ms")
	b.ReportMetric(testkit.Ms(testkit.Percentile(all, 0.99)), "start-p99-ms")
}

// BenchmarkWardenCLIExec: `stockade exec ID -- true` through a server (the
// whole CLI process: start, dial, exec, exit) vs `docker exec C true`.
// Target ≤ 0.4×.
func BenchmarkWardenCLIExec(b *testing.B) {
	e, c, sock := benchCLIServer(b)
	ctx := context.Background()
	sb, err := c.CreateSandbox(ctx, spec.Sandbox{Image: dockertest.ImageTag, Policy: testkit.SmallPolicy(), Lifetime: spec.Kept})
	if err != nil {
		b.Fatal(err)
	}
	st, err := sb.State(ctx)
	if err != nil {
		b.Fatal(err)
	}
	workload := st.Created.Workload
	var ours, cli time.Duration
	alternate(b.N, func() {
		t0 := time.Now()
		cmd := exec.Command(e.Bin, "exec", sb.ID(), "--", "true")
		cmd.Env = append(os.Environ(), "STOCKADE_SOCKET="+sock)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("stockade exec: %v %s", err, out)
		}
		ours += time.Since(t0)
	}, func() {
		t0 := time.Now()
		if out, err := exec.Command("docker", "exec", "-u", "65532:65532", workload, "true").CombinedOutput(); err != nil {
			b.Fatalf("docker exec: %v %s", err, out)
		}
		cli += time.Since(t0)
	})
	report(b, "stockade-exec", ours, "docker-exec", cli)
}

// BenchmarkWardenRunOneShot: `stockade run -- true` (a one-shot sandbox's
// whole life: create, the warden, the process, stop, remove, all
// journaled; embedded, no server) vs `docker run --rm` of `true` with the
// same isolation flags. Target ≤ 1.3×.
func BenchmarkWardenRunOneShot(b *testing.B) {
	e := testkit.NewCLI(b)
	cli := dockertest.Client(b)
	image := dockertest.ImageID(b, cli)
	pol := spec.DefaultPolicy()
	flags := []string{"run", "--rm", "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
		"--user", pol.User.String(), "--network", "none", "--init", "--ipc", "private", "--cgroupns", "private",
		"--memory", fmt.Sprint(pol.MemoryBytes), "--memory-swap", fmt.Sprint(pol.MemoryBytes), "--pids-limit", fmt.Sprint(pol.Pids),
		"--cpus", fmt.Sprint(pol.CPUs), "--tmpfs", "/tmp:rw,nosuid,nodev,noexec,size=64m", "--tmpfs", "/home/sandbox:rw,nosuid,nodev,noexec,size=64m",
		image, "true"}
	var ours, docker time.Duration
	alternate(b.N, func() {
		t0 := time.Now()
		cmd := exec.Command(e.Bin, "run", "--journal", e.Journal, "--", "true")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("stockade run: %v %s", err, out)
		}
		ours += time.Since(t0)
	}, func() {
		t0 := time.Now()
		if out, err := exec.Command("docker", flags...).CombinedOutput(); err != nil {
			b.Fatalf("docker run: %v %s", err, out)
		}
		docker += time.Since(t0)
	})
	report(b, "stockade-run", ours, "docker-run", docker)
}

// benchCLIServer serves a fresh journal with the built CLI (`stockade
// serve` as a subprocess) and returns a client of it.
func benchCLIServer(b *testing.B, flags ...string) (*testkit.CLIEnv, *client.Client, string) {
	b.Helper()
	e := testkit.NewCLI(b)
	sock := strings.TrimSuffix(e.Journal, ".db") + ".sock"
	cmd := exec.Command(e.Bin, append([]string{"serve", "--journal", e.Journal}, flags...)...)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	var c *client.Client
	for range 300 {
		if _, err := os.Stat(sock); err == nil {
			if c, err = client.Dial(sock); err == nil {
				if _, err = c.Sandboxes(context.Background()); err == nil {
					break
				}
				_ = c.Close()
				c = nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if c == nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		b.Fatal("the server did not answer")
	}
	b.Cleanup(func() {
		_ = c.Close()
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	return e, c, sock
}

// BenchmarkWardenDelivery: what delivering the warden costs a sandbox's
// create: create+start through an adapter that writes the binary into the
// workspace with the seed (one archive call) vs one without a warden,
// alternating. The ratio is the delivery's cost.
func BenchmarkWardenDelivery(b *testing.B) {
	e := testkit.NewDio(b)
	bin, err := helpers.Resolve(helpers.Warden, "", b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	with, err := dockerio.NewAdapter(dockerio.Options{WardenBinary: bin})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = with.Close() }()
	ctx := context.Background()
	if _, err := with.Preflight(ctx); err != nil {
		b.Fatal(err)
	}
	s := e.Spec(nil)
	create := func(a *dockerio.Adapter, total *time.Duration) func() {
		return func() {
			id := testkit.NewID()
			t0 := time.Now()
			sb, err := a.CreateSandbox(ctx, dockerio.SandboxRequest{Owner: e.Owner, ID: id, Spec: s})
			if err != nil {
				b.Fatal(err)
			}
			if err := a.StartSandbox(ctx, sb); err != nil {
				b.Fatal(err)
			}
			*total += time.Since(t0)
			if err := a.RemoveSandbox(ctx, sb); err != nil {
				b.Fatal(err)
			}
		}
	}
	var withW, without time.Duration
	alternate(b.N, create(with, &withW), create(e.Adapter, &without))
	report(b, "with-warden", withW, "without", without)
	b.ReportMetric(float64(bin.Size)/(1<<20), "binary-MiB")
}
