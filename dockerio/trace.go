package dockerio

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/tracing"
)

// readbackSpan starts a readback's span under the span ctx carries (the
// runtime's create span, which the sandbox actor hands down), from that
// span's own provider: with no span, or tracing off, it is a no-op.
func readbackSpan(ctx context.Context, sb Sandbox, role Role, started bool) (context.Context, trace.Span) {
	return trace.SpanFromContext(ctx).TracerProvider().Tracer(tracing.Name).Start(ctx, "stockade.readback",
		trace.WithAttributes(tracing.SandboxID.String(sb.ID), attribute.String("stockade.role", string(role)),
			attribute.Bool("stockade.readback.running", started)))
}

// endSpan ends a span with err's outcome: its code only (a span leaves
// the host; an error's text names the container's configuration).
func endSpan(span trace.Span, err error) {
	if err != nil {
		code := string(spec.CodeOf(err))
		span.SetStatus(codes.Error, code)
		span.SetAttributes(attribute.String("stockade.error.code", code))
	}
	span.End()
}
