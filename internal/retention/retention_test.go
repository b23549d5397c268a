package retention_test

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/internal/journaltest"
	"github.com/stockade/stockade/internal/retention"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/recorder"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/statedir"
)

// TestApply: a sandbox removed long ago goes from the journal with its
// process, and so do that process's recording and the sandbox's egress
// decisions; a live sandbox keeps its decisions and its process its
// recording.
func TestApply(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	path := filepath.Join(t.TempDir(), "journal.db")
	j, err := journal.Open(path, journal.Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = j.Close() }() // the test's end
	rec, err := recorder.Open(statedir.Recordings(path), spec.Record{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sbox := func(id string) journal.Key { return journal.Key{Kind: journal.KindSandbox, ID: id} }
	proc := func(id string) journal.Key { return journal.Key{Kind: journal.KindProcess, ID: id} }
	for _, sb := range []string{"gone", "live"} {
		journaltest.Append(t, j, sbox(sb), lifecycle.SandboxReserved{Owner: j.Owner(), Spec: spec.Sandbox{Lifetime: spec.Kept}})
		journaltest.Append(t, j, proc("p-"+sb), lifecycle.ProcessReserved{Sandbox: sb, Spec: spec.Process{Argv: []string{"true"}}})
		r, err := rec.Create("p-"+sb, spec.Record{})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Write(1, []byte("out")); err != nil {
			t.Fatal(err)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		log, err := recorder.OpenDecisions(rec.Path(), sb)
		if err != nil {
			t.Fatal(err)
		}
		if err := log.Append(egress.Decision{Seq: 1, Time: now, Method: "CONNECT", Host: "example.com", Port: 443}); err != nil {
			t.Fatal(err)
		}
		if err := log.Close(); err != nil {
			t.Fatal(err)
		}
	}
	journaltest.Append(t, j, proc("p-gone"), lifecycle.ProcessExited{Reason: lifecycle.ReasonExited})
	journaltest.Append(t, j, sbox("gone"), lifecycle.SandboxRemoved{})
	now = now.Add(48 * time.Hour)

	n, err := retention.Apply(t.Context(), j, rec, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatalf("Apply deleted no entity; want the removed sandbox and its process")
	}
	ids, err := rec.IDs()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids, []string{"p-live"}) {
		t.Fatalf("recordings after retention: %v, want only the live process's", ids)
	}
	sandboxes, err := recorder.DecisionSandboxes(rec.Path())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sandboxes, []string{"live"}) {
		t.Fatalf("egress decisions after retention: %v, want only the live sandbox's", sandboxes)
	}
}
