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

// BenchmarkAttachRecorded: Process.Attach from offset 0 of an ended
// process's recording of 256 MiB (recorded whole: Head covers it), served
// (the client, over the unix socket) vs embedded (Runtime.Host()),
// alternating; the anchor is the process's own stdout read by its caller
// when it ran. STOCKADE_BENCH_OUTPUT_MIB sets a smaller size.
//
//	go test -run '^$' -bench BenchmarkAttachRecorded -benchtime 4x ./test/bench/
func BenchmarkAttachRecorded(b *testing.B) {
	ctx := context.Background()
	rt, c := servedRuntime(b)
	pol := testkit.SmallPolicy()
	pol.CPUs = 2
	sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: dockertest.ImageTag, Policy: pol})
	if err != nil {
		b.Fatal(err)
	}
	size := 256 << 20
	if mib, err := strconv.Atoi(os.Getenv("STOCKADE_BENCH_OUTPUT_MIB")); err == nil && mib > 0 {
		size = mib << 20
	}
	cmd := []string{"/bin/sh", "-c", "yes " + testkit.PatternLine + " | head -c " + strconv.Itoa(size)}
	t0 := time.Now()
	p, err := sb.Start(ctx, spec.Process{Argv: cmd, Stderr: spec.Discard, OutputQuota: int64(size) + 1, Record: spec.Record{Head: int64(size)}})
	if err != nil {
		b.Fatal(err)
	}
	if n, _ := io.Copy(io.Discard, p.Stdout()); n != int64(size) {
		b.Fatalf("the anchor read %d bytes", n)
	}
	if _, err := p.Wait(ctx); err != nil {
		b.Fatal(err)
	}
	anchor := time.Since(t0)
	attach := func(name string, rt host.Runtime, total *time.Duration) func() {
		return func() {
			t0 := time.Now()
			found, err := rt.Process(ctx, p.ID())
			if err != nil {
				b.Fatalf("%s: %v", name, err)
			}
			var n int64
			end, err := found.Attach(ctx, host.AttachOptions{}, func(c host.OutputChunk) error {
				n += int64(len(c.Data))
				return nil
			})
			if err != nil || n != int64(size) || !end.Output.Complete {
				b.Fatalf("%s: %d bytes, %+v %v", name, n, end, err)
			}
			*total += time.Since(t0)
		}
	}
	b.ResetTimer()
	var served, embedded time.Duration
	alternate(b.N, attach("served", c, &served), attach("embedded", rt.Host(), &embedded))
	mib := float64(size) * float64(b.N) / (1 << 20)
	b.ReportMetric(mib/served.Seconds(), "served-MiB/s")
	b.ReportMetric(mib/embedded.Seconds(), "embedded-MiB/s")
	b.ReportMetric(float64(size)/(1<<20)/anchor.Seconds(), "live-run-MiB/s")
	b.ReportMetric(embedded.Seconds()/served.Seconds(), "served/embedded-throughput")
}

// BenchmarkAttachFirstLiveByte: how long a byte the process writes takes
// to reach an attach that waits for it (the recorder's write wakes the
// attach), served and embedded, against the anchor: the same byte on the
// starting caller's own stdout. Each round the process reads a line of its
// stdin and answers it; the clock runs from the write to its stdin to the
// answer's arrival on each path (all three wait on the same answer).
//
//	go test -run '^$' -bench BenchmarkAttachFirstLiveByte -benchtime 200x ./test/bench/
func BenchmarkAttachFirstLiveByte(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rt, c := servedRuntime(b)
	sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: dockertest.ImageTag, Policy: testkit.SmallPolicy()})
	if err != nil {
		b.Fatal(err)
	}
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"/bin/sh", "-c", "while read x; do echo $x; done"}, Stdin: true, Stderr: spec.Discard})
	if err != nil {
		b.Fatal(err)
	}
	type arrival struct {
		way string
		at  time.Time
	}
	arrived := make(chan arrival, 16)
	for _, w := range []struct {
		name string
		rt   host.Runtime
	}{{"served", c}, {"embedded", rt.Host()}} {
		found, err := w.rt.Process(ctx, p.ID())
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			_, _ = found.Attach(ctx, host.AttachOptions{}, func(host.OutputChunk) error {
				arrived <- arrival{w.name, time.Now()}
				return nil
			})
		}()
	}
	go func() {
		buf := make([]byte, 64)
		for {
			if _, err := p.Stdout().Read(buf); err != nil {
				return
			}
			arrived <- arrival{"anchor", time.Now()}
		}
	}()
	lat := map[string][]time.Duration{}
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		if _, err := p.Stdin().Write([]byte(strconv.Itoa(i%10) + "\n")); err != nil {
			b.Fatal(err)
		}
		for range 3 {
			select {
			case a := <-arrived:
				lat[a.way] = append(lat[a.way], a.at.Sub(t0))
			case <-time.After(30 * time.Second):
				b.Fatalf("round %d: an answer did not arrive in 30 s", i)
			}
		}
	}
	b.StopTimer()
	_ = p.Stdin().Close()
	for _, way := range []string{"anchor", "embedded", "served"} {
		b.ReportMetric(testkit.Ms(testkit.Percentile(lat[way], 0.5)), way+"-p50-ms")
		b.ReportMetric(testkit.Ms(testkit.Percentile(lat[way], 0.99)), way+"-p99-ms")
	}
	b.ReportMetric(float64(testkit.Percentile(lat["served"], 0.5))/float64(testkit.Percentile(lat["anchor"], 0.5)), "served/anchor-p50")
}
