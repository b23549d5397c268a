package exporter

import (
	"slices"
	"testing"

	"github.com/stockade/stockade/spec"
)

// TestWantedAndProtocol: tracing is on only when the environment asks, the
// protocol is the specification's default unless named, and a value
// stockade does not have is refused naming it.
func TestWantedAndProtocol(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      map[string]string
		exporter []string
		protocol string
		bad      bool
	}{
		{"nothing set: off", nil, nil, "http/protobuf", false},
		{"otlp", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, []string{"otlp"}, "http/protobuf", false},
		{"an endpoint alone", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, []string{"otlp"}, "http/protobuf", false},
		{"a traces endpoint alone, grpc", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, []string{"otlp"}, "grpc", false},
		{"the traces protocol wins", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, []string{"otlp"}, "http/protobuf", false},
		{"none", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, nil, "http/protobuf", false},
		{"disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, nil, "http/protobuf", false},
		{"console", map[string]string{"OTEL_TRACES_EXPORTER": "console"}, []string{"console"}, "http/protobuf", false},
		{"a list", map[string]string{"OTEL_TRACES_EXPORTER": "otlp, console,otlp"}, []string{"otlp", "console"}, "http/protobuf", false},
		{"zipkin is not ours", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, nil, "", true},
		{"zipkin in a list", map[string]string{"OTEL_TRACES_EXPORTER": "otlp,zipkin"}, nil, "", true},
		{"http/json is not ours", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, []string{"otlp"}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			get := func(k string) string { return tc.env[k] }
			exp, err := Wanted(get)
			proto, perr := Protocol(get)
			if err == nil {
				err = perr
			}
			if tc.bad {
				if !spec.IsCode(err, spec.CodeInvalidArgument) {
					t.Fatalf("got %q %q %v, want invalid_argument", exp, proto, err)
				}
				return
			}
			if err != nil || !slices.Equal(exp, tc.exporter) || proto != tc.protocol {
				t.Fatalf("got %q %q %v, want %q %q", exp, proto, err, tc.exporter, tc.protocol)
			}
		})
	}
}
