package tracing

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
)

// The W3C trace-context fields a caller's span travels in, wherever the
// runtime is reached: gRPC metadata (served), an MCP request's _meta.
const (
	TraceparentKey = "traceparent"
	TracestateKey  = "tracestate"
)

// Extract returns ctx under the caller's span that get's traceparent and
// tracestate name (ctx as it is when they name none, or one that does not
// parse: a bad header never fails a call). The span is remote: the
// runtime's spans are its children.
func Extract(ctx context.Context, get func(key string) string) context.Context {
	tp := get(TraceparentKey)
	if tp == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{TraceparentKey: tp, TracestateKey: get(TracestateKey)})
}

// Inject calls set with the traceparent and tracestate of ctx's span
// (nothing when ctx has none).
func Inject(ctx context.Context, set func(key, value string)) {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	for k, v := range c {
		set(k, v)
	}
}
