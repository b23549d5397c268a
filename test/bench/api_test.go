package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/volume"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// The API benchmarks run the public API and its anchor (dockerio directly,
// or the same Docker work by hand) alternately in one loop and report both
// and their ratio.
//
//	go test -run '^$' -bench BenchmarkAPI -benchtime 20x ./test/bench/

func newBenchAPI(b *testing.B) *stockade.Runtime {
	b.Helper()
	cli := dockertest.Client(b)
	dockertest.ImageID(b, cli)
	rt, err := stockade.Open(context.Background(), stockade.Options{Journal: filepath.Join(b.TempDir(), "j.db")})
	if err != nil {
		b.Fatal(err)
	}
	dockertest.CleanupOwner(b, cli, rt.Owner())
	b.Cleanup(func() {
		_ = rt.Close()
	})
	return rt
}

// BenchmarkAPIExecTrue: `true` through the public API (process reserved,
// exec created, started and exited journaled: four durable commits, the
// actors, the streams) vs dockerio directly (create, attach, read to EOF,
// wait). Target ratio ≤ 1.10.
func BenchmarkAPIExecTrue(b *testing.B) {
	rt := newBenchAPI(b)
	e := testkit.NewDio(b)
	ctx := context.Background()
	sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: dockertest.ImageTag, Policy: testkit.SmallPolicy()})
	if err != nil {
		b.Fatal(err)
	}
	dsb := e.Sandbox(b, nil)
	var api, dio time.Duration
	viaAPI := func() {
		t0 := time.Now()
		p, err := sb.Start(ctx, spec.Process{Argv: []string{"true"}})
		if err != nil {
			b.Fatal(err)
		}
		go func() { _, _ = io.Copy(io.Discard, p.Stderr()) }()
		_, _ = io.Copy(io.Discard, p.Stdout())
		if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 {
			b.Fatalf("api: %+v %v", res, err)
		}
		api += time.Since(t0)
	}
	viaDockerio := func() {
		t0 := time.Now()
		if r, err := e.TryExec(dsb, nil, "true"); err != nil || r.Code != 0 {
			b.Fatalf("dockerio: %+v %v", r, err)
		}
		dio += time.Since(t0)
	}
	alternate(b.N, viaAPI, viaDockerio)
	report(b, "api", api, "dockerio", dio)
}

// BenchmarkAPIOutput1GiB: 1 GiB of stdout through the public API (read loop,
// credit, pipe, consumer) vs dockerio's Next loop, same command. The ratio
// is the API's throughput over dockerio's. Target ≥ 0.95.
func BenchmarkAPIOutput1GiB(b *testing.B) {
	rt := newBenchAPI(b)
	e := testkit.NewDio(b)
	ctx := context.Background()
	pol := testkit.SmallPolicy()
	pol.CPUs = 2
	sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: dockertest.ImageTag, Policy: pol})
	if err != nil {
		b.Fatal(err)
	}
	dsb := e.Sandbox(b, func(s *spec.Sandbox) { s.Policy.CPUs = 2 })
	size := 1 << 30
	if mib, err := strconv.Atoi(os.Getenv("STOCKADE_BENCH_OUTPUT_MIB")); err == nil && mib > 0 {
		size = mib << 20
	}
	cmd := []string{"/bin/sh", "-c", "yes " + testkit.PatternLine + " | head -c " + strconv.Itoa(size)}
	var api, dio, apiCPU, dioCPU time.Duration
	viaAPI := func() {
		t0, c0 := time.Now(), cpuTime()
		defer func() { apiCPU += cpuTime() - c0 }()
		p, err := sb.Start(ctx, spec.Process{Argv: cmd, Stderr: spec.Discard, OutputQuota: int64(size) + 1})
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, p.Stdout())
		if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 || n != int64(size) {
			b.Fatalf("api: %+v %v, %d bytes", res, err, n)
		}
		api += time.Since(t0)
	}
	viaDockerio := func() {
		t0, c0 := time.Now(), cpuTime()
		defer func() { dioCPU += cpuTime() - c0 }()
		drainOutput(b, e, dsb, cmd, size)
		dio += time.Since(t0)
	}
	alternate(b.N, viaAPI, viaDockerio)
	b.ReportMetric(float64(size)*float64(b.N)/api.Seconds()/(1<<20), "api-MiB/s")
	b.ReportMetric(float64(size)*float64(b.N)/dio.Seconds()/(1<<20), "dockerio-MiB/s")
	b.ReportMetric(dio.Seconds()/api.Seconds(), "throughput-ratio")
	// CPU this process spent per GiB on each side: on two cores shared with
	// the daemon, what the runtime spends is taken from Docker's pipeline.
	gib := float64(size) * float64(b.N) / (1 << 30)
	b.ReportMetric(apiCPU.Seconds()/gib, "api-cpu-s/GiB")
	b.ReportMetric(dioCPU.Seconds()/gib, "dockerio-cpu-s/GiB")
}

// BenchmarkRecovery50: Open's recovery of a journal with 50 live sandboxes
// (30 kept and running, 10 of them with a running process; 10 one-shot whose
// caller is gone; 10 half-made: reserved, some with a volume) vs the same
// Docker work done directly with dockerio: list the owner's resources,
// inspect each sandbox, remove the one-shot and half-made ones. Target ratio
// ≤ 2.
func BenchmarkRecovery50(b *testing.B) {
	cli := dockertest.Client(b)
	dockertest.ImageID(b, cli)
	e := testkit.NewDio(b)
	ctx := context.Background()
	var rec, direct time.Duration
	for range b.N {
		// Build the scene twice, identically: once for the runtime to
		// recover, once for the direct anchor.
		path := filepath.Join(b.TempDir(), fmt.Sprintf("j%d.db", time.Now().UnixNano()))
		owner := buildScene(b, e, path)
		dockertest.CleanupOwner(b, cli, owner)
		t0 := time.Now()
		rt, err := stockade.Open(ctx, stockade.Options{Journal: path, StopGrace: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		rec += time.Since(t0)
		report, err := rt.Recovery(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if got := len(report.Sandboxes); got != 50 {
			b.Fatalf("recovered %d sandboxes, want 50", got)
		}
		_ = rt.Close()

		path2 := filepath.Join(b.TempDir(), fmt.Sprintf("k%d.db", time.Now().UnixNano()))
		owner2 := buildScene(b, e, path2)
		dockertest.CleanupOwner(b, cli, owner2)
		t0 = time.Now()
		owned, err := e.Adapter.ListOwned(ctx, owner2)
		if err != nil {
			b.Fatal(err)
		}
		for _, g := range owned {
			sb := dockerio.Sandbox{Owner: owner2, ID: g.Sandbox, Spec: benchSpec(e.Image, spec.Kept)}
			if _, err := e.Adapter.InspectSandbox(ctx, sb); err != nil {
				b.Fatal(err)
			}
		}
		// The same removals recovery makes: the 10 one-shot sandboxes
		// (stop, then remove) and the 10 half-made ones.
		for _, id := range sceneRemovals[owner2] {
			sb := dockerio.Sandbox{Owner: owner2, ID: id.id, Workload: id.workload}
			if id.workload != "" {
				if _, err := e.Adapter.StopSandbox(ctx, sb, time.Second); err != nil {
					b.Fatal(err)
				}
			}
			if err := e.Adapter.RemoveSandbox(ctx, sb); err != nil {
				b.Fatal(err)
			}
		}
		direct += time.Since(t0)
	}
	report(b, "recovery", rec, "direct", direct)
}

type removal struct{ id, workload string }

// sceneRemovals records, per owner, what the direct anchor must remove.
var sceneRemovals = map[string][]removal{}

func benchSpec(image string, life spec.Lifetime) spec.Sandbox {
	return spec.Sandbox{Image: image, Policy: testkit.SmallPolicy(), Lifetime: life}
}

// buildScene makes 50 live sandboxes on a journal and closes its runtime
// without settling them, as a crash would leave them.
func buildScene(b *testing.B, e *testkit.DioEnv, path string) string {
	b.Helper()
	ctx := context.Background()
	rt, err := stockade.Open(ctx, stockade.Options{Journal: path, StopGrace: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	owner := rt.Owner()
	var rm []removal
	for i := range 40 {
		life := spec.Kept
		if i >= 30 {
			life = spec.OneShot
		}
		sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: dockertest.ImageTag, Policy: testkit.SmallPolicy(), Lifetime: life})
		if err != nil {
			b.Fatal(err)
		}
		if i < 10 {
			p, err := sb.Start(ctx, spec.Process{Argv: []string{"sleep", "600"}, Stdout: spec.Discard, Stderr: spec.Discard})
			if err != nil {
				b.Fatal(err)
			}
			_ = p
		}
		if life == spec.OneShot {
			st, _ := sb.State(ctx)
			rm = append(rm, removal{id: sb.ID(), workload: st.Created.Workload})
		}
	}
	_ = rt.Close()
	// Half-made, as a crash right after the reserved intent leaves them:
	// reserved in the journal; nothing, or the volume, in Docker.
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = j.Close() }()
	rev := e.Adapter.Profile().Revision()
	for i := range 10 {
		id, _ := journal.NewID()
		typ, payload, _ := lifecycle.Encode(lifecycle.SandboxReserved{Owner: owner, Spec: benchSpec(e.Image, spec.Kept), Revision: rev})
		if _, err := j.Append(ctx, journal.Record{Key: journal.Key{Kind: journal.KindSandbox, ID: id}, Type: typ, Payload: payload}); err != nil {
			b.Fatal(err)
		}
		if i%2 == 0 {
			_, err := e.Docker.VolumeCreate(ctx, volume.CreateOptions{Name: dockerio.Name(owner, id, dockerio.RoleVolume),
				Labels: dockerio.Labels(owner, id, dockerio.RoleVolume, rev)})
			if err != nil {
				b.Fatal(err)
			}
		}
		rm = append(rm, removal{id: id})
	}
	sceneRemovals[owner] = rm
	return owner
}

// cpuTime is the user+system CPU this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru) // RUSAGE_SELF into a valid struct: never fails
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// alternate runs a and b n times each, switching which goes first, so
// neither always runs on a warmer or a busier machine.
func alternate(n int, a, b func()) {
	for i := range n {
		if i%2 == 0 {
			a()
			b()
		} else {
			b()
			a()
		}
	}
}
