package metrics_test

import (
	"github.com/stockade/stockade/internal/journaltest"
	"github.com/stockade/stockade/internal/metricstest"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/metrics"
	"github.com/stockade/stockade/spec"
)

func code(n int) *int { return &n }

// TestMetricsMoveWithTheJournal: a scrape after events are committed shows
// them: process starts, exits by reason, recovery decisions, output lost,
// live entities by their last event, and the committer's commits and
// latency; and no label carries an id.
func TestMetricsMoveWithTheJournal(t *testing.T) {
	j, err := journal.Open(filepath.Join(t.TempDir(), "j.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := metrics.New(j, metrics.Sources{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	// A fresh journal counts nothing yet.
	metricstest.Await(t, srv.URL+"/metrics", time.Minute, "stockade_process_starts_total 0\n")

	img := "sha256:" + strings.Repeat("ab", 32)
	sb := journal.Key{Kind: journal.KindSandbox, ID: "sbmetrics"}
	pa := journal.Key{Kind: journal.KindProcess, ID: "pmetricsa"}
	pb := journal.Key{Kind: journal.KindProcess, ID: "pmetricsb"}
	for _, s := range []struct {
		k  journal.Key
		ev lifecycle.Event
	}{
		{sb, lifecycle.SandboxReserved{Owner: j.Owner(), Spec: spec.Sandbox{Image: img, Policy: spec.DefaultPolicy(), Lifetime: spec.Kept}, Profile: "p", Revision: "r"}},
		{sb, lifecycle.SandboxCreated{Workload: "w", Export: "e", Volume: "v"}},
		{sb, lifecycle.SandboxStarted{}},
		{sb, lifecycle.Recovered{Decision: "readopt"}},
		{pa, lifecycle.ProcessReserved{Sandbox: sb.ID, Spec: spec.Process{Argv: []string{"true"}}}},
		{pa, lifecycle.ProcessStarted{Group: 7}},
		{pa, lifecycle.OutputGap{From: 100, To: 350, Why: "test"}},
		{pa, lifecycle.ProcessExited{Reason: lifecycle.ReasonExited, ExitCode: code(0)}},
		{pb, lifecycle.ProcessReserved{Sandbox: sb.ID, Spec: spec.Process{Argv: []string{"sleep", "1d"}}}},
		{pb, lifecycle.ProcessStarted{Group: 8}},
	} {
		journaltest.Append(t, j, s.k, s.ev)
	}
	got := metricstest.Await(t, srv.URL+"/metrics", 30*time.Second,
		"stockade_process_starts_total 2",
		`stockade_process_exits_total{reason="exited"} 1`,
		`stockade_recovery_decisions_total{decision="readopt"} 1`,
		"stockade_output_gap_bytes_total 250",
		`stockade_journal_events_total{type="process.started"} 2`,
		`stockade_live_entities{kind="sandbox",last="recovered"} 1`,
		`stockade_live_entities{kind="process",last="process.started"} 1`,
		"stockade_journal_commits_total ",
		"stockade_journal_commit_seconds_count ",
	)
	if strings.Contains(got, "stockade_journal_commits_total 0\n") || strings.Contains(got, "stockade_journal_commit_seconds_count 0\n") {
		t.Fatalf("ten appends, no commit counted:\n%s", got)
	}
	for _, id := range []string{sb.ID, pa.ID, pb.ID} {
		if strings.Contains(got, id) {
			t.Fatalf("a label carries the id %s:\n%s", id, got)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the follower did not end with the journal")
	}
}
