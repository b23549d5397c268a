// Package tracing names what the runtime's OpenTelemetry spans carry and
// carries a caller's span across a process boundary (W3C trace context).
// It links only the OpenTelemetry API: the SDK and the exporters, set up
// from the standard OTEL_* environment, are tracing/exporter's.
//
// Tracing is off unless the environment asks for it: OTEL_TRACES_EXPORTER
// set to otlp (or console), or, with it unset, an OTLP endpoint named
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT).
// OTEL_SDK_DISABLED=true and OTEL_TRACES_EXPORTER=none keep it off. The
// protocol is OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else
// OTEL_EXPORTER_OTLP_PROTOCOL: grpc or http/protobuf (the default, as the
// specification says). Everything else (endpoints, headers, timeouts,
// TLS, the sampler, the batch processor, the resource) is the OpenTelemetry
// SDK's own reading of the same environment.
package tracing

import "go.opentelemetry.io/otel/attribute"

// Name is the instrumentation scope of the runtime's spans.
const Name = "github.com/stockade/stockade"

// Attribute keys the runtime's spans carry.
const (
	// SandboxID and ProcessID name the entity a span is about.
	SandboxID = attribute.Key("stockade.sandbox.id")
	ProcessID = attribute.Key("stockade.process.id")
	// JournalStream is the journal stream a span wrote ("sandbox/<id>" or
	// "process/<id>"); JournalSeqs the sequence numbers it wrote there,
	// each also a span event named by its event type: `stockade journal
	// show` prints the same numbers.
	JournalStream = attribute.Key("stockade.journal.stream")
	JournalSeqs   = attribute.Key("stockade.journal.seqs")
	JournalSeq    = attribute.Key("stockade.journal.seq")
)
