package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stockade/stockade/journal"
)

// TestJournalReadCommandsOffline: with no server, the journal read
// commands open the journal file read-only and answer from it; a journal a
// writer holds is refused with journal_locked.
func TestJournalReadCommandsOffline(t *testing.T) {
	path, _ := storyJournal(t)
	for _, tc := range []struct {
		name  string
		args  []string
		code  int
		check func(t *testing.T, out string)
	}{
		{name: "verify", args: []string{"journal", "verify"}, check: func(t *testing.T, out string) {
			if want := path + ": every record decodes, every stream folds, the indexes agree\n"; out != want {
				t.Fatalf("got %q, want %q", out, want)
			}
		}},
		{name: "ls", args: []string{"journal", "ls"}, check: func(t *testing.T, out string) {
			// The stopped kept sandbox is live; its exited process is not.
			if !strings.HasPrefix(out, "sandbox  sbstory ") || strings.Count(out, "\n") != 1 || !strings.Contains(out, "last=sandbox.exited") {
				t.Fatalf("got %q", out)
			}
		}},
		{name: "ls --json", args: []string{"--json", "journal", "ls"}, check: func(t *testing.T, out string) {
			var e struct{ Kind, ID string }
			if err := json.Unmarshal([]byte(out), &e); err != nil || e.Kind != "sandbox" || e.ID != "sbstory" {
				t.Fatalf("got %q (%v)", out, err)
			}
		}},
		{name: "export", args: []string{"journal", "export"}, check: func(t *testing.T, out string) {
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			for _, l := range lines {
				if !json.Valid([]byte(l)) {
					t.Fatalf("not a JSON line: %q", l)
				}
			}
			if !strings.Contains(out, `"type":"process.exited"`) || len(lines) < 9 {
				t.Fatalf("%d lines: %q", len(lines), out)
			}
		}},
		{name: "show of an unknown sandbox", args: []string{"journal", "show", "nosuch"}, code: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := dispatch(context.Background(), append(tc.args, "--journal", path), nil, &out, &errb)
			if code != tc.code {
				t.Fatalf("exit %d, want %d: %s", code, tc.code, errb.String())
			}
			if tc.check != nil {
				tc.check(t, out.String())
			}
		})
	}
	t.Run("a journal a writer holds", func(t *testing.T) {
		j, err := journal.Open(path, journal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = j.Close() }()
		var out, errb bytes.Buffer
		if code := dispatch(context.Background(), []string{"journal", "ls", "--journal", path}, nil, &out, &errb); code != 1 || !strings.Contains(errb.String(), "journal_locked") {
			t.Fatalf("exit %d, stderr %q: want 1 and journal_locked", code, errb.String())
		}
	})
}

// TestJournalOutputWriteFailureFails: a journal read command whose output
// cannot be written fails (exit 1, the write error on stderr), as the
// other commands do, instead of exiting 0.
func TestJournalOutputWriteFailureFails(t *testing.T) {
	path, _ := storyJournal(t)
	for _, args := range [][]string{
		{"journal", "verify"},
		{"journal", "ls"},
		{"--json", "journal", "ls"},
		{"journal", "show", "sbstory"},
		{"--json", "journal", "show", "sbstory"},
		{"journal", "show", "sbstory", "--output"},
		{"journal", "replay", "sbstory"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var errb bytes.Buffer
			code := dispatch(context.Background(), append(args, "--journal", path), nil, failingWriter{}, &errb)
			if code != 1 || !strings.Contains(errb.String(), "stream_failure: writing the output: no space left on device") {
				t.Fatalf("exit %d, stderr %q; want 1 and the write error", code, errb.String())
			}
			var out bytes.Buffer
			errb.Reset()
			if code := dispatch(context.Background(), append(args, "--journal", path), nil, &out, &errb); code != 0 || out.Len() == 0 {
				t.Fatalf("to a working stdout: exit %d, %d bytes out, stderr %q", code, out.Len(), errb.String())
			}
		})
	}
}
