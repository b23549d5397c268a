package stockade_test

import (
	"context"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/internal/actors"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// uncertainJournal stores the first append of type typ and then reports it
// as Append does when its wait for the commit timed out: the caller cannot
// tell whether it is durable.
type uncertainJournal struct {
	actors.Journal
	typ  string
	done atomic.Bool
}

func (u *uncertainJournal) Append(ctx context.Context, recs ...journal.Record) ([]journal.Event, error) {
	evs, err := u.Journal.Append(ctx, recs...)
	if err == nil && recs[0].Type == u.typ && u.done.CompareAndSwap(false, true) {
		return nil, spec.Wrap(spec.CodeCancelled, "journal.append", journal.ErrUncertain, "stopped waiting: the append may or may not be durable")
	}
	return evs, err
}

// TestRetriedAppendJournalsOnce: a stop whose stopping intent landed but was
// reported uncertain is retried at once; the transition is journaled once,
// the stop succeeds, and the next Open folds the stream.
func TestRetriedAppendJournalsOnce(t *testing.T) {
	defer stockade.WrapJournal(func(j actors.Journal) actors.Journal {
		return &uncertainJournal{Journal: j, typ: lifecycle.SandboxStopping{}.Type()}
	})()
	f := testutil.NewFake(t)
	path := filepath.Join(t.TempDir(), "j.db")
	rt := testutil.OpenFake(t, f, path)
	ctx := context.Background()
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage, Lifetime: spec.Kept})
	if err := sb.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	hist, err := rt.History(t.Context(), sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	stopping := 0
	for _, e := range hist {
		if e.Type == "sandbox.stopping" {
			stopping++
		}
	}
	if stopping != 1 {
		t.Fatalf("%d stopping events journaled, want 1", stopping)
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	rt = testutil.OpenFake(t, f, path)
	if st, err := stockade.FoldSandbox(rt, sb.ID()); err != nil || st.Phase != lifecycle.PhaseExited {
		t.Fatalf("after reopen: %s %v", st.Phase, err)
	}
}

// TestFailedSandboxActorIsUnreconciled: a sandbox actor that panics (a bug
// of ours) takes its sandbox out of service: listed, refused, its state
// still readable with an error — never silently dropped.
func TestFailedSandboxActorIsUnreconciled(t *testing.T) {
	f := testutil.NewFake(t)
	rt := testutil.OpenFake(t, f, "")
	ctx := context.Background()
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage, Lifetime: spec.Kept})
	stockade.BreakSandboxActor(sb)
	testutil.Eventually(t, "the sandbox taken out of service", func() bool {
		_, err := rt.Sandbox(ctx, sb.ID())
		return spec.IsCode(err, spec.CodeUnreconciled)
	})
	if _, err := sb.Start(ctx, spec.Process{Argv: []string{"true"}}); !spec.IsCode(err, spec.CodeUnreconciled) {
		t.Fatalf("start: %v, want unreconciled", err)
	}
	st, err := sb.State(ctx)
	if !spec.IsCode(err, spec.CodeUnreconciled) || st.Phase != lifecycle.PhaseStarted {
		t.Fatalf("State: %s %v, want started with unreconciled", st.Phase, err)
	}
	// The actor's failure and its end reach the runtime by two paths (the
	// supervisor, the actor's stop), in either order: the reason says both
	// once both came.
	var list []stockade.SandboxInfo
	testutil.Eventually(t, "the listing to say the actor failed", func() bool {
		list, err = rt.Sandboxes(ctx)
		return err == nil && len(list) == 1 && strings.Contains(list[0].Why, "failed")
	})
	if !list[0].Unreconciled {
		t.Fatalf("Sandboxes: %+v, want it unreconciled", list)
	}
}

// TestCreateReturnsWhenTheRuntimeCloses: a create whose sandbox actor stops
// mid-way (the runtime closed under it) returns, rather than waiting for an
// answer that never comes.
func TestCreateReturnsWhenTheRuntimeCloses(t *testing.T) {
	f := testutil.NewFake(t)
	release, entered := make(chan struct{}), make(chan struct{}, 1)
	f.Fault = func(op string) error {
		if op == "StartSandbox" {
			entered <- struct{}{}
			<-release
		}
		return nil
	}
	defer close(release)
	rt, err := stockade.Open(context.Background(), stockade.Options{Journal: filepath.Join(t.TempDir(), "j.db"), Engine: f})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := rt.CreateSandbox(context.Background(), spec.Sandbox{Image: fakeImage})
		done <- err
	}()
	<-entered
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !spec.IsCode(err, spec.CodeCancelled) {
		t.Fatalf("create under a closing runtime: %v, want cancelled", err)
	}
}
