package core

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/internal/actors/process"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/tracing"
)

// A runtime's spans: one per operation a caller asks (under the caller's
// span, if its context has one), and one per process's life. Each carries
// the journal events of its entity written while it ran, as span events
// and as the stream and sequence numbers `stockade journal show` prints:
// a trace and the journal point at each other. With tracing off (the
// global no-op provider, or none given) a span costs an allocation-free
// no-op and no journal read.

// span is one operation's span and the journal stream it writes.
type span struct {
	rt    *Runtime
	s     trace.Span
	key   journal.Key
	start time.Time
	// from is the stream's last sequence when the span began (0: the
	// stream was new, or named later): end reads only what follows.
	from uint64
}

// startSpan starts a span named name under ctx's.
func (rt *Runtime) startSpan(ctx context.Context, name string, key journal.Key, attrs ...attribute.KeyValue) (context.Context, *span) {
	ctx, s := rt.tracer.Start(ctx, name, trace.WithAttributes(attrs...))
	sp := &span{rt: rt, s: s, start: time.Now()}
	sp.setKey(key)
	if s.IsRecording() && key.ID != "" {
		sp.from, _ = rt.journal.LastSeq(key) // unreadable: end reads the stream whole, by time
	}
	return ctx, sp
}

// setKey names the stream the span writes (a create learns its sandbox's
// id once it is made or claimed).
func (sp *span) setKey(key journal.Key) {
	sp.key = key
	switch key.Kind {
	case journal.KindSandbox:
		sp.s.SetAttributes(tracing.SandboxID.String(key.ID))
	case journal.KindProcess:
		sp.s.SetAttributes(tracing.ProcessID.String(key.ID))
	case journal.KindRuntime:
		// The runtime's own stream (recovery's): no entity to name.
	}
}

// end ends the span with err's outcome, its journal events added.
func (sp *span) end(err error) {
	if !sp.s.IsRecording() {
		sp.s.End()
		return
	}
	if sp.key.ID != "" {
		var seqs []int64
		// The stream's events since the span began: those this
		// operation wrote (and any a concurrent one wrote meanwhile).
		rerr := sp.rt.journal.Read(sp.key, sp.from+1, 0, func(e journal.Event) error {
			if e.Time.Before(sp.start.Add(-time.Millisecond)) {
				return nil
			}
			seqs = append(seqs, int64(e.Seq))
			sp.s.AddEvent(e.Type, trace.WithTimestamp(e.Time), trace.WithAttributes(tracing.JournalSeq.Int64(int64(e.Seq))))
			return nil
		})
		if rerr == nil {
			sp.s.SetAttributes(tracing.JournalStream.String(fmt.Sprintf("%s/%s", sp.key.Kind, sp.key.ID)), tracing.JournalSeqs.Int64Slice(seqs))
		}
	}
	if err != nil {
		// The code only: an error's text can hold what a sandbox wrote
		// (a failed exec's first output), and a span leaves the host.
		code := string(spec.CodeOf(err))
		sp.s.SetStatus(codes.Error, code)
		sp.s.SetAttributes(attribute.String("stockade.error.code", code))
	}
	sp.s.End()
}

// processSpans are the spans of the processes running in each sandbox:
// an egress decision becomes an event on each (the proxy cannot tell which
// process made the connection; the process a client claims to be is an
// attribute).
type processSpans struct {
	mu        sync.Mutex
	bySandbox map[string]map[*span]struct{}
}

func (ps *processSpans) add(sandboxID string, sp *span) {
	if !sp.s.IsRecording() {
		return
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.bySandbox == nil {
		ps.bySandbox = map[string]map[*span]struct{}{}
	}
	m := ps.bySandbox[sandboxID]
	if m == nil {
		m = map[*span]struct{}{}
		ps.bySandbox[sandboxID] = m
	}
	m[sp] = struct{}{}
}

func (ps *processSpans) remove(sandboxID string, sp *span) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if m := ps.bySandbox[sandboxID]; m != nil {
		delete(m, sp)
		if len(m) == 0 {
			delete(ps.bySandbox, sandboxID)
		}
	}
}

// maxEventText bounds each text a span event takes from an egress
// decision: the host, method, reason and claimed process are the
// workload's words, and a span leaves the host (the SDK keeps at most 128
// events a span).
const maxEventText = 128

// clip cuts s to maxEventText bytes, on a rune's start.
func clip(s string) string {
	if len(s) <= maxEventText {
		return s
	}
	cut := maxEventText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// decided adds an egress decision to the sandbox's process spans.
func (ps *processSpans) decided(sandboxID string, d egress.Decision) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for sp := range ps.bySandbox[sandboxID] {
		sp.s.AddEvent("egress."+clip(d.Verdict), trace.WithTimestamp(d.Time), trace.WithAttributes(
			attribute.Int64("stockade.egress.seq", int64(d.Seq)), attribute.String("stockade.egress.host", clip(d.Host)),
			attribute.Int("stockade.egress.port", int(d.Port)), attribute.String("stockade.egress.method", clip(d.Method)),
			attribute.String("stockade.egress.rule", clip(d.Rule)), attribute.String("stockade.egress.reason", clip(d.Reason)),
			attribute.String("stockade.egress.claimed_process", clip(d.Process)),
			attribute.Int64("stockade.egress.bytes_up", d.Up), attribute.Int64("stockade.egress.bytes_down", d.Down)))
	}
}

// traceProcess ends a process's life span when it ends, with its result;
// meanwhile the span takes its sandbox's egress decisions.
func (rt *Runtime) traceProcess(sandboxID string, h *process.Handle, life *span) {
	if !life.s.IsRecording() {
		life.s.End()
		return
	}
	rt.procSpans.add(sandboxID, life)
	go func() {
		res, err := h.Wait(context.Background())
		rt.procSpans.remove(sandboxID, life)
		attrs := []attribute.KeyValue{attribute.Int("stockade.exit_code", res.ExitCode), attribute.String("stockade.exit_reason", res.Reason)}
		if u := res.Usage; u != nil {
			attrs = append(attrs, attribute.String("stockade.usage.source", string(u.Source)),
				attribute.Float64("stockade.usage.cpu_seconds", u.CPU().Seconds()), attribute.Int64("stockade.usage.max_rss", u.MaxRSS))
		}
		life.s.SetAttributes(attrs...)
		life.end(err)
	}()
}

// programName is what a span says of a process's argv: its program's base
// name, never its arguments (a span leaves the host; arguments may carry
// what should not).
func programName(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	name := argv[0]
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	return name
}
