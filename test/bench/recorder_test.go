package bench

import (
	"context"
	"io"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// BenchmarkRecorderOutput1GiB: 1 GiB of stdout through the public API with
// the recorder at its default bounds vs recording off (spec.Record{Off:
// true}), same runtime and sandbox, alternating order. The ratio is the
// recorded run's throughput over the unrecorded one's. Target ≥ 0.95.
//
//	go test -run '^$' -bench BenchmarkRecorderOutput1GiB -benchtime 4x ./test/bench/
func BenchmarkRecorderOutput1GiB(b *testing.B) {
	rt := newBenchAPI(b)
	ctx := context.Background()
	pol := testkit.SmallPolicy()
	pol.CPUs = 2
	sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: dockertest.ImageTag, Policy: pol})
	if err != nil {
		b.Fatal(err)
	}
	size := 1 << 30
	if mib, err := strconv.Atoi(os.Getenv("STOCKADE_BENCH_OUTPUT_MIB")); err == nil && mib > 0 {
		size = mib << 20
	}
	cmd := []string{"/bin/sh", "-c", "yes " + testkit.PatternLine + " | head -c " + strconv.Itoa(size)}
	var on, off time.Duration
	runOne := func(rec spec.Record, d *time.Duration) {
		t0 := time.Now()
		p, err := sb.Start(ctx, spec.Process{Argv: cmd, Stderr: spec.Discard, Stdout: spec.Pipe, OutputQuota: int64(size) + 1, Record: rec})
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, p.Stdout())
		if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 || n != int64(size) {
			b.Fatalf("%+v %v, %d bytes", res, err, n)
		}
		*d += time.Since(t0)
	}
	alternate(b.N, func() { runOne(spec.Record{}, &on) }, func() { runOne(spec.Record{Off: true}, &off) })
	b.ReportMetric(float64(size)*float64(b.N)/on.Seconds()/(1<<20), "recorded-MiB/s")
	b.ReportMetric(float64(size)*float64(b.N)/off.Seconds()/(1<<20), "off-MiB/s")
	b.ReportMetric(off.Seconds()/on.Seconds(), "throughput-ratio")
}
