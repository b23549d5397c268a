package stockade_test

import (
	"context"
	"testing"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// TestFakeUsageAcrossRollback: a rollback stops and starts the workload
// (its cgroup counts from zero again): the ledger closes the run it stops
// with a reading taken before (journaled, the run ended), starts the next,
// and sums both; nothing goes back, nothing is counted twice. The Fake's
// cgroup adds dockerio.FakeTick of CPU a reading.
func TestFakeUsageAcrossRollback(t *testing.T) {
	ctx := context.Background()
	rt := testutil.OpenFake(t, testutil.NewFake(t), "", func(o *stockade.Options) { o.UsageEvery = -1 })
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage, Lifetime: spec.Kept})
	cpu := func() spec.WorkloadUsage {
		t.Helper()
		u, err := rt.Usage(ctx, host.UsageQuery{Sandbox: sb.ID()})
		if err != nil || len(u.Sandboxes) != 1 {
			t.Fatalf("usage: %+v %v", u, err)
		}
		return u.Sandboxes[0].Workload
	}
	if w := cpu(); w.CPU != dockerio.FakeTick || w.Samples != 1 {
		t.Fatalf("the first reading: %+v", w)
	}
	if w := cpu(); w.CPU != 2*dockerio.FakeTick {
		t.Fatalf("the second reading: %+v", w)
	}
	ck, err := sb.Checkpoint(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Rollback(ctx, ck.ID); err != nil {
		t.Fatal(err)
	}
	// The run the rollback stopped was read once more (3 ticks), the new
	// run once now (1 tick).
	if w := cpu(); w.CPU != 4*dockerio.FakeTick || w.Samples != 4 {
		t.Fatalf("after the rollback: %+v, want 4 ticks over 4 readings", w)
	}
	hist, err := rt.History(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	ended := 0
	for _, e := range hist {
		if e.Type == (lifecycle.UsageSampled{}).Type() {
			ended++
		}
	}
	if ended != 1 {
		t.Fatalf("%d usage samples journaled, want the one closing the stopped run", ended)
	}
}
