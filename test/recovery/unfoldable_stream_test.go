package recovery

import (
	"context"
	"strings"
	"testing"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// TestRecoveryToleratesAnUnfoldableStream: a kept sandbox whose journal
// stream does not fold costs only itself. Open succeeds, the bad one is
// listed unreconciled with the fold error and refused, the healthy one is
// re-adopted and runs a process.
func TestRecoveryToleratesAnUnfoldableStream(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	bad, good := e.Sandbox(t, spec.Kept), e.Sandbox(t, spec.Kept)
	if err := e.RT.Close(); err != nil {
		t.Fatal(err)
	}
	j, err := journal.Open(e.Journal, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	typ, payload, _ := lifecycle.Encode(lifecycle.SandboxCreated{Workload: "not-this-one"})
	if _, err := j.Append(context.Background(), journal.Record{Key: journal.Key{Kind: journal.KindSandbox, ID: bad.ID()}, Type: typ, Payload: payload}); err != nil {
		t.Fatal(err)
	}
	_ = j.Close()

	rt := e.Reopen(t, stockade.Options{})
	if d := decisionOf(t, rt, bad.ID()); d.Decision != stockade.Unreconciled || !strings.Contains(d.Error, "illegal transition") {
		t.Fatalf("bad sandbox: %+v, want unreconciled with the fold error", d)
	}
	if d := decisionOf(t, rt, good.ID()); d.Decision != "re-adopt" {
		t.Fatalf("healthy sandbox: %+v", d)
	}
	if _, err := rt.Sandbox(context.Background(), bad.ID()); !spec.IsCode(err, spec.CodeUnreconciled) {
		t.Fatalf("bad sandbox: %v, want unreconciled", err)
	}
	list, err := rt.Sandboxes(context.Background())
	if err != nil || len(list) != 2 {
		t.Fatalf("listed %+v %v", list, err)
	}
	sb, err := rt.Sandbox(context.Background(), good.ID())
	if err != nil {
		t.Fatal(err)
	}
	if out, _, res, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"echo", "fine"}}); err != nil || out != "fine\n" || res.ExitCode != 0 {
		t.Fatalf("healthy sandbox's process: %q %+v %v", out, res, err)
	}
}
