package bench

import (
	"context"
	"io"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/internal/otlptest"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// discard is an exporter that drops every span: the SDK's whole cost
// (spans recorded, batched, the journal read for their sequence numbers)
// with no export.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkTracingExecTrue: `true` through the public API under a caller's
// span, with tracing off (no provider: the global no-op), on with an
// exporter that drops every span, and on with OTLP over gRPC to a receiver
// in the benchmark; one runtime each, in turn in one loop. The anchor is
// off; the ratios are the others' time over it. Target: on ≤ 1.05.
//
//	go test -run '^$' -bench BenchmarkTracingExecTrue -benchtime 200x ./test/bench/
func BenchmarkTracingExecTrue(b *testing.B) {
	cli := dockertest.Client(b)
	dockertest.ImageID(b, cli)
	ctx := context.Background()
	rcv := otlptest.Start(b)
	otlp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(rcv.GRPC), otlptracegrpc.WithInsecure())
	if err != nil {
		b.Fatal(err)
	}
	providers := []*sdktrace.TracerProvider{nil, sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{})), sdktrace.NewTracerProvider(sdktrace.WithBatcher(otlp))}
	names := []string{"off", "noop", "otlp"}
	var sandboxes []*stockade.Sandbox
	for _, tp := range providers {
		opts := stockade.Options{Journal: filepath.Join(b.TempDir(), "j.db")}
		if tp != nil {
			opts.TracerProvider = tp
			b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		}
		rt, err := stockade.Open(ctx, opts)
		if err != nil {
			b.Fatal(err)
		}
		dockertest.CleanupOwner(b, cli, rt.Owner())
		b.Cleanup(func() { _ = rt.Close() })
		sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: dockertest.ImageTag, Policy: testkit.SmallPolicy()})
		if err != nil {
			b.Fatal(err)
		}
		sandboxes = append(sandboxes, sb)
	}
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	cctx := trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled, Remote: true}))
	took := make([]time.Duration, len(sandboxes))
	run := func(i int) {
		t0 := time.Now()
		p, err := sandboxes[i].Start(cctx, spec.Process{Argv: []string{"true"}})
		if err != nil {
			b.Fatal(err)
		}
		go func() { _, _ = io.Copy(io.Discard, p.Stderr()) }()
		_, _ = io.Copy(io.Discard, p.Stdout())
		if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 {
			b.Fatalf("%s: %+v %v", names[i], res, err)
		}
		took[i] += time.Since(t0)
	}
	b.ResetTimer()
	for n := range b.N {
		for k := range sandboxes {
			run((n + k) % len(sandboxes)) // each first in turn
		}
	}
	b.StopTimer()
	for i, name := range names {
		b.ReportMetric(float64(took[i].Microseconds())/float64(b.N), name+"-us/op")
	}
	b.ReportMetric(took[1].Seconds()/took[0].Seconds(), "noop/off")
	b.ReportMetric(took[2].Seconds()/took[0].Seconds(), "otlp/off")
}

// BenchmarkUsageSample: one reading of a running workload's cgroup for the
// usage ledger, from the host's cgroupfs (what the runtime does when it
// shares the daemon's host) vs the daemon's one-shot stats (the fallback;
// it waits for the daemon's collector, up to a second when another reading
// came within one), in turn in one loop. The ratio is cgroupfs over stats.
//
//	go test -run '^$' -bench BenchmarkUsageSample -benchtime 20x ./test/bench/
func BenchmarkUsageSample(b *testing.B) {
	e := testkit.NewDio(b)
	daemon, err := dockerio.NewAdapter(dockerio.Options{NoHostCgroups: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = daemon.Close() })
	ctx := context.Background()
	if _, err := daemon.Preflight(ctx); err != nil {
		b.Fatal(err)
	}
	sb := e.Sandbox(b, nil)
	var host, stats time.Duration
	sample := func(a dockerio.Engine, d *time.Duration) func() {
		return func() {
			t0 := time.Now()
			if _, err := a.SampleUsage(ctx, sb); err != nil {
				b.Fatal(err)
			}
			*d += time.Since(t0)
		}
	}
	b.ResetTimer()
	alternate(b.N, sample(e.Adapter, &host), sample(daemon, &stats))
	b.StopTimer()
	b.ReportMetric(float64(host.Microseconds())/float64(b.N), "cgroupfs-us/op")
	b.ReportMetric(float64(stats.Microseconds())/float64(b.N), "stats-us/op")
	b.ReportMetric(host.Seconds()/stats.Seconds(), "ratio")
}
