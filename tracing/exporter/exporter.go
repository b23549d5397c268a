// Package exporter sets up OpenTelemetry trace export the standard way,
// from the OTEL_* environment (package tracing says which variables), for
// stockade's programs and for a Go host that embeds the runtime and wants
// the same.
package exporter

import (
	"context"
	"os"
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
	// On: a provider was installed as the global one.
	On       bool
	Protocol string
	provider *sdktrace.TracerProvider
}

// Shutdown exports what is buffered and stops the exporter (nothing when
// tracing is off).
func (s Setup) Shutdown(ctx context.Context) error {
	if s.provider == nil {
		return nil
	}
	return s.provider.Shutdown(ctx)
}

// Wanted reports whether the environment asks for traces, and the
// exporter it names.
func Wanted(getenv func(string) string) (exporter string, err error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return "", nil
	}
	switch v := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); v {
	case "none":
		return "", nil
	case "otlp", "console":
		return v, nil
	case "":
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
			return "otlp", nil
		}
		return "", nil
	default:
		return "", spec.Errorf(spec.CodeInvalidArgument, "tracing", "OTEL_TRACES_EXPORTER=%q is not an exporter stockade has: use otlp, console or none", v)
	}
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

// Provider is the tracer provider made (nil when tracing is off), for
// stockade.Options.TracerProvider.
func (s Setup) Provider() trace.TracerProvider {
	if s.provider == nil {
		return nil
	}
	return s.provider
}

// New makes the tracer provider the environment asks for, without
// installing it anywhere (Setup.On false: tracing is off).
func New(ctx context.Context) (Setup, error) {
	exp, err := Wanted(os.Getenv)
	if err != nil || exp == "" {
		return Setup{}, err
	}
	var sx sdktrace.SpanExporter
	proto := "console"
	if exp == "console" {
		sx, err = newConsole(os.Stderr)
	} else {
		if proto, err = Protocol(os.Getenv); err != nil {
			return Setup{}, err
		}
		if proto == "grpc" {
			sx, err = otlptracegrpc.New(ctx)
		} else {
			sx, err = otlptracehttp.New(ctx)
		}
	}
	if err != nil {
		return Setup{}, spec.Wrap(spec.CodeInvalidArgument, "tracing", err, "making the %s trace exporter from the OTEL_* environment", proto)
	}
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "stockade")),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return Setup{}, spec.Wrap(spec.CodeInvalidArgument, "tracing", err, "the resource OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME describe")
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(sx), sdktrace.WithResource(res))
	return Setup{On: true, Protocol: proto, provider: tp}, nil
}
