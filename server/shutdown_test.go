package server_test

import (
	"path/filepath"
	"testing"

	"github.com/stockade/stockade/inspect"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// TestShutdownServed: a client's Shutdown stops the runtime's sandboxes (a
// kept one exits with its resources, a one-shot one is removed), removes
// the pool's sandboxes, closes the runtime and tells the program serving it
// to stop; the client is closed after.
func TestShutdownServed(t *testing.T) {
	fx := serve(t, withPool("warm", 1))
	ctx := ctxFor(t)
	awaitServedPool(t, fx.c, "warm", 1)
	kept, err := fx.c.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage, Lifetime: spec.Kept, Policy: spec.Policy{MemoryBytes: 64 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	oneShot, err := fx.c.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage, Lifetime: spec.OneShot, Policy: spec.Policy{MemoryBytes: 64 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-fx.srv.ShutdownRequested():
		t.Fatal("shutdown requested before anyone asked")
	default:
	}
	if err := fx.c.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	<-fx.srv.ShutdownRequested()
	if _, err := fx.c.Sandboxes(ctx); err == nil {
		t.Fatal("the client still answers after its shutdown")
	}
	// The runtime is closed: the journal says where each sandbox ended.
	in, err := inspect.Open(filepath.Join(filepath.Dir(fx.socket), "journal.db"))
	if err != nil {
		t.Fatalf("the runtime still holds its journal after the shutdown: %v", err)
	}
	defer func() { _ = in.Close() }() // read only
	for _, c := range []struct {
		id   string
		want lifecycle.Phase
	}{{kept.ID(), lifecycle.PhaseExited}, {oneShot.ID(), lifecycle.PhaseRemoved}} {
		st, err := in.ReplaySandbox(ctx, c.id, 0)
		if err != nil || st.Phase != c.want {
			t.Fatalf("sandbox %s after the shutdown: %s %v, want %s", c.id, st.Phase, err, c.want)
		}
	}
	owned, err := fx.fake.ListOwned(ctx, fx.rt.Owner())
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, o := range owned {
		left = append(left, o.Sandbox)
	}
	if len(left) != 1 || left[0] != kept.ID() {
		t.Fatalf("sandboxes left after the shutdown: %v, want the kept one only (the pooled one removed)", left)
	}
}
