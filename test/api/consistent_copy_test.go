package api

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

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
	again, err := rt.Sandbox(ctx, sb.ID())
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
