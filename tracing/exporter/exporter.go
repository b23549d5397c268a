// Package exporter sets up OpenTelemetry trace export the standard way,
// from the OTEL_* environment, for stockade's programs and for a Go host
// that embeds the runtime and wants the same.
//
// Tracing is off unless the environment asks for it: OTEL_TRACES_EXPORTER
// naming otlp or console (a comma-separated list may name both), or, with
// it unset, an OTLP endpoint named (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT). OTEL_SDK_DISABLED=true and
// OTEL_TRACES_EXPORTER=none keep it off. The OTLP protocol is
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL: grpc
// or http/protobuf (the default, as the specification says). Everything
// else (endpoints, headers, timeouts, TLS, the batch processor, the
// resource, OTEL_TRACES_SAMPLER) is the OpenTelemetry SDK's own reading of
// the same environment. With no sampler named, every span is sampled,
// whatever a caller's traceparent says: a caller cannot turn the tracing
// of its own work off.
package exporter

import (
	"context"
	"os"
	"slices"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/stockade/stockade/spec"
)

// Setup is tracing as the environment configured it.
type Setup struct {
	// On: a provider was made.
	On bool
	// Exporters says where spans go: "OTLP over grpc", "OTLP over
	// http/protobuf", "the console".
	Exporters []string
	provider  *sdktrace.TracerProvider
}

// Describe says where spans go, for a line in a program's log.
func (s Setup) Describe() string { return strings.Join(s.Exporters, " and ") }

// Shutdown exports what is buffered and stops the exporters (nothing when
// tracing is off).
func (s Setup) Shutdown(ctx context.Context) error {
	if s.provider == nil {
		return nil
	}
	return s.provider.Shutdown(ctx)
}

// Provider is the tracer provider made (nil when tracing is off), for
// stockade.Options.TracerProvider.
func (s Setup) Provider() trace.TracerProvider {
	if s.provider == nil {
		return nil
	}
	return s.provider
}

// Wanted reports the exporters the environment asks for (none: tracing is
// off).
func Wanted(getenv func(string) string) ([]string, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return nil, nil
	}
	v := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))
	if v == "" {
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
			return []string{"otlp"}, nil
		}
		return nil, nil
	}
	var out []string
	for _, e := range strings.Split(v, ",") {
		switch e = strings.TrimSpace(e); e {
		case "none":
			return nil, nil
		case "otlp", "console":
			if !slices.Contains(out, e) {
				out = append(out, e)
			}
		default:
			return nil, spec.Errorf(spec.CodeInvalidArgument, "tracing", "OTEL_TRACES_EXPORTER=%q: %q is not an exporter stockade has: use otlp, console or none", v, e)
		}
	}
	return out, nil
}

// Protocol is the OTLP protocol the environment names (http/protobuf by
// default).
func Protocol(getenv func(string) string) (string, error) {
	p := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
	if p == "" {
		p = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	switch p {
	case "", "http/protobuf":
		return "http/protobuf", nil
	case "grpc":
		return "grpc", nil
	default:
		return "", spec.Errorf(spec.CodeInvalidArgument, "tracing", "OTLP protocol %q is not one stockade exports (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, OTEL_EXPORTER_OTLP_PROTOCOL): use grpc or http/protobuf", p)
	}
}

// FromEnv installs, as OpenTelemetry's global tracer provider and W3C
// trace-context propagator, what the environment asks for (New); with
// tracing off it installs nothing (the global provider stays the no-op
// one, which costs a span nothing). Call Shutdown before exiting.
func FromEnv(ctx context.Context) (Setup, error) {
	s, err := New(ctx)
	if err != nil || !s.On {
		return s, err
	}
	otel.SetTracerProvider(s.provider)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return s, nil
}

// New makes the tracer provider the environment asks for, without
// installing it anywhere (Setup.On false: tracing is off).
func New(ctx context.Context) (Setup, error) {
	wanted, err := Wanted(os.Getenv)
	if err != nil || len(wanted) == 0 {
		return Setup{}, err
	}
	var setup Setup
	var opts []sdktrace.TracerProviderOption
	for _, w := range wanted {
		var sx sdktrace.SpanExporter
		if w == "console" {
			sx = newConsole(os.Stderr)
			setup.Exporters = append(setup.Exporters, "the console")
		} else {
			proto, err := Protocol(os.Getenv)
			if err != nil {
				return Setup{}, err
			}
			if proto == "grpc" {
				sx, err = otlptracegrpc.New(ctx)
			} else {
				sx, err = otlptracehttp.New(ctx)
			}
			if err != nil {
				return Setup{}, spec.Wrap(spec.CodeInvalidArgument, "tracing", err, "making the OTLP %s trace exporter from the OTEL_* environment", proto)
			}
			setup.Exporters = append(setup.Exporters, "OTLP over "+proto)
		}
		opts = append(opts, sdktrace.WithBatcher(sx))
	}
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "stockade")),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return Setup{}, spec.Wrap(spec.CodeInvalidArgument, "tracing", err, "the resource OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME describe")
	}
	opts = append(opts, sdktrace.WithResource(res))
	if os.Getenv("OTEL_TRACES_SAMPLER") == "" {
		// A caller's sampled flag parents, never decides: every span of
		// the runtime's work is kept.
		opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample(),
			sdktrace.WithRemoteParentNotSampled(sdktrace.AlwaysSample()), sdktrace.WithLocalParentNotSampled(sdktrace.AlwaysSample()))))
	}
	setup.On, setup.provider = true, sdktrace.NewTracerProvider(opts...)
	return setup, nil
}
