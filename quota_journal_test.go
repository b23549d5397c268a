package stockade_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// TestFakeQuotaHitNeedsTheJournal: a process passes its output quota while
// the journal refuses an append on the way to its kill — the quota_hit fact
// itself, or the stopping intent after it. The process actor gives up
// (abandonJournal): the caller gets the journal's error as a failed result,
// no signal is sent (nothing is killed that the journal does not say is
// being stopped), and the process stays live in the journal, neither
// stopping nor exited, for the next recovery to settle.
func TestFakeQuotaHitNeedsTheJournal(t *testing.T) {
	for _, tc := range []struct {
		refuse   string
		quotaHit bool // the fact is journaled before the refusal
	}{
		{lifecycle.QuotaHit{}.Type(), false},
		{lifecycle.ProcessStopping{}.Type(), true},
	} {
		t.Run(tc.refuse, func(t *testing.T) {
			f := newExecFake(t)
			f.Script = func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun {
				// 8 bytes fit the quota of 10, the next 8 pass it; then
				// the process runs until it is signalled.
				return dockerio.FakeRun{
					Frames: []dockerio.FakeFrame{{Stream: framing.Stdout, Data: []byte("12345678")}, {Stream: framing.Stderr, Data: []byte("abcdefgh")}},
					Hold:   make(chan struct{}),
				}
			}
			var signals atomic.Int32
			f.Fault = func(op string) error {
				if op == "SignalGroup" {
					signals.Add(1)
				}
				return nil
			}
			defer stockade.WrapJournal(func(j actorsJournal) actorsJournal {
				return &refusingJournal{actorsJournal: j, typ: tc.refuse}
			})()
			rt := testutil.OpenFake(t, f, "")
			ctx := context.Background()
			sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
			p := mustStart(t, sb, spec.Process{Argv: []string{"chatty"}, OutputQuota: 10, Stdout: spec.Discard, Stderr: spec.Discard})

			res, err := p.Wait(ctx)
			if !spec.IsCode(err, spec.CodeJournal) || !strings.Contains(err.Error(), "the disk is full") {
				t.Fatalf("wait: %v, want the journal's error", err)
			}
			if res.Reason != string(lifecycle.ReasonFailed) || res.ExitCode != -1 || !spec.IsCode(res.Err, spec.CodeJournal) {
				t.Fatalf("result %+v, want failed with the journal's error and no exit code", res)
			}
			if n := signals.Load(); n != 0 {
				t.Fatalf("%d signals sent without a journaled stopping intent", n)
			}

			st, err := stockade.FoldProcess(rt, p.ID())
			if err != nil || st.Phase != lifecycle.PhaseStarted || st.QuotaHit != tc.quotaHit || st.Exit != nil {
				t.Fatalf("process journaled as %s (quota hit %v, exit %+v) %v; want started, quota hit %v, no exit (for recovery)",
					st.Phase, st.QuotaHit, st.Exit, err, tc.quotaHit)
			}
			types := historyTypes(t, rt, sb.ID(), journal.KindProcess)
			if slices.Contains(types, tc.refuse) || slices.Contains(types, lifecycle.ProcessExited{}.Type()) {
				t.Fatalf("process history %q holds the refused %s or an exit", types, tc.refuse)
			}
			// Still running in the engine: no kill reached it.
			if x, err := f.InspectExec(ctx, st.ExecID); err != nil || !x.Running {
				t.Fatalf("exec %s: %+v %v, want still running", st.ExecID, x, err)
			}
		})
	}
}
