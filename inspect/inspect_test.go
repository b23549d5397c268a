package inspect_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"github.com/stockade/stockade/internal/journaltest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/inspect"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// step is one event of a story: which stream, which event.
type step struct {
	k  journal.Key
	ev lifecycle.Event
}

var (
	sbA = journal.Key{Kind: journal.KindSandbox, ID: "sba"}
	sbB = journal.Key{Kind: journal.KindSandbox, ID: "sbb"}
	prA = journal.Key{Kind: journal.KindProcess, ID: "pa"}
	prB = journal.Key{Kind: journal.KindProcess, ID: "pb"}
)

func code(n int) *int { return &n }

// story: sandbox sba runs process pa, which exits 2, and is stopped;
// sandbox sbb runs process pb, still running. Their events interleave.
func story(owner string) []step {
	img := "sha256:" + strings.Repeat("ab", 32)
	return []step{
		{sbA, lifecycle.SandboxReserved{Owner: owner, Spec: spec.Sandbox{Image: img, Policy: spec.DefaultPolicy(), Lifetime: spec.Kept}, Profile: "p", Revision: "r"}},
		{sbA, lifecycle.SandboxCreated{Workload: "w0", Export: "e0", Volume: "v0"}},
		{sbB, lifecycle.SandboxReserved{Owner: owner, Spec: spec.Sandbox{Image: img, Policy: spec.DefaultPolicy(), Lifetime: spec.Kept}, Profile: "p", Revision: "r"}},
		{sbA, lifecycle.SandboxStarted{}},
		{prA, lifecycle.ProcessReserved{Sandbox: "sba", Spec: spec.Process{Argv: []string{"sh", "-c", "make test"}}}},
		{sbB, lifecycle.SandboxCreated{Workload: "w1", Export: "e1", Volume: "v1"}},
		{prA, lifecycle.ExecCreated{ExecID: "x0"}},
		{sbB, lifecycle.SandboxStarted{}},
		{prA, lifecycle.ProcessStarted{Group: 12}},
		{prB, lifecycle.ProcessReserved{Sandbox: "sbb", Spec: spec.Process{Argv: []string{"sleep", "1d"}}}},
		{prA, lifecycle.ProcessExited{Reason: lifecycle.ReasonExited, ExitCode: code(2), StdoutBytes: 120, StderrBytes: 30}},
		{prB, lifecycle.ExecCreated{ExecID: "x1"}},
		{sbA, lifecycle.SandboxStopping{Reason: lifecycle.ReasonStopped}},
		{sbA, lifecycle.SandboxExited{Reason: lifecycle.ReasonStopped, ExitCode: code(143)}},
	}
}

// writeJournal writes steps into a new journal (times from a fixed clock)
// and returns it open.
func writeJournal(t *testing.T, steps func(owner string) []step) *journal.Journal {
	t.Helper()
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	j, err := journal.Open(filepath.Join(t.TempDir(), "j.db"), journal.Options{Now: func() time.Time { now = now.Add(time.Second); return now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Close() }) // a test may have closed it already
	for _, s := range steps(j.Owner()) {
		journaltest.Append(t, j, s.k, s.ev)
	}
	return j
}

// line is a history event reduced to what a test checks.
func line(e host.HistoryEvent) string { return e.Kind + " " + e.ID + " #" + itoa(e.Seq) + " " + e.Type }

func itoa(n uint64) string { b, _ := json.Marshal(n); return string(b) }

func TestHistory(t *testing.T) {
	r := inspect.New(writeJournal(t, story))
	for _, tc := range []struct {
		name string
		id   string
		want []string
		code spec.Code
	}{
		{name: "a sandbox and its exited process, in time order", id: "sba", want: []string{
			"sandbox sba #1 sandbox.reserved", "sandbox sba #2 sandbox.created", "sandbox sba #3 sandbox.started",
			"process pa #1 process.reserved", "process pa #2 process.exec_created", "process pa #3 process.started",
			"process pa #4 process.exited", "sandbox sba #4 sandbox.stopping", "sandbox sba #5 sandbox.exited",
		}},
		{name: "another sandbox's process is not in it", id: "sbb", want: []string{
			"sandbox sbb #1 sandbox.reserved", "sandbox sbb #2 sandbox.created", "sandbox sbb #3 sandbox.started",
			"process pb #1 process.reserved", "process pb #2 process.exec_created",
		}},
		{name: "no such sandbox", id: "nosuch", code: spec.CodeNotFound},
		{name: "a process id is not a sandbox's", id: "pa", code: spec.CodeNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evs, err := r.History(t.Context(), tc.id)
			if tc.code != "" {
				if !spec.IsCode(err, tc.code) {
					t.Fatalf("err %v, want %s", err, tc.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range evs {
				got = append(got, line(e))
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("history:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestReplay(t *testing.T) {
	r := inspect.New(writeJournal(t, story))
	for _, tc := range []struct {
		name    string
		id      string
		process bool
		at      uint64
		phase   string
		seq     uint64
	}{
		{name: "a sandbox at its first event", id: "sba", at: 1, phase: string(lifecycle.PhaseReserved), seq: 1},
		{name: "a sandbox mid-stream", id: "sba", at: 3, phase: string(lifecycle.PhaseStarted), seq: 3},
		{name: "a sandbox at its end (0)", id: "sba", at: 0, phase: string(lifecycle.PhaseExited), seq: 5},
		{name: "past the end is the end", id: "sba", at: 99, phase: string(lifecycle.PhaseExited), seq: 5},
		{name: "a running sandbox", id: "sbb", phase: string(lifecycle.PhaseStarted), seq: 3},
		{name: "a process at its end", id: "pa", process: true, phase: string(lifecycle.PhaseExited), seq: 4},
		{name: "a process before it started", id: "pa", process: true, at: 2, phase: string(lifecycle.PhaseReserved), seq: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var phase string
			var seq uint64
			if tc.process {
				p, err := r.ReplayProcess(t.Context(), tc.id, tc.at)
				if err != nil {
					t.Fatal(err)
				}
				phase, seq = string(p.Phase), p.Seq
			} else {
				s, err := r.ReplaySandbox(t.Context(), tc.id, tc.at)
				if err != nil {
					t.Fatal(err)
				}
				if s.ID != tc.id {
					t.Errorf("id %q, want %q", s.ID, tc.id)
				}
				phase, seq = string(s.Phase), s.Seq
			}
			if phase != tc.phase || seq != tc.seq {
				t.Fatalf("%s at seq %d, want %s at seq %d", phase, seq, tc.phase, tc.seq)
			}
		})
	}
}

// TestReplaySkipsARepeatedFact: a journal written before appends were
// sequenced may hold one transition twice; replay skips the repeat instead
// of failing the stream, and a different illegal event still fails it.
func TestReplaySkipsARepeatedFact(t *testing.T) {
	k := journal.Key{Kind: journal.KindSandbox, ID: "sb1"}
	j := writeJournal(t, func(string) []step {
		var out []step
		for _, ev := range []lifecycle.Event{
			lifecycle.SandboxReserved{Spec: spec.Sandbox{Lifetime: spec.Kept}}, lifecycle.SandboxCreated{Workload: "w"}, lifecycle.SandboxStarted{},
			lifecycle.SandboxStopping{Reason: lifecycle.ReasonStopped}, lifecycle.SandboxStopping{Reason: lifecycle.ReasonStopped},
		} {
			out = append(out, step{k, ev})
		}
		return out
	})
	r := inspect.New(j)
	st, err := r.ReplaySandbox(t.Context(), "sb1", 0)
	if err != nil || st.Phase != lifecycle.PhaseStopping || st.Seq != 5 {
		t.Fatalf("replay: %s seq %d %v, want stopping at seq 5", st.Phase, st.Seq, err)
	}
	if err := r.Verify(t.Context()); err != nil {
		t.Fatalf("verify with a repeated fact: %v", err)
	}
	journaltest.Append(t, j, k, lifecycle.SandboxStopping{Reason: lifecycle.ReasonTimeout})
	if _, err := r.ReplaySandbox(t.Context(), "sb1", 0); err == nil || !strings.Contains(err.Error(), "illegal transition") || !strings.Contains(err.Error(), "#6") {
		t.Fatalf("a different illegal event: %v, want an illegal transition at #6", err)
	}
	if err := r.Verify(t.Context()); err == nil || !strings.Contains(err.Error(), "illegal transition") {
		t.Fatalf("verify: %v, want the illegal transition", err)
	}
}

func TestDiff(t *testing.T) {
	r := inspect.New(writeJournal(t, story))
	for _, tc := range []struct {
		name    string
		id      string
		process bool
		a, b    uint64
		fields  []string
	}{
		{name: "the same point differs in nothing", id: "sba", a: 3, b: 3},
		{name: "reserved to started", id: "sba", a: 1, b: 3, fields: []string{"At", "Created", "Phase", "Seq", "Started"}},
		{name: "a process to its exit", id: "pa", process: true, a: 3, b: 0, fields: []string{"At", "Exit", "Phase", "Seq"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			changes, err := inspect.Diff(t.Context(), r, tc.id, tc.process, tc.a, tc.b)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range changes {
				got = append(got, c.Field)
			}
			if strings.Join(got, " ") != strings.Join(tc.fields, " ") {
				t.Fatalf("fields %v, want %v (changes %+v)", got, tc.fields, changes)
			}
		})
	}
	if _, err := inspect.Diff(t.Context(), r, "sba", false, 0, 0); err != nil {
		t.Fatal(err)
	}
}

func TestLive(t *testing.T) {
	r := inspect.New(writeJournal(t, story))
	list, err := r.Live(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]host.LiveEntity{}
	for _, e := range list {
		got[e.Kind+" "+e.ID] = e
	}
	// The stopped sandbox stays live (kept); the exited process does not.
	for _, tc := range []struct {
		key    string
		live   bool
		parent string
		last   string
		seq    uint64
	}{
		{key: "sandbox sba", live: true, last: "sandbox.exited", seq: 5},
		{key: "sandbox sbb", live: true, last: "sandbox.started", seq: 3},
		{key: "process pa", live: false},
		{key: "process pb", live: true, parent: "sbb", last: "process.exec_created", seq: 2},
	} {
		e, ok := got[tc.key]
		if ok != tc.live {
			t.Errorf("%s: live %v, want %v", tc.key, ok, tc.live)
			continue
		}
		if ok && (e.Parent != tc.parent || e.Last != tc.last || e.Seq != tc.seq) {
			t.Errorf("%s: %+v, want parent %q last %s seq %d", tc.key, e, tc.parent, tc.last, tc.seq)
		}
	}
}

func TestExport(t *testing.T) {
	r := inspect.New(writeJournal(t, story))
	var buf bytes.Buffer
	if err := r.Export(t.Context(), &buf); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) < len(story("")) {
		t.Fatalf("%d export lines, want at least one an event (%d)", len(lines), len(story("")))
	}
	for _, l := range lines {
		if !json.Valid([]byte(l)) {
			t.Fatalf("not a JSON line: %q", l)
		}
	}
}

// TestOpen: Open reads a journal file read-only beside another reader,
// fails with journal_locked while a writer holds it, and Close closes only
// what Open opened.
func TestOpen(t *testing.T) {
	j := writeJournal(t, story)
	path := j.Path()
	if _, err := inspect.Open(path); !spec.IsCode(err, spec.CodeJournalLocked) {
		t.Fatalf("open beside a writer: %v, want journal_locked", err)
	}
	if err := inspect.New(j).Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := inspect.New(j).Live(t.Context()); err != nil {
		t.Fatalf("the journal New was given was closed: %v", err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	r1, err := inspect.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := inspect.Open(path)
	if err != nil {
		t.Fatalf("a second reader: %v", err)
	}
	for _, r := range []*inspect.Reader{r1, r2} {
		if err := r.Verify(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r1.Live(t.Context()); !errors.Is(err, journal.ErrClosed) {
		t.Fatalf("after Close: %v, want the journal closed", err)
	}
}

// TestCancelled: every call refuses a context already ended, with code
// cancelled.
func TestCancelled(t *testing.T) {
	r := inspect.New(writeJournal(t, story))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for name, call := range map[string]func() error{
		"History":       func() error { _, err := r.History(ctx, "sba"); return err },
		"ReplaySandbox": func() error { _, err := r.ReplaySandbox(ctx, "sba", 0); return err },
		"ReplayProcess": func() error { _, err := r.ReplayProcess(ctx, "pa", 0); return err },
		"Live":          func() error { _, err := r.Live(ctx); return err },
		"Verify":        func() error { return r.Verify(ctx) },
		"Export":        func() error { return r.Export(ctx, &bytes.Buffer{}) },
	} {
		if err := call(); !spec.IsCode(err, spec.CodeCancelled) {
			t.Errorf("%s: %v, want cancelled", name, err)
		}
	}
}
