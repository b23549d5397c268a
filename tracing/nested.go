package tracing

import (
	"context"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// Nested is a tracer provider for a library's spans (the Docker client's
// HTTP calls) that makes them only under a span of the runtime's, from
// that span's own provider: they appear inside the runtime's work, whatever
// provider the runtime was given, and its background calls (a usage
// sample every few seconds, the event stream) start no trace of their
// own.
func Nested() trace.TracerProvider { return nestedProvider{} }

type nestedProvider struct{ embedded.TracerProvider }

func (nestedProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return nestedTracer{name: name, opts: opts}
}

type nestedTracer struct {
	embedded.Tracer
	name string
	opts []trace.TracerOption
}

func (n nestedTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, parent // a remote parent's, or none: nothing of ours to hang it under
	}
	return parent.TracerProvider().Tracer(n.name, n.opts...).Start(ctx, name, opts...)
}
