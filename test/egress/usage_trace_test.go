package egress

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/otlptest"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// TestEgressTracedAndCounted: a process of an allowlist sandbox that makes
// one allowed and one denied connection has both decisions as events of
// its span (OTLP, to a receiver in the test), naming the host, port and
// verdict; the sandbox's usage ledger counts them and the allowed one's
// bytes.
func TestEgressTracedAndCounted(t *testing.T) {
	rcv := otlptest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(rcv.HTTP+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(50*time.Millisecond)))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	e := testkit.NewAPI(t, stockade.Options{TracerProvider: tp})
	gw := testkit.BridgeGateway(t, e.Docker)
	allowed, other := testkit.StartOutside(t), testkit.StartOutside(t)
	allowedTarget, otherTarget := fmt.Sprintf("%s:%d", gw, allowed.Port), fmt.Sprintf("%s:%d", gw, other.Port)
	sb, err := e.RT.CreateSandbox(ctx, spec.Sandbox{Image: e.Image, Policy: testkit.AllowlistPolicy(allowedTarget), Lifetime: spec.Kept})
	if err != nil {
		t.Fatal(err)
	}
	tid, _ := trace.TraceIDFromHex(fmt.Sprintf("%032x", time.Now().UnixNano()))
	cctx := trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{0xe9}, TraceFlags: trace.FlagsSampled, Remote: true}))
	// The proxy reports a connection's decision when it ends: the process
	// waits for both to be recorded before it ends.
	script := testkit.ConnectVia(allowedTarget) + "; " + testkit.ConnectVia(otherTarget) + "; sleep 2"
	p, err := sb.Start(cctx, spec.Process{Argv: []string{"sh", "-c", script}, Stdout: spec.Discard, Stderr: spec.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	spans := rcv.Await(t, ctx, tid.String(), func(s []otlptest.Span) bool {
		for _, x := range s {
			if x.Name == "stockade.process" {
				return true
			}
		}
		return false
	})
	var events []string
	for _, s := range spans {
		if s.Name != "stockade.process" {
			continue
		}
		for _, ev := range s.Events {
			if strings.HasPrefix(ev.Name, "egress.") {
				events = append(events, fmt.Sprintf("%s %s:%s", ev.Name, otlptest.Attr(ev.Attributes, "stockade.egress.host"), otlptest.Attr(ev.Attributes, "stockade.egress.port")))
			}
		}
	}
	got := strings.Join(events, ", ")
	for _, want := range []string{fmt.Sprintf("egress.allow %s:%d", gw, allowed.Port), fmt.Sprintf("egress.deny %s:%d", gw, other.Port)} {
		if !strings.Contains(got, want) {
			t.Errorf("the process span's egress events %q lack %q", got, want)
		}
	}
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	u, err := e.RT.Usage(ctx, host.UsageQuery{Sandbox: sb.ID()})
	if err != nil || len(u.Sandboxes) != 1 {
		t.Fatalf("usage: %+v %v", u, err)
	}
	if s := u.Sandboxes[0]; s.EgressAllowed < 1 || s.EgressDenied < 1 || s.EgressBytes <= 0 {
		t.Errorf("the ledger's egress: %d allowed (%d bytes), %d denied", s.EgressAllowed, s.EgressBytes, s.EgressDenied)
	}
}
