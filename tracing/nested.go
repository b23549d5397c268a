package tracing

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// Nested is the global tracer provider, restricted to spans that have a
// parent in their context: a library's spans (the Docker client's HTTP
// calls) then appear inside the runtime's work, and the runtime's own
// background calls (a usage sample every few seconds) start no trace of
// their own.
func Nested() trace.TracerProvider { return nestedProvider{} }

type nestedProvider struct{ embedded.TracerProvider }

func (nestedProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return nestedTracer{t: otel.GetTracerProvider().Tracer(name, opts...)}
}

type nestedTracer struct {
	embedded.Tracer
	t trace.Tracer
}

func (n nestedTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, trace.SpanFromContext(ctx) // the no-op span: nothing to parent it
	}
	return n.t.Start(ctx, name, opts...)
}
