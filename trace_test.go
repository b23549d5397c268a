package stockade_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/internal/otlptest"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/tracing/exporter"
)

// callerSpan is a caller's span the runtime's spans must hang under: what
// a host's own tracing puts in the context it passes.
func callerSpan(ctx context.Context, n byte) (context.Context, trace.SpanContext) {
	var tid trace.TraceID
	var sid trace.SpanID
	for i := range tid {
		tid[i] = n + byte(i)
	}
	for i := range sid {
		sid[i] = 0xa0 + n + byte(i)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
	return trace.ContextWithRemoteSpanContext(ctx, sc), sc
}

// TestFakeTraceOfASandboxsLife: a create, a process and a remove, traced
// through the OTLP exporter the environment configures (http/protobuf, to a
// receiver in the test), hang under the caller's span: the create with its
// readbacks, the process with its start, the remove; each span names its
// entity and carries the journal sequence numbers its history shows.
func TestFakeTraceOfASandboxsLife(t *testing.T) {
	rcv := otlptest.Start(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.HTTP)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ts, err := exporter.New(ctx)
	if err != nil || !ts.On || ts.Describe() != "OTLP over http/protobuf" {
		t.Fatalf("exporter from the environment: %+v, %v", ts, err)
	}
	t.Cleanup(func() { _ = ts.Shutdown(context.Background()) })
	rt := testutil.OpenFake(t, testutil.NewFake(t), "", func(o *stockade.Options) { o.TracerProvider = ts.Provider() })
	cctx, caller := callerSpan(ctx, 1)

	sb, err := rt.CreateSandbox(cctx, spec.Sandbox{Image: fakeImage, Lifetime: spec.Kept})
	if err != nil {
		t.Fatal(err)
	}
	p, err := sb.Start(cctx, spec.Process{Argv: []string{"/bin/true", "--secret-arg"}, Stdout: spec.Discard, Stderr: spec.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sb.Remove(cctx); err != nil {
		t.Fatal(err)
	}
	hist, err := rt.History(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	seqs := map[string][]string{} // a stream's events' seqs by type, as the history has them
	for _, e := range hist {
		seqs[e.Kind+"/"+e.ID] = append(seqs[e.Kind+"/"+e.ID], fmt.Sprintf("%s#%d", e.Type, e.Seq))
	}

	names := []string{"stockade.sandbox.create", "stockade.readback", "stockade.readback", "stockade.process", "stockade.process.start", "stockade.sandbox.remove"}
	spans := rcv.Await(t, ctx, caller.TraceID().String(), func(s []otlptest.Span) bool { return len(s) >= len(names) })
	byName := map[string][]otlptest.Span{}
	var got []string
	for _, s := range spans {
		byName[s.Name] = append(byName[s.Name], s)
		got = append(got, s.Name)
	}
	slices.Sort(got)
	want := slices.Clone(names)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("spans %v, want %v", got, want)
	}
	one := func(name string) otlptest.Span { return byName[name][0] }
	create, proc, start, remove := one("stockade.sandbox.create"), one("stockade.process"), one("stockade.process.start"), one("stockade.sandbox.remove")
	for _, s := range []otlptest.Span{create, proc, remove} {
		if s.Parent() != caller.SpanID().String() {
			t.Errorf("%s's parent is %q, not the caller's span %s", s.Name, s.Parent(), caller.SpanID())
		}
		if s.Service != "stockade" {
			t.Errorf("%s's service is %q", s.Name, s.Service)
		}
	}
	for _, rb := range byName["stockade.readback"] {
		if rb.Parent() != create.ID() || rb.Attr("stockade.sandbox.id") != sb.ID() {
			t.Errorf("a readback's parent %s (the create is %s), sandbox %q", rb.Parent(), create.ID(), rb.Attr("stockade.sandbox.id"))
		}
	}
	if start.Parent() != proc.ID() {
		t.Errorf("the process's start is under %s, not the process's span %s", start.Parent(), proc.ID())
	}
	if create.Attr("stockade.sandbox.id") != sb.ID() || create.Attr("stockade.create.path") != "cold" || proc.Attr("stockade.process.id") != p.ID() {
		t.Errorf("create names %q (%s), process %q", create.Attr("stockade.sandbox.id"), create.Attr("stockade.create.path"), proc.Attr("stockade.process.id"))
	}
	if proc.Attr("stockade.program") != "true" || strings.Contains(fmt.Sprint(proc.Attributes), "--secret-arg") {
		t.Errorf("the process span carries %v: want the program's name and no argument", proc.Attributes)
	}
	if proc.Attr("stockade.exit_reason") != "exited" || proc.Attr("stockade.usage.source") != string(spec.UsageRusage) {
		t.Errorf("the process span's end: %v", proc.Attributes)
	}
	// Each span's journal events are its stream's, as the history numbers
	// them: the create's reserve to start, the process's whole life, the
	// remove's stop to removal.
	for _, tc := range []struct {
		span   otlptest.Span
		stream string
		first  string
		last   string
	}{
		{create, "sandbox/" + sb.ID(), "sandbox.reserved", "sandbox.started"},
		{proc, "process/" + p.ID(), "process.reserved", "process.exited"},
		{remove, "sandbox/" + sb.ID(), "sandbox.stopping", "sandbox.removed"},
	} {
		if got := tc.span.Attr("stockade.journal.stream"); got != tc.stream {
			t.Errorf("%s: stream %q, want %q", tc.span.Name, got, tc.stream)
			continue
		}
		var evs []string
		for _, e := range tc.span.Events {
			evs = append(evs, fmt.Sprintf("%s#%s", e.Name, otlptest.Attr(e.Attributes, "stockade.journal.seq")))
		}
		all := strings.Join(seqs[tc.stream], " ")
		joined := strings.Join(evs, " ")
		if len(evs) == 0 || !strings.Contains(all, joined) || !strings.HasPrefix(joined, tc.first+"#") || !strings.Contains(joined, tc.last+"#") {
			t.Errorf("%s: journal events %q; the history of %s is %q (want a run from %s to %s)", tc.span.Name, joined, tc.stream, all, tc.first, tc.last)
		}
	}
}

// TestFakeTraceOfTheOtherOperations: a warm claim's create, a checkpoint,
// a rollback and a stop each have their span under the caller's, with the
// journal events they wrote (the claim's, the checkpoint's, the rollback's
// intent and fact, the stop's, the usage ledger's closing samples); a
// runtime opened again on the journal traces its recovery.
func TestFakeTraceOfTheOtherOperations(t *testing.T) {
	rcv := otlptest.Start(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.HTTP)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ts, err := exporter.New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ts.Shutdown(context.Background()) })
	f := testutil.NewFake(t)
	path := filepath.Join(t.TempDir(), "journal.db")
	traced := func(o *stockade.Options) { o.TracerProvider = ts.Provider() }
	rt := testutil.OpenFake(t, f, path, traced, func(o *stockade.Options) {
		o.Pools = []stockade.PoolSpec{{Name: "warm", Sandbox: spec.Sandbox{Image: fakeImage}, Size: 1}}
	})
	testutil.Eventually(t, "the pool ready", func() bool {
		ps, err := rt.Pools(ctx)
		return err == nil && len(ps) == 1 && ps[0].Ready == 1
	})
	cctx, caller := callerSpan(ctx, 2)
	sb, err := rt.CreateSandbox(cctx, spec.Sandbox{Image: fakeImage, Lifetime: spec.Kept})
	if err != nil {
		t.Fatal(err)
	}
	ck, err := sb.Checkpoint(cctx, "before")
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Rollback(cctx, ck.ID); err != nil {
		t.Fatal(err)
	}
	if err := sb.Stop(cctx); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"stockade.sandbox.create": {"sandbox.claimed"},
		"stockade.checkpoint":     {"sandbox.checkpointed"},
		"stockade.rollback":       {"sandbox.rolling_back", "sandbox.usage_sampled", "sandbox.rolled_back"},
		"stockade.sandbox.stop":   {"sandbox.stopping", "sandbox.usage_sampled", "sandbox.exited"},
	}
	spans := rcv.Await(t, ctx, caller.TraceID().String(), func(s []otlptest.Span) bool {
		n := 0
		for _, x := range s {
			if _, ok := want[x.Name]; ok {
				n++
			}
		}
		return n == len(want)
	})
	for _, s := range spans {
		evs, ok := want[s.Name]
		if !ok {
			continue
		}
		var got []string
		for _, e := range s.Events {
			got = append(got, e.Name)
		}
		for _, ev := range evs {
			if !slices.Contains(got, ev) {
				t.Errorf("%s's journal events %v lack %s", s.Name, got, ev)
			}
		}
		if s.Parent() != caller.SpanID().String() || s.Attr("stockade.sandbox.id") != sb.ID() {
			t.Errorf("%s: parent %s, sandbox %q", s.Name, s.Parent(), s.Attr("stockade.sandbox.id"))
		}
		if s.Name == "stockade.sandbox.create" && (s.Attr("stockade.create.path") != "warm" || s.Attr("stockade.pool") != "warm") {
			t.Errorf("the claim's create span: path %q, pool %q", s.Attr("stockade.create.path"), s.Attr("stockade.pool"))
		}
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	testutil.OpenFake(t, f, path, traced)
	testutil.Eventually(t, "the recovery's span exported", func() bool {
		_ = ts.Provider().(interface{ ForceFlush(context.Context) error }).ForceFlush(ctx)
		for _, s := range rcv.All() {
			if s.Name == "stockade.recovery" && s.Attr("stockade.recovery.sandboxes") != "" && s.Attr("stockade.recovery.sandboxes") != "0" {
				return true
			}
		}
		return false
	})
}
