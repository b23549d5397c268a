package tracing

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// TestExtractInject: a span context injected is extracted the same, as a
// remote parent; a header that is absent or does not parse leaves the
// context as it was.
func TestExtractInject(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: trace.FlagsSampled})
	headers := map[string]string{}
	Inject(trace.ContextWithSpanContext(context.Background(), sc), func(k, v string) { headers[k] = v })
	if headers[TraceparentKey] != "00-01020300000000000000000000000000-0405000000000000-01" {
		t.Fatalf("injected %v", headers)
	}
	got := trace.SpanContextFromContext(Extract(context.Background(), func(k string) string { return headers[k] }))
	if !got.Equal(sc.WithRemote(true)) {
		t.Fatalf("extracted %+v, want %+v", got, sc)
	}
	for _, bad := range []string{"", "00-zz-04-01", "00-01020300000000000000000000000000-0405000000000000-01-extra", "00-00000000000000000000000000000000-0405000000000000-01"} {
		ctx := Extract(context.Background(), func(k string) string {
			if k == TraceparentKey {
				return bad
			}
			return ""
		})
		if trace.SpanContextFromContext(ctx).IsValid() {
			t.Errorf("traceparent %q gave a parent", bad)
		}
	}
	var none []string
	Inject(context.Background(), func(k, v string) { none = append(none, k) })
	if len(none) != 0 {
		t.Errorf("a context with no span injected %v", none)
	}
}

// FuzzExtract: a caller's traceparent and tracestate (gRPC metadata, an
// MCP request's _meta: untrusted) never panic, and give a valid parent or
// none.
func FuzzExtract(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "congo=t61rcWkgMzE")
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "a=1,b=2,"+string(make([]byte, 600)))
	f.Add("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "")
	f.Add("00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01", "")
	f.Add("\x00", "\xff")
	f.Fuzz(func(t *testing.T, tp, ts string) {
		ctx := Extract(context.Background(), func(k string) string {
			switch k {
			case TraceparentKey:
				return tp
			case TracestateKey:
				return ts
			}
			return ""
		})
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && !sc.IsRemote() {
			t.Fatalf("%q gave a local parent", tp)
		}
	})
}
