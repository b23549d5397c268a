package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

var update = flag.Bool("update", false, "rewrite the golden files of the journal commands")

// storyJournal writes a small, fixed sandbox story (times from a fixed
// clock) and returns its path and owner.
func storyJournal(t *testing.T) (string, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "j.db")
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	j, err := journal.Open(path, journal.Options{Now: func() time.Time { now = now.Add(250 * time.Millisecond); return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = j.Close() }() // teardown
	sb := journal.Key{Kind: journal.KindSandbox, ID: "sbstory"}
	pr := journal.Key{Kind: journal.KindProcess, ID: "pstory"}
	code := func(n int) *int { return &n }
	for _, step := range []struct {
		k  journal.Key
		ev lifecycle.Event
	}{
		{sb, lifecycle.SandboxReserved{Owner: j.Owner(), Spec: spec.Sandbox{Image: "sha256:" + strings.Repeat("ab", 32), Policy: spec.DefaultPolicy(), Lifetime: spec.Kept, Labels: map[string]string{"batch": "nightly"}}, Profile: "p", Revision: "r"}},
		{sb, lifecycle.SandboxCreated{Workload: "w0", Export: "e0", Volume: "v0"}},
		{sb, lifecycle.SandboxStarted{}},
		{pr, lifecycle.ProcessReserved{Sandbox: "sbstory", Spec: spec.Process{Argv: []string{"sh", "-c", "make test"}}}},
		{pr, lifecycle.ExecCreated{ExecID: "x0"}},
		{pr, lifecycle.ProcessStarted{Group: 12}},
		{pr, lifecycle.ProcessExited{Reason: lifecycle.ReasonExited, ExitCode: code(2), StdoutBytes: 120, StderrBytes: 30,
			Usage: &spec.ProcessUsage{Source: spec.UsageRusage, Wall: 1500 * time.Millisecond, User: 1200 * time.Millisecond, System: 100 * time.Millisecond,
				MaxRSS: 50 << 20, ReadBytes: 4096, WriteBytes: 8192}}},
		{sb, lifecycle.SandboxStopping{Reason: lifecycle.ReasonStopped}},
		{sb, lifecycle.UsageSampled{Usage: spec.WorkloadUsage{At: time.Date(2026, 12, 2, 10, 0, 2, 0, time.UTC), CPU: 1400 * time.Millisecond,
			MemoryPeak: 64 << 20, MemoryGiBSeconds: 0.125, PidsPeak: 3, Samples: 2}, RunEnded: true, Final: true}},
		{sb, lifecycle.SandboxExited{Reason: lifecycle.ReasonStopped, ExitCode: code(143)}},
	} {
		typ, payload, _ := lifecycle.Encode(step.ev)
		parent := ""
		if step.k.Kind == journal.KindProcess {
			parent = "sbstory"
		}
		if _, err := j.Append(context.Background(), journal.Record{Key: step.k, Parent: parent, Type: typ, Payload: payload, Terminal: lifecycle.Terminal(step.ev)}); err != nil {
			t.Fatal(err)
		}
	}
	return path, j.Owner()
}

// TestGoldenJournalOutput: the human output of journal show, replay --at
// and diff on a fixed story, against testdata/*.golden (go test -update
// rewrites them).
func TestGoldenJournalOutput(t *testing.T) {
	path, owner := storyJournal(t)
	for _, tc := range []struct {
		golden string
		args   []string
	}{
		{"show.golden", []string{"journal", "show", "sbstory"}},
		{"show-type-process.golden", []string{"journal", "show", "sbstory", "--type", "process"}},
		{"replay-at-2.golden", []string{"journal", "replay", "sbstory", "--at", "2"}},
		{"replay-process.golden", []string{"journal", "replay", "pstory", "--process"}},
		{"diff-2-5.golden", []string{"journal", "diff", "sbstory", "--at", "2", "--at", "5"}},
		{"diff-process.golden", []string{"journal", "diff", "pstory", "--process", "--at", "1", "--at", "4"}},
		{"usage.golden", []string{"usage", "sbstory"}},
		{"usage-label.golden", []string{"usage", "--label", "batch=nightly", "--json"}},
		{"usage-none.golden", []string{"usage", "--label", "batch=other"}},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := dispatch(context.Background(), append(tc.args, "--journal", path), nil, &out, &errb); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			got := strings.ReplaceAll(out.String(), owner, "OWNER")
			file := filepath.Join("testdata", tc.golden)
			if *update {
				if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (go test -run Golden -update writes it)", err)
			}
			if got != string(want) {
				t.Fatalf("output differs from %s:\n--- got\n%s\n--- want\n%s", file, got, want)
			}
		})
	}
}
