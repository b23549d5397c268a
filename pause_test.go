package stockade_test

import (
	"context"
	"io"
	"path/filepath"
	"testing"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// handleOf names a sandbox's resources as the Fake keys them.
func handleOf(t *testing.T, rt *stockade.Runtime, id string) dockerio.Sandbox {
	t.Helper()
	h, err := stockade.HandleOf(rt, id)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func countTypes(t *testing.T, rt *stockade.Runtime, id string) map[string]int {
	t.Helper()
	n := map[string]int{}
	for _, typ := range historyTypes(t, rt, id, "") {
		n[typ]++
	}
	return n
}

// TestFakeConcurrentConsistentGets: two consistent copies open at once share
// one journaled freeze; the workload thaws only when the last is closed, and
// a process asked meanwhile starts after the thaw.
func TestFakeConcurrentConsistentGets(t *testing.T) {
	f := newFake(t)
	rt := openFake(t, f, "")
	ctx := context.Background()
	sb, err := rt.CreateSandbox(ctx, stockade.SandboxSpec{Image: fakeImage})
	if err != nil {
		t.Fatal(err)
	}
	h := handleOf(t, rt, sb.ID())
	first, live, err := sb.Get(ctx, "work", true)
	if err != nil || live {
		t.Fatalf("first copy: live %v, %v", live, err)
	}
	second, live, err := sb.Get(ctx, "work", true)
	if err != nil || live {
		t.Fatalf("second copy: live %v, %v", live, err)
	}
	if !f.Paused(h) {
		t.Fatal("the workload is not paused during consistent copies")
	}
	started := make(chan error, 1)
	go func() {
		_, _, _, err := run(t, sb, spec.Process{Argv: []string{"true"}})
		started <- err
	}()
	io.Copy(io.Discard, first)
	first.Close()
	if !f.Paused(h) {
		t.Fatal("the first close thawed the workload under the second copy")
	}
	select {
	case err := <-started:
		t.Fatalf("a process ran in a paused workload: %v", err)
	default:
	}
	second.Close()
	if err := <-started; err != nil {
		t.Fatalf("the held process: %v", err)
	}
	waitFor(t, "the thaw journaled", func() bool { return countTypes(t, rt, sb.ID())["sandbox.unpaused"] == 1 })
	if f.Paused(h) {
		t.Fatal("still paused after every copy closed")
	}
	if n := countTypes(t, rt, sb.ID()); n["sandbox.pausing"] != 1 {
		t.Fatalf("%d pausing intents journaled, want 1", n["sandbox.pausing"])
	}
}

// TestFakeRecoveryThawsAPausedSandbox: a runtime that dies during a
// consistent copy leaves the workload paused and the journal saying so;
// recovery thaws it, journals the thaw, and the sandbox runs processes.
func TestFakeRecoveryThawsAPausedSandbox(t *testing.T) {
	f := newFake(t)
	path := filepath.Join(t.TempDir(), "j.db")
	rt := openFake(t, f, path)
	ctx := context.Background()
	sb, err := rt.CreateSandbox(ctx, stockade.SandboxSpec{Image: fakeImage, Lifetime: spec.Kept})
	if err != nil {
		t.Fatal(err)
	}
	h := handleOf(t, rt, sb.ID())
	if _, _, err := sb.Get(ctx, "work", true); err != nil {
		t.Fatal(err)
	}
	rt.Close() // the copy is never closed: as if the runtime died
	if !f.Paused(h) {
		t.Fatal("the workload did not stay paused")
	}
	rt = openFake(t, f, path)
	waitFor(t, "the thaw", func() bool {
		st, err := stockade.FoldSandbox(rt, sb.ID())
		return err == nil && !st.Paused
	})
	if f.Paused(h) {
		t.Fatal("recovery left the workload paused")
	}
	again, err := rt.Sandbox(sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, res, err := run(t, again, spec.Process{Argv: []string{"true"}}); err != nil || res.Reason != string(lifecycle.ReasonExited) {
		t.Fatalf("process after the thaw: %+v %v", res, err)
	}
}
