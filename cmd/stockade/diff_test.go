package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/recorder"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/statedir"
)

// changesJournal writes a sandbox whose one process changed files (its
// exit carries the changes) and keeps their text beside the journal, as
// the recorder does.
func changesJournal(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "j.db")
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	j, err := journal.Open(path, journal.Options{Now: func() time.Time { now = now.Add(250 * time.Millisecond); return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = j.Close() }() // teardown
	sb := journal.Key{Kind: journal.KindSandbox, ID: "sbchg"}
	pr := journal.Key{Kind: journal.KindProcess, ID: "pchg"}
	code := 0
	sha := func(c string) string { return strings.Repeat(c, 64) }
	changes := &lifecycle.Changes{Created: 2, Modified: 2, Deleted: 1, Renamed: 1, Entries: []lifecycle.Change{
		{Op: "created", Path: "work/a.txt", Kind: "file", Size: 12, Mode: 0o644, SHA256: sha("a"), Text: true},
		{Op: "modified", Path: "work/app.bin", Kind: "file", Size: 3482, Mode: 0o755, SHA256: sha("b")},
		{Op: "created", Path: "work/dir", Kind: "dir", Mode: 0o755},
		{Op: "modified", Path: "work/main.go", Kind: "file", Size: 61, Mode: 0o644, SHA256: sha("c"), Text: true},
		{Op: "deleted", Path: "work/old.txt", Kind: "file", Size: 4, Text: true},
		{Op: "renamed", Path: "work/w\x1b[2Jeird.txt", From: "work/plain.txt", Kind: "file", Size: 5, SHA256: sha("d"), Text: true},
	}}
	for _, step := range []struct {
		k  journal.Key
		ev lifecycle.Event
	}{
		{sb, lifecycle.SandboxReserved{Owner: j.Owner(), Spec: spec.Sandbox{Image: "sha256:" + strings.Repeat("ab", 32), Policy: spec.DefaultPolicy(), Lifetime: spec.Kept}, Profile: "p", Revision: "r"}},
		{sb, lifecycle.SandboxStarted{}},
		{pr, lifecycle.ProcessReserved{Sandbox: "sbchg", Spec: spec.Process{Argv: []string{"sh", "-c", "make"}}}},
		{pr, lifecycle.ProcessStarted{Group: 12, ByWarden: true, PID: 12}},
		{pr, lifecycle.ProcessExited{Reason: lifecycle.ReasonExited, ExitCode: &code, StdoutBytes: 3, Changes: changes}},
	} {
		typ, payload, _ := lifecycle.Encode(step.ev)
		parent := ""
		if step.k.Kind == journal.KindProcess {
			parent = "sbchg"
		}
		if _, err := j.Append(context.Background(), journal.Record{Key: step.k, Parent: parent, Type: typ, Payload: payload, Terminal: lifecycle.Terminal(step.ev)}); err != nil {
			t.Fatal(err)
		}
	}
	store, err := recorder.Open(statedir.Recordings(path), spec.Record{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := func(v string) *string { return &v }
	if err := store.WriteChanges("pchg", []recorder.ChangeText{
		{Path: "work/a.txt", After: s("hello\nworld\n")},
		{Path: "work/main.go", Before: s("package main\n\nfunc main() {\n\tprintln(\"hi\")\n}\n"), After: s("package main\n\nfunc main() {\n\tprintln(\"bye\x1b]0;pwned\x07\")\n}")},
		{Path: "work/old.txt", Before: s("old\n")},
		{Path: "work/w\x1b[2Jeird.txt", Before: s("same\n"), After: s("same\n")},
	}); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestGoldenDiffAndChanges: stockade diff, its --json and journal show
// --changes on a fixed story, against testdata/*.golden.
func TestGoldenDiffAndChanges(t *testing.T) {
	path := changesJournal(t)
	for _, tc := range []struct {
		golden string
		args   []string
	}{
		{"stockade-diff.golden", []string{"diff", "pchg"}},
		{"stockade-diff-json.golden", []string{"diff", "pchg", "--json"}},
		{"show-changes.golden", []string{"journal", "show", "sbchg", "--changes"}},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := dispatch(context.Background(), append(tc.args, "--journal", path), nil, &out, &errb); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			checkGolden(t, tc.golden, out.String())
			if strings.ContainsAny(out.String(), "\x1b\x07") {
				t.Errorf("a terminal control byte from the sandbox reached the output:\n%q", out.String())
			}
		})
	}
}

// checkGolden compares got with testdata/name (-update rewrites it).
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	file := filepath.Join("testdata", name)
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
}

// TestDiffJSONCarriesChanges: --json holds the journaled changes whole and
// the diffs.
func TestDiffJSONCarriesChanges(t *testing.T) {
	path := changesJournal(t)
	var out, errb bytes.Buffer
	if code := dispatch(context.Background(), []string{"--json", "diff", "pchg", "--journal", path}, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var d host.ProcessChanges
	if err := json.Unmarshal(out.Bytes(), &d); err != nil {
		t.Fatal(err)
	}
	if d.Sandbox != "sbchg" || d.Changes == nil || len(d.Changes.Entries) != 6 || d.Changes.Entries[5].Path != "work/w\x1b[2Jeird.txt" {
		t.Fatalf("changes: %+v", d)
	}
	var paths []string
	for _, f := range d.Diffs {
		paths = append(paths, f.Path)
	}
	// The renamed file's text did not change: no diff of it.
	if got := strings.Join(paths, ","); got != "work/a.txt,work/app.bin,work/main.go,work/old.txt" {
		t.Errorf("diffs of %s", got)
	}
}

func TestDiffColour(t *testing.T) {
	var p bytes.Buffer
	out := &printer{w: &p}
	for _, l := range []string{"--- a/f", "+++ b/f", "@@ -1,1 +1,1 @@", "-old", "+new", " same\tx", "+\x1b[31m"} {
		printDiffLine(out, l, true)
	}
	want := "--- a/f\n+++ b/f\n" + ansiCyan + "@@ -1,1 +1,1 @@" + ansiReset + "\n" + ansiRed + "-old" + ansiReset + "\n" +
		ansiGreen + "+new" + ansiReset + "\n same\tx\n" + ansiGreen + `+"\x1b[31m"` + ansiReset + "\n"
	if p.String() != want {
		t.Errorf("got %q\nwant %q", p.String(), want)
	}
	t.Setenv("NO_COLOR", "")
	if colourOn(os.Stdout) {
		t.Error("colour with NO_COLOR set")
	}
}

// TestDiffUsage: bad command lines of diff and replay exit 2, touching nothing.
func TestDiffUsage(t *testing.T) {
	for _, args := range [][]string{{"diff"}, {"diff", "a", "b"}, {"diff", ""}, {"replay", "sb"}, {"replay", "--rerun"}, {"replay", "sb", "--rerun", "--timeout", "-1s"}, {"replay", "sb", "--rerun", "--until", "x"}} {
		if code := dispatch(context.Background(), args, nil, &bytes.Buffer{}, &bytes.Buffer{}); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}
