package stockade_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// TestPropertyReplayEqualsLiveState drives random sequences of operations —
// create, start, stop and signal processes, stop and remove sandboxes, close
// and reopen the runtime (recovery) — and checks after each that replaying
// the journal through the folds gives exactly the state the live actors hold,
// and that every process's result is what its journal says.
func TestPropertyReplayEqualsLiveState(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4, 5, 6}
	if testing.Short() {
		seeds = seeds[:2]
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { propertyRun(t, seed, 40) })
	}
}

type liveProc struct {
	p   *stockade.Process
	sid string
}

func propertyRun(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, seed))
	f := testutil.NewFake(t)
	f.Script = func(_ dockerio.Sandbox, req dockerio.ExecRequest) dockerio.FakeRun {
		var code int
		_, _ = fmt.Sscan(req.Spec.Argv[1], &code) // the test's own argv: a number
		run := dockerio.FakeRun{ExitCode: code, Frames: []dockerio.FakeFrame{{Stream: framing.Stdout, Data: []byte(req.Spec.Argv[2])}}}
		if req.Spec.Argv[0] == "hold" {
			run.Hold = make(chan struct{}) // runs until signalled
		}
		return run
	}
	path := filepath.Join(t.TempDir(), "journal.db")
	ctx := context.Background()
	rt := testutil.OpenFake(t, f, path)
	var sandboxes []string
	var procs []liveProc
	for step := range steps {
		op := rng.IntN(10)
		switch {
		case op < 2 || len(sandboxes) == 0:
			life := spec.Kept
			if rng.IntN(2) == 0 {
				life = spec.OneShot
			}
			sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage, Lifetime: life})
			if err != nil {
				t.Fatalf("step %d create: %v", step, err)
			}
			sandboxes = append(sandboxes, sb.ID())
		case op < 5:
			sb, err := rt.Sandbox(ctx, sandboxes[rng.IntN(len(sandboxes))])
			if err != nil {
				continue // removed meanwhile
			}
			kind := "exit"
			if rng.IntN(3) == 0 {
				kind = "hold"
			}
			p, err := sb.Start(ctx, spec.Process{Argv: []string{kind, fmt.Sprint(rng.IntN(4)), "out"}, Stderr: spec.Discard})
			if spec.IsCode(err, spec.CodeAdmissionClosed) {
				continue
			}
			if err != nil {
				t.Fatalf("step %d start: %v", step, err)
			}
			go func() { _, _ = io.Copy(io.Discard, p.Stdout()) }()
			procs = append(procs, liveProc{p, sb.ID()})
		case op < 6 && len(procs) > 0:
			_ = procs[rng.IntN(len(procs))].p.Stop(ctx) // may have ended already: the properties are checked after each step
		case op < 7:
			if sb, err := rt.Sandbox(ctx, sandboxes[rng.IntN(len(sandboxes))]); err == nil {
				if err := sb.Stop(ctx); err != nil {
					t.Fatalf("step %d stop: %v", step, err)
				}
			}
		case op < 8:
			if sb, err := rt.Sandbox(ctx, sandboxes[rng.IntN(len(sandboxes))]); err == nil {
				if err := sb.Remove(ctx); err != nil {
					t.Fatalf("step %d remove: %v", step, err)
				}
			}
		case op < 9:
			// Let running work settle so results are comparable, then
			// restart: the next runtime recovers from the journal alone.
			if err := rt.Close(); err != nil {
				t.Fatal(err)
			}
			rt = testutil.OpenFake(t, f, path)
			procs = nil
		default:
			for _, lp := range procs {
				wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
				_, _ = lp.p.Wait(wctx) // bounded: some are still held
				cancel()
			}
		}
		checkReplay(t, rt, procs, sandboxes, step)
	}
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func checkReplay(t *testing.T, rt *stockade.Runtime, procs []liveProc, sandboxes []string, step int) {
	t.Helper()
	ctx := context.Background()
	// Nothing fails here (no fault is injected): a sandbox journaled failed
	// means a stop or a timeout was mistaken for a broken stream.
	for _, id := range sandboxes {
		s, err := stockade.FoldSandbox(rt, id)
		if err != nil {
			t.Fatalf("step %d: replay of %s: %v", step, id, err)
		}
		if s.Exit != nil && s.Exit.Reason == lifecycle.ReasonFailed {
			t.Fatalf("step %d: sandbox %s exited %+v with no fault injected", step, id, *s.Exit)
		}
	}
	list, err := rt.Sandboxes(ctx)
	if err != nil {
		t.Fatalf("step %d: %v", step, err)
	}
	for _, info := range list {
		sb, err := rt.Sandbox(ctx, info.ID)
		if err != nil {
			continue
		}
		live, err := sb.State(ctx)
		if err != nil {
			t.Fatalf("step %d: state: %v", step, err)
		}
		replayed, err := stockade.FoldSandbox(rt, info.ID)
		if err != nil {
			t.Fatalf("step %d: replay of %s: %v", step, info.ID, err)
		}
		// The actor may have journaled more since State answered; compare
		// only when both saw the same last event.
		if live.Seq == replayed.Seq && jsonOf(live) != jsonOf(replayed) {
			t.Fatalf("step %d: sandbox %s\nlive     %s\nreplayed %s", step, info.ID, jsonOf(live), jsonOf(replayed))
		}
		if live.Seq > replayed.Seq {
			t.Fatalf("step %d: sandbox %s: the actor holds seq %d the journal lacks (%d)", step, info.ID, live.Seq, replayed.Seq)
		}
	}
	for _, lp := range procs {
		select {
		case <-lp.p.Done():
		default:
			continue
		}
		res, _ := lp.p.Wait(ctx)
		if res.Reason == "" { // detached by a close: nothing journaled
			continue
		}
		replayed, err := stockade.FoldProcess(rt, lp.p.ID())
		if err != nil {
			t.Fatalf("step %d: replay of process %s: %v", step, lp.p.ID(), err)
		}
		x := replayed.Exit
		if x == nil || string(x.Reason) != res.Reason || (x.ExitCode == nil) != (res.ExitCode < 0) ||
			x.ExitCode != nil && *x.ExitCode != res.ExitCode || x.StdoutBytes != res.StdoutBytes {
			t.Fatalf("step %d: process %s result %+v, journal says %s", step, lp.p.ID(), res, jsonOf(x))
		}
	}
}
