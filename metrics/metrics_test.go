package metrics_test

import (
	"context"
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
	m, err := metrics.New(j)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	before := scrape(t, srv.URL)
	if strings.Contains(before, "stockade_process_starts_total 1") {
		t.Fatalf("a fresh journal's metrics already count a start:\n%s", before)
	}

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
		typ, payload, err := lifecycle.Encode(s.ev)
		if err != nil {
			t.Fatal(err)
		}
		parent := ""
		if r, ok := s.ev.(lifecycle.ProcessReserved); ok {
			parent = r.Sandbox
		}
		if _, err := j.Append(context.Background(), journal.Record{Key: s.k, Parent: parent, Type: typ, Payload: payload, Terminal: lifecycle.Terminal(s.ev)}); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{
		"stockade_process_starts_total 2",
		`stockade_process_exits_total{reason="exited"} 1`,
		`stockade_recovery_decisions_total{decision="readopt"} 1`,
		"stockade_output_gap_bytes_total 250",
		`stockade_journal_events_total{type="process.started"} 2`,
		`stockade_live_entities{kind="sandbox",last="recovered"} 1`,
		`stockade_live_entities{kind="process",last="process.started"} 1`,
		"stockade_journal_commits_total 1", // at least: checked below
		"stockade_journal_commit_seconds_count",
	}
	var got string
	deadline := time.Now().Add(30 * time.Second)
	for {
		got = scrape(t, srv.URL)
		missing := ""
		for _, w := range want {
			if w == "stockade_journal_commits_total 1" {
				w = "stockade_journal_commits_total "
			}
			if !strings.Contains(got, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the scrape lacks %q after the events were committed:\n%s", missing, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
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

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := srvGet(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	return resp
}
