// Package otlptest is an OTLP trace receiver for tests: the collector's
// trace service over gRPC and over HTTP (protobuf), keeping every span it is
// sent, so a test asserts the spans a runtime really exported.
package otlptest

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, with its resource's service.name.
type Span struct {
	*tracepb.Span
	Service string
}

// TraceID is the span's trace id in hex.
func (s Span) TraceID() string { return hex.EncodeToString(s.TraceId) }

// ID is the span's id in hex; Parent its parent's ("" for a root).
func (s Span) ID() string     { return hex.EncodeToString(s.SpanId) }
func (s Span) Parent() string { return hex.EncodeToString(s.ParentSpanId) }

// Attr is a string, int or int-array attribute's value as text ("" when
// absent).
func (s Span) Attr(key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return valueText(kv.Value)
		}
	}
	return ""
}

// Receiver receives OTLP traces.
type Receiver struct {
	// GRPC is the gRPC endpoint (host:port), HTTP the HTTP one's base URL
	// (the exporter posts to HTTP + "/v1/traces").
	GRPC, HTTP string

	mu    sync.Mutex
	spans []Span
	wake  chan struct{}
}

// Start serves both protocols on loopback until the test ends.
func Start(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{wake: make(chan struct{})}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(gs, grpcService{r: r})
	go func() { _ = gs.Serve(gl) }() // ends with Stop
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(r.serveHTTP), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(hl) }() // ends with Close
	t.Cleanup(func() {
		gs.Stop()
		_ = hs.Close() // the test is over: nothing waits on it
	})
	r.GRPC, r.HTTP = gl.Addr().String(), "http://"+hl.Addr().String()
	return r
}

type grpcService struct {
	collectortrace.UnimplementedTraceServiceServer
	r *Receiver
}

func (g grpcService) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	g.r.take(req)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.Error(w, "want POST /v1/traces", http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, 64<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.take(&msg)
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{}) // an empty message always marshals
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out) // the exporter's to read; nothing to do if it went away
}

func (r *Receiver) take(req *collectortrace.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		service := ""
		if res := rs.Resource; res != nil {
			for _, kv := range res.Attributes {
				if kv.Key == "service.name" {
					service = valueText(kv.Value)
				}
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				r.spans = append(r.spans, Span{Span: s, Service: service})
			}
		}
	}
	close(r.wake)
	r.wake = make(chan struct{})
}

// Trace returns the spans received so far of one trace.
func (r *Receiver) Trace(traceID string) []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Span
	for _, s := range r.spans {
		if s.TraceID() == traceID {
			out = append(out, s)
		}
	}
	return out
}

// Await waits until done holds for a trace's spans, or fails the test when
// ctx ends first (saying what it has).
func (r *Receiver) Await(t testing.TB, ctx context.Context, traceID string, done func([]Span) bool) []Span {
	t.Helper()
	for {
		r.mu.Lock()
		wake := r.wake
		r.mu.Unlock()
		spans := r.Trace(traceID)
		if done(spans) {
			return spans
		}
		select {
		case <-wake:
		case <-ctx.Done():
			var names []string
			for _, s := range spans {
				names = append(names, s.Name)
			}
			t.Fatalf("trace %s: %d spans received (%v), not yet what is awaited", traceID, len(spans), names)
		}
	}
}

// All returns every span received so far.
func (r *Receiver) All() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans)
}
