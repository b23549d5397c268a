package test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

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
	if _, err := rt.Sandbox(bad.ID()); !spec.IsCode(err, spec.CodeUnreconciled) {
		t.Fatalf("bad sandbox: %v, want unreconciled", err)
	}
	list, err := rt.Sandboxes(context.Background())
	if err != nil || len(list) != 2 {
		t.Fatalf("listed %+v %v", list, err)
	}
	sb, err := rt.Sandbox(good.ID())
	if err != nil {
		t.Fatal(err)
	}
	if out, _, res, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"echo", "fine"}}); err != nil || out != "fine\n" || res.ExitCode != 0 {
		t.Fatalf("healthy sandbox's process: %q %+v %v", out, res, err)
	}
}

// TestAPIOOMReason: a process the kernel's OOM killer ends is reported oom
// (exit 137); a later process that kills itself with SIGKILL is not.
func TestAPIOOMReason(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	sb := e.Sandbox(t, spec.OneShot)
	// dd's 256 MiB block buffer is far over the sandbox's 128 MiB with no
	// swap: the OOM killer ends it.
	_, _, res, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"sh", "-c", "exec dd if=/dev/zero of=/dev/null bs=256M count=1"}, Stderr: spec.Discard})
	if err != nil || res.Reason != string(lifecycle.ReasonOOM) || res.ExitCode != 137 {
		t.Fatalf("memory hog: %+v %v, want oom with exit 137", res, err)
	}
	_, _, res, err = testkit.RunOut(t, sb, spec.Process{Argv: []string{"sh", "-c", "kill -9 $$"}})
	if res.Reason == string(lifecycle.ReasonOOM) || res.ExitCode != 137 {
		t.Fatalf("self-killed: %+v %v, want 137 and not oom", res, err)
	}
}

// TestAPIConsistentGetsAreJournaled: two consistent copies share one
// journaled freeze; the workload thaws only after the last is closed. A
// runtime that dies mid-copy leaves the workload frozen; recovery thaws it.
func TestAPIConsistentGetsAreJournaled(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	sb := e.Sandbox(t, spec.Kept)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	paused := func() bool {
		st, err := sb.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c, err := e.Docker.ContainerInspect(ctx, st.Created.Workload)
		if err != nil {
			t.Fatal(err)
		}
		return c.State.Paused
	}
	first, _, err := sb.Get(ctx, "work", true)
	if err != nil {
		t.Fatal(err)
	}
	second, _, err := sb.Get(ctx, "work", true)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, first)
	_ = first.Close()
	if !paused() {
		t.Fatal("the first close thawed the workload under the second copy")
	}
	_, _ = io.Copy(io.Discard, second)
	_ = second.Close()
	deadline := time.Now().Add(time.Minute)
	for paused() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if paused() {
		t.Fatal("still paused after every copy closed")
	}
	if _, _, err := sb.Get(ctx, "work", true); err != nil { // never closed
		t.Fatal(err)
	}
	if !paused() {
		t.Fatal("not paused during a consistent copy")
	}
	rt := e.Reopen(t, stockade.Options{})
	again, err := rt.Sandbox(sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	if out, _, res, err := testkit.RunOut(t, again, spec.Process{Argv: []string{"echo", "thawed"}}); err != nil || out != "thawed\n" || res.ExitCode != 0 {
		t.Fatalf("after recovery: %q %+v %v", out, res, err)
	}
	hist, err := rt.History(t.Context(), sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, ev := range hist {
		n[ev.Type]++
	}
	if n["sandbox.pausing"] != 2 || n["sandbox.unpaused"] != 2 {
		t.Fatalf("journaled %d pausing and %d unpaused, want 2 and 2", n["sandbox.pausing"], n["sandbox.unpaused"])
	}
}

// TestAPIProcessOutlivesItsOutput: a process that closes its stdout and
// stderr and goes on is not taken for ended at its output's end: its real
// exit, learned from the exec_die event, is what Wait reports.
func TestAPIProcessOutlivesItsOutput(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	sb := e.Sandbox(t, spec.OneShot)
	out, _, res, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"sh", "-c", "echo bye; exec >&- 2>&-; sleep 2; exit 3"}})
	if err != nil || out != "bye\n" || res.ExitCode != 3 || res.Reason != string(lifecycle.ReasonExited) {
		t.Fatalf("%q %+v %v, want exit 3 after its output ended", out, res, err)
	}
}

// TestAPIWrapperLeavesTheEnvironment: the exec wrapper's own shell
// variables never replace the process's: a command gets every variable as
// its caller set it.
func TestAPIWrapperLeavesTheEnvironment(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	sb := e.Sandbox(t, spec.OneShot)
	env := []string{"o=1", "f=2", "k=3", "v=4", "g=5", "__x=6"}
	out, _, res, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"sh", "-c", `echo "$o $f $k $v $g $__x"`}, Env: env})
	if err != nil || res.ExitCode != 0 || out != "1 2 3 4 5 6\n" {
		t.Fatalf("%q %+v %v, want the caller's values", out, res, err)
	}
}
