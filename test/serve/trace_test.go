package serve

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/internal/otlptest"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// TestServeTraces: `stockade serve` started with the standard OTEL_*
// environment (OTLP over gRPC, to a receiver in the test) exports the spans
// of a client's create, process and remove under the client's own span,
// which travels as W3C traceparent metadata: the create with the readbacks
// of the real daemon under it, the process with its start, the remove; each
// span's journal events are its sandbox's or process's history, by
// sequence number; the usage the process's span reports is its result's.
func TestServeTraces(t *testing.T) {
	rcv := otlptest.Start(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+rcv.GRPC)
	t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := testkit.NewCLI(t)
	image := dockertest.ImageID(t, dockertest.Client(t))
	srv := e.Serve(t, ctx)
	if !strings.Contains(srv.Logs.String(), "exporting traces to OTLP over grpc") {
		t.Fatalf("serve did not say it exports traces:\n%s", srv.Logs.String())
	}
	c := srv.Dial(t)
	defer func() { _ = c.Close() }() // teardown

	tid, _ := trace.TraceIDFromHex(fmt.Sprintf("%032x", time.Now().UnixNano()))
	caller := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{0xc1, 0x1e, 0x40}, TraceFlags: trace.FlagsSampled, Remote: true})
	cctx := trace.ContextWithRemoteSpanContext(ctx, caller)
	sb, err := c.CreateSandbox(cctx, spec.Sandbox{Image: image, Policy: testkit.SmallPolicy(), Lifetime: spec.Kept})
	if err != nil {
		t.Fatal(err)
	}
	p, err := sb.Start(cctx, spec.Process{Argv: []string{"echo", "traced"}, Stderr: spec.Discard})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, p.Stdout())
	res, err := p.Wait(ctx)
	if err != nil || res.Usage == nil {
		t.Fatalf("the process: %+v %v", res, err)
	}
	if err := sb.Remove(cctx); err != nil {
		t.Fatal(err)
	}
	hist, err := c.History(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	history := map[string]string{}
	for _, ev := range hist {
		history[ev.Kind+"/"+ev.ID] += fmt.Sprintf(" %s#%d", ev.Type, ev.Seq)
	}

	has := func(spans []otlptest.Span, name string) []otlptest.Span {
		var out []otlptest.Span
		for _, s := range spans {
			if s.Name == name {
				out = append(out, s)
			}
		}
		return out
	}
	spans := rcv.Await(t, ctx, caller.TraceID().String(), func(s []otlptest.Span) bool {
		return len(has(s, "stockade.sandbox.remove")) == 1 && len(has(s, "stockade.process")) == 1 && len(has(s, "stockade.sandbox.create")) == 1
	})
	create, proc, remove := has(spans, "stockade.sandbox.create")[0], has(spans, "stockade.process")[0], has(spans, "stockade.sandbox.remove")[0]
	for _, s := range []otlptest.Span{create, proc, remove} {
		if s.Parent() != caller.SpanID().String() {
			t.Errorf("%s is under %q, not the client's span %s", s.Name, s.Parent(), caller.SpanID())
		}
	}
	readbacks := has(spans, "stockade.readback")
	if len(readbacks) < 2 {
		t.Errorf("%d readback spans under the create, want the workload's as created and as started", len(readbacks))
	}
	for _, rb := range readbacks {
		if rb.Parent() != create.ID() {
			t.Errorf("a readback under %s, not the create %s", rb.Parent(), create.ID())
		}
	}
	if starts := has(spans, "stockade.process.start"); len(starts) != 1 || starts[0].Parent() != proc.ID() {
		t.Errorf("the process's start spans: %+v", starts)
	}
	for _, tc := range []struct {
		span   otlptest.Span
		stream string
	}{{create, "sandbox/" + sb.ID()}, {proc, "process/" + p.ID()}, {remove, "sandbox/" + sb.ID()}} {
		var evs string
		for _, ev := range tc.span.Events {
			evs += fmt.Sprintf(" %s#%s", ev.Name, otlptest.Attr(ev.Attributes, "stockade.journal.seq"))
		}
		if tc.span.Attr("stockade.journal.stream") != tc.stream || evs == "" || !strings.Contains(history[tc.stream], evs) {
			t.Errorf("%s: stream %q, events%s; the history of %s:%s", tc.span.Name, tc.span.Attr("stockade.journal.stream"), evs, tc.stream, history[tc.stream])
		}
	}
	if got, want := proc.Attr("stockade.usage.cpu_seconds"), fmt.Sprint(res.Usage.CPU().Seconds()); got != want {
		t.Errorf("the process span's CPU %s, its result's %s", got, want)
	}
}
