package actors_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/stockade/stockade/internal/actors"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

func sandboxSeq(s lifecycle.Sandbox) uint64 { return s.Seq }

// TestRecordFolded: an actor's append is folded first (a refused event is
// never journaled), and an actor whose view of its stream is stale (an
// append it was told failed did land) catches up and journals on top.
func TestRecordFolded(t *testing.T) {
	j, err := journal.Open(filepath.Join(t.TempDir(), "j.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := j.Close(); err != nil {
			t.Error(err)
		}
	}()
	d := actors.Deps{Journal: j}.WithDefaults()
	var s lifecycle.Sandbox
	rec := func(ev lifecycle.Event) error {
		var err error
		s, _, err = actors.RecordFolded(&d, journal.KindSandbox, "sb", "", s, sandboxSeq, lifecycle.ApplySandbox, ev)
		return err
	}
	for _, ev := range []lifecycle.Event{lifecycle.SandboxReserved{Spec: spec.Sandbox{Lifetime: spec.Kept}}, lifecycle.SandboxCreated{Workload: "w"}, lifecycle.SandboxStarted{}} {
		if err := rec(ev); err != nil {
			t.Fatal(err)
		}
	}
	// Refused by the fold: not journaled.
	var illegal *lifecycle.IllegalTransition
	if err := rec(lifecycle.SandboxRemoved{}); !errors.As(err, &illegal) || s.Seq != 3 {
		t.Fatalf("an illegal event: %v (seq %d)", err, s.Seq)
	}
	// The stopping intent landed although the actor never learned it.
	stale := s
	typ, payload, _ := lifecycle.Encode(lifecycle.SandboxStopping{Reason: lifecycle.ReasonTimeout})
	if _, err := j.Append(context.Background(), journal.Record{Key: journal.Key{Kind: journal.KindSandbox, ID: "sb"}, Type: typ, Payload: payload, Sequenced: true, After: 3}); err != nil {
		t.Fatal(err)
	}
	s = stale
	if err := rec(lifecycle.SandboxExited{Reason: lifecycle.ReasonTimeout}); err != nil {
		t.Fatalf("on a stale view: %v", err)
	}
	if s.Phase != lifecycle.PhaseExited || s.Stopping != lifecycle.ReasonTimeout || s.Seq != 5 {
		t.Fatalf("after catching up: %s, stopping %q, seq %d", s.Phase, s.Stopping, s.Seq)
	}
	n := 0
	if err := j.Read(journal.Key{Kind: journal.KindSandbox, ID: "sb"}, 0, 0, func(journal.Event) error { n++; return nil }); err != nil || n != 5 {
		t.Fatalf("%d events, %v; want 5", n, err)
	}
}
