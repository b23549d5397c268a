package exporter

import (
	"context"
	"encoding/json"
	"io"
	"sync"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// console writes each span as a JSON line (OTEL_TRACES_EXPORTER=console):
// for a look at a trace with no collector.
type console struct {
	mu sync.Mutex
	w  io.Writer
}

func newConsole(w io.Writer) sdktrace.SpanExporter { return &console{w: w} }

type consoleSpan struct {
	Name     string            `json:"name"`
	Trace    string            `json:"trace_id"`
	Span     string            `json:"span_id"`
	Parent   string            `json:"parent_id,omitempty"`
	Start    string            `json:"start"`
	Millis   float64           `json:"ms"`
	Status   string            `json:"status,omitempty"`
	Attrs    map[string]string `json:"attributes,omitempty"`
	Events   []string          `json:"events,omitempty"`
	Instance string            `json:"scope"`
}

func (c *console) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	enc := json.NewEncoder(c.w)
	for _, s := range spans {
		out := consoleSpan{Name: s.Name(), Trace: s.SpanContext().TraceID().String(), Span: s.SpanContext().SpanID().String(),
			Start: s.StartTime().UTC().Format("2006-01-02T15:04:05.000000Z"), Millis: float64(s.EndTime().Sub(s.StartTime()).Microseconds()) / 1000,
			Instance: s.InstrumentationScope().Name, Attrs: map[string]string{}}
		if p := s.Parent(); p.IsValid() {
			out.Parent = p.SpanID().String()
		}
		if st := s.Status(); st.Code != 0 {
			out.Status = st.Code.String() + ": " + st.Description
		}
		for _, a := range s.Attributes() {
			out.Attrs[string(a.Key)] = a.Value.String()
		}
		for _, e := range s.Events() {
			out.Events = append(out.Events, e.Name)
		}
		if err := enc.Encode(out); err != nil {
			return err
		}
	}
	return nil
}

func (c *console) Shutdown(context.Context) error { return nil }
