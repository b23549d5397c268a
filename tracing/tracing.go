// Package tracing names what the runtime's OpenTelemetry spans carry and
// carries a caller's span across a process boundary (W3C trace context:
// gRPC metadata, an MCP request's _meta). It links only the OpenTelemetry
// API. Whether spans are recorded is the provider's: the one a Go host
// gives the runtime (stockade.Options.TracerProvider), else the global
// one; tracing/exporter makes one from the standard OTEL_* environment, as
// stockade's programs do.
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
