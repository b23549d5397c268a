package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/recorder"
	"github.com/stockade/stockade/rerun"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/statedir"
)

// fixedReport is a re-run of three processes, the second diverging in
// stdout and changes, the third with an escape in its argv and output.
func fixedReport() rerun.Report {
	code := func(n int) *int { return &n }
	sha := func(c string) string { return strings.Repeat(c, 64) }
	line := func(s string) *string { return &s }
	exited0 := lifecycle.Reason("exited")
	same := rerun.StreamComparison{Same: true, Compared: true, Recorded: rerun.Digest{Bytes: 6, SHA256: sha("1")}, Rerun: rerun.Digest{Bytes: 6, SHA256: sha("1")}}
	return rerun.Report{
		Original: "sborig", Rerun: "sbnew", Diverged: true, FirstDivergence: "p2",
		Processes: []rerun.ProcessReport{
			{Original: "p1", Rerun: "q1", Argv: []string{"echo", "hello"}, Position: 3, Same: true,
				Exit:   rerun.ExitComparison{Same: true, Recorded: rerun.Outcome{Reason: exited0, ExitCode: code(0)}, Rerun: rerun.Outcome{Reason: exited0, ExitCode: code(0)}},
				Stdout: same, Stderr: same, Changes: rerun.ChangesComparison{Same: true, Compared: true}},
			{Original: "p2", Rerun: "q2", Argv: []string{"sh", "-c", "date > stamp.txt; date; echo a very long command line that the table has to cut to fit its width"}, Position: 6,
				Exit: rerun.ExitComparison{Same: false, Recorded: rerun.Outcome{Reason: exited0, ExitCode: code(0)}, Rerun: rerun.Outcome{Reason: exited0, ExitCode: code(1)}},
				Stdout: rerun.StreamComparison{Compared: true, Recorded: rerun.Digest{Bytes: 29, SHA256: sha("2")}, Rerun: rerun.Digest{Bytes: 29, SHA256: sha("3")},
					Line: 1, RecordedLine: line("Wed Dec  2 10:00:00 UTC 2026\n"), RerunLine: line("Fri Dec  4 12:40:00 UTC 2026\n"),
					Diff: "--- a/output\n+++ b/output\n@@ -1,2 +1,3 @@\n-Wed Dec  2 10:00:00 UTC 2026\n+Fri Dec  4 12:40:00 UTC 2026\n+\x1b[31mred\n ok\n"},
				Stderr: same,
				Changes: rerun.ChangesComparison{Compared: true,
					Missing:   []lifecycle.Change{{Op: "created", Path: "work/old.txt", Kind: "file"}},
					Extra:     []lifecycle.Change{{Op: "created", Path: "work/new\x1b[2J.txt", Kind: "file"}},
					Different: []rerun.ChangePair{{Path: "work/stamp.txt", Recorded: lifecycle.Change{Op: "created", Kind: "file", Size: 29, SHA256: sha("4")}, Rerun: lifecycle.Change{Op: "created", Kind: "file", Size: 29, SHA256: sha("5")}}}},
				Notes: []string{"the original's output recording is not whole"}},
			{Original: "p3", Rerun: "q3", Argv: []string{"printf", "\x1b]0;x\x07"}, Position: 9, Same: true,
				Exit:   rerun.ExitComparison{Same: true, Recorded: rerun.Outcome{Reason: exited0, ExitCode: code(0)}, Rerun: rerun.Outcome{Reason: exited0, ExitCode: code(0)}},
				Stdout: rerun.StreamComparison{Same: true, Note: "no recorded output (recording off, or removed by retention): not compared"}, Stderr: same,
				Changes: rerun.ChangesComparison{Same: true, Note: "changes not tracked on the original: not compared"},
				Notes:   []string{"the original's stdin was not recorded: the re-run got an empty stdin"}},
		},
	}
}

// TestGoldenRerunReport: the re-run report at the default width and a
// narrow one, against testdata/*.golden.
func TestGoldenRerunReport(t *testing.T) {
	for _, tc := range []struct {
		golden string
		width  int
	}{
		{"rerun-report.golden", 100},
		{"rerun-report-narrow.golden", 80},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			var out bytes.Buffer
			p := &printer{w: &out}
			renderReport(p, fixedReport(), tc.width)
			if err := p.Err(); err != nil {
				t.Fatal(err)
			}
			checkGolden(t, tc.golden, out.String())
			if strings.ContainsAny(out.String(), "\x1b\x07") {
				t.Errorf("a terminal control byte reached the output:\n%q", out.String())
			}
			for _, l := range strings.Split(out.String(), "\n") {
				if strings.HasPrefix(l, "#  ") && len([]rune(l)) > tc.width {
					t.Errorf("table header wider than %d: %q", tc.width, l)
				}
			}
		})
	}
	// None diverged: the table and no detail.
	rep := fixedReport()
	rep.Processes, rep.Diverged, rep.FirstDivergence = rep.Processes[:1], false, ""
	var out bytes.Buffer
	renderReport(&printer{w: &out}, rep, 100)
	if !strings.Contains(out.String(), "none diverged") || strings.Contains(out.String(), "first divergence") {
		t.Errorf("report:\n%s", out.String())
	}
}

// TestRerunRecordings: the CLI's Recordings read the recorder's files:
// output split by stream, whole when complete, stdin with its cut mark.
func TestRerunRecordings(t *testing.T) {
	path := changesJournal(t)
	store, err := recorder.Open(statedir.Recordings(path), spec.Record{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	in, err := store.RecordStdin("pchg")
	if err != nil {
		t.Fatal(err)
	}
	in.Write([]byte("fed\n"))
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	r := rerun.Files(path)
	data, whole, err := r.Stdin("pchg")
	if err != nil || string(data) != "fed\n" || !whole {
		t.Errorf("stdin %q %v %v", data, whole, err)
	}
	if _, _, err := r.Stdin("pnone"); !spec.IsCode(err, spec.CodeNotFound) {
		t.Errorf("stdin of an unknown process: %v", err)
	}
	if _, _, _, err := r.Output("pnone"); !spec.IsCode(err, spec.CodeNotFound) {
		t.Errorf("output of an unknown process: %v", err)
	}
}
