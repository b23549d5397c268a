package bench

import (
	"context"
	"io"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// BenchmarkServeOutput1GiB: 1 GiB of stdout through the server (the
// runtime's read loop → the server's Exec stream → gRPC over the unix
// socket, 1 MiB windows → client → consumer) vs the same runtime embedded
// (Runtime.Host()), the same sandbox, alternating order; the consumer is
// io.Copy to io.Discard on both sides. The server runs in this process, so
// the CPU figures are the runtime, the server and the client together.
// The ratio is served throughput over embedded. Target ≥ 0.90.
// STOCKADE_BENCH_OUTPUT_MIB sets a smaller size.
//
//	go test -run '^$' -bench BenchmarkServeOutput1GiB -benchtime 4x ./test/bench/
func BenchmarkServeOutput1GiB(b *testing.B) {
	ctx := context.Background()
	rt, c := servedRuntime(b)

	pol := testkit.SmallPolicy()
	pol.CPUs = 2
	sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: dockertest.ImageTag, Policy: pol})
	if err != nil {
		b.Fatal(err)
	}
	remote, err := c.Sandbox(ctx, sb.ID())
	if err != nil {
		b.Fatal(err)
	}
	local, err := rt.Host().Sandbox(ctx, sb.ID())
	if err != nil {
		b.Fatal(err)
	}
	size := 1 << 30
	if mib, err := strconv.Atoi(os.Getenv("STOCKADE_BENCH_OUTPUT_MIB")); err == nil && mib > 0 {
		size = mib << 20
	}
	cmd := []string{"/bin/sh", "-c", "yes " + testkit.PatternLine + " | head -c " + strconv.Itoa(size)}
	drain := func(name string, s host.Sandbox, total, cpu *time.Duration) func() {
		return func() {
			t0, c0 := time.Now(), cpuTime()
			p, err := s.Start(ctx, spec.Process{Argv: cmd, Stderr: spec.Discard, OutputQuota: int64(size) + 1})
			if err != nil {
				b.Fatalf("%s: %v", name, err)
			}
			n, _ := io.Copy(io.Discard, p.Stdout())
			if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 || n != int64(size) {
				b.Fatalf("%s: %+v %v, %d bytes", name, res, err, n)
			}
			*total += time.Since(t0)
			*cpu += cpuTime() - c0
		}
	}
	var served, direct, servedCPU, directCPU time.Duration
	alternate(b.N, drain("served", remote, &served, &servedCPU), drain("embedded", local, &direct, &directCPU))
	mib := float64(size) * float64(b.N) / (1 << 20)
	b.ReportMetric(mib/served.Seconds(), "served-MiB/s")
	b.ReportMetric(mib/direct.Seconds(), "embedded-MiB/s")
	b.ReportMetric(direct.Seconds()/served.Seconds(), "throughput-ratio")
	b.ReportMetric(servedCPU.Seconds()/(mib/1024), "served-cpu-s/GiB")
	b.ReportMetric(directCPU.Seconds()/(mib/1024), "embedded-cpu-s/GiB")
}
