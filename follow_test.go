package stockade_test

import (
	"context"
	"testing"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/spec"
)

// TestFollow: following a sandbox gives its past, then its and its
// processes' new events as they are committed, each once and in per-stream
// order; another sandbox's events are not in it, but a tail (no id) has
// them.
func TestFollow(t *testing.T) {
	f := testutil.NewFake(t)
	rt := testutil.OpenFake(t, f, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage, Lifetime: spec.Kept})
	type got struct {
		ev  stockade.HistoryEvent
		err error
	}
	follow := func(id string) <-chan got {
		c := make(chan got, 256)
		ready := make(chan struct{})
		go func() {
			err := rt.Follow(ctx, id, func(e stockade.HistoryEvent) error {
				select {
				case <-ready:
				default:
					if e.Type == "sandbox.started" || id == "" {
						close(ready)
					}
				}
				c <- got{ev: e}
				return nil
			})
			c <- got{err: err}
		}()
		if id != "" {
			<-ready // the past is read
		}
		return c
	}
	mine, all := follow(sb.ID()), follow("")
	other := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
	if _, _, _, err := run(t, sb, spec.Process{Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	want := historyTypes(t, rt, sb.ID(), "")
	seen := map[string]uint64{}
	for i := range want {
		g := <-mine
		if g.err != nil {
			t.Fatalf("follow ended: %v", g.err)
		}
		key := g.ev.Kind + "/" + g.ev.ID
		if g.ev.Seq != seen[key]+1 || g.ev.ID == other.ID() {
			t.Fatalf("event %d: %s #%d after #%d", i, key, g.ev.Seq, seen[key])
		}
		seen[key] = g.ev.Seq
	}
	if len(seen) != 2 {
		t.Fatalf("followed %d streams, want the sandbox and its process: %v", len(seen), seen)
	}
	sawOther := false
	for !sawOther {
		g := <-all
		if g.err != nil {
			t.Fatalf("tail ended: %v", g.err)
		}
		sawOther = g.ev.ID == other.ID()
	}
	cancel()
	if g := <-mine; g.err != nil || g.ev.ID != "" {
		t.Fatalf("after the whole history: %+v %v, want the follow's clean end", g.ev, g.err)
	}
}
