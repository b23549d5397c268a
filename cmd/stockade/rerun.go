package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/stockade/stockade/rerun"
	"github.com/stockade/stockade/spec"
)

const replayUsage = "stockade replay SANDBOX --rerun [--until POS] [--keep] [--timeout D] [--secret NAME]... [--json]"

// replayCmd is stockade replay SB --rerun: the recorded session of SB run
// again in a new sandbox, compared process by process (package rerun).
// Folding a stream to a sequence stays `journal replay`.
type replayCmd struct {
	g       global
	id      string
	rerun   bool
	until   uint64
	keep    bool
	timeout time.Duration
	secrets []spec.SecretVar
}

func parseReplay(g global, args []string) (command, error) {
	c := &replayCmd{g: g}
	fs := newFlags("replay", &c.g)
	fs.BoolVar(&c.rerun, "rerun", false, "run the recorded processes again in a new sandbox and compare")
	fs.Uint64Var(&c.until, "until", 0, "only the processes reserved at or before this position of journal show's listing (0: all)")
	fs.BoolVar(&c.keep, "keep", false, "keep the new sandbox")
	fs.DurationVar(&c.timeout, "timeout", 0, "stop each re-run process after this (0: its recorded timeout)")
	fs.Func("secret", "a secret variable of the original sandbox, its value read from this command's environment variable of the same name (repeatable)", func(name string) error {
		v, ok := os.LookupEnv(name)
		if !ok || !spec.ValidEnvName(name) {
			return spec.Errorf(spec.CodeInvalidArgument, "replay", "--secret %s: set the variable %s in this command's environment (the value is read from there, never from the command line)", name, name)
		}
		c.secrets = append(c.secrets, spec.SecretVar{Name: name, Value: v})
		return nil
	})
	pos, err := parseArgs(fs, args)
	if err != nil {
		return nil, err
	}
	if err := wantArgs("replay", pos, 1, replayUsage); err != nil {
		return nil, err
	}
	if c.id = pos[0]; c.id == "" {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "replay", "SANDBOX is empty (usage: %s)", replayUsage)
	}
	if !c.rerun {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "replay", "replay re-runs a session and needs --rerun; a stream's state at a sequence is stockade journal replay ID --at SEQ (usage: %s)", replayUsage)
	}
	if c.timeout < 0 {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "replay", "--timeout %s is negative", c.timeout)
	}
	return c, nil
}

func (c *replayCmd) execute(ctx context.Context, _ io.Reader, stdout, stderr io.Writer) (code int) {
	path, err := journalPath(c.g)
	if err != nil {
		return fail(stderr, err, 1)
	}
	rt, _, err := connect(ctx, c.g)
	if err != nil {
		return fail(stderr, err, 1)
	}
	defer closeRuntime(rt, stderr, &code, 1)
	rep, err := rerun.Run(ctx, rt, c.id, rerun.Files(path), rerun.Options{Until: c.until, KeepSandbox: c.keep, Timeout: c.timeout, Secrets: c.secrets})
	if err != nil {
		return fail(stderr, err, 1)
	}
	out := &printer{w: stdout}
	if c.g.json {
		out.keep(newEncoder(out).Encode(rep))
	} else {
		renderReport(out, rep, reportWidth(stdout))
	}
	if err := out.Err(); err != nil {
		return fail(stderr, err, 1)
	}
	return 0
}

// reportWidth is the terminal's width on stdout, else 100.
func reportWidth(w io.Writer) int {
	if f, ok := w.(*os.File); ok {
		if _, cols, ok := termSize(f); ok {
			return int(cols)
		}
	}
	return 100
}

// renderReport prints a re-run's report: a table of one row per process,
// its argv cut to fit width, then the first divergence in detail.
func renderReport(p *printer, rep rerun.Report, width int) {
	p.printf("re-run of %s in %s", rep.Original, rep.Rerun)
	if rep.Kept {
		p.printf(" (kept)")
	}
	p.printf(": %d processes, ", len(rep.Processes))
	if rep.Diverged {
		n := 0
		for _, pr := range rep.Processes {
			if !pr.Same {
				n++
			}
		}
		p.printf("%d diverged\n", n)
	} else {
		p.printf("none diverged\n")
	}
	for _, n := range rep.Notes {
		p.printf("note: %s\n", termSafe(n))
	}
	head := []string{"#", "PROCESS", "ARGV", "EXIT REC→NEW", "STDOUT", "STDERR", "CHANGES", "VERDICT"}
	rows := [][]string{head}
	for i, pr := range rep.Processes {
		exit := pr.Exit.Recorded.String()
		if !pr.Exit.Same {
			exit += "→" + pr.Exit.Rerun.String()
		} else {
			exit += " (same)"
		}
		verdict := "same"
		if !pr.Same {
			verdict = "DIVERGED"
		} else if len(pr.Notes) > 0 {
			verdict = "same*"
		}
		rows = append(rows, []string{fmt.Sprint(i + 1), pr.Original, termSafe(strings.Join(pr.Argv, " ")), exit,
			streamCell(pr.Stdout), streamCell(pr.Stderr), changesCell(pr.Changes), verdict})
	}
	const argv, gap = 2, 2
	widths := make([]int, len(head))
	for _, r := range rows {
		for i, cell := range r {
			widths[i] = max(widths[i], len([]rune(cell)))
		}
	}
	// The argv column takes what the others leave of the width.
	rest := 0
	for i, w := range widths {
		if i != argv {
			rest += w + gap
		}
	}
	widths[argv] = max(8, min(widths[argv], width-rest))
	for _, r := range rows {
		var line strings.Builder
		for i, cell := range r {
			if i == argv {
				cell = short(cell, widths[argv])
			}
			line.WriteString(cell)
			if i < len(r)-1 {
				line.WriteString(strings.Repeat(" ", widths[i]-len([]rune(cell))+gap))
			}
		}
		p.printf("%s\n", strings.TrimRight(line.String(), " "))
	}
	if len(rep.Processes) > 0 {
		p.printf("(* compared with a note; see --json)\n")
	}
	if !rep.Diverged {
		return
	}
	for i, pr := range rep.Processes {
		if pr.Original == rep.FirstDivergence {
			p.println()
			renderDivergence(p, i+1, pr)
			break
		}
	}
}

func streamCell(s rerun.StreamComparison) string {
	switch {
	case !s.Compared:
		return "n/c"
	case s.Same:
		return "same"
	}
	return fmt.Sprintf("line %d", s.Line)
}

func changesCell(c rerun.ChangesComparison) string {
	switch {
	case !c.Compared:
		return "n/c"
	case c.Same:
		return "same"
	}
	return fmt.Sprintf("-%d +%d ~%d", len(c.Missing), len(c.Extra), len(c.Different))
}

// renderDivergence details a process that diverged.
func renderDivergence(p *printer, n int, pr rerun.ProcessReport) {
	p.printf("first divergence: #%d %s (%s), re-run as %s\n", n, pr.Original, termSafe(short(strings.Join(pr.Argv, " "), 80)), dash(pr.Rerun))
	if pr.Exit.Same {
		p.printf("  exit:     same (%s)\n", pr.Exit.Recorded)
	} else {
		p.printf("  exit:     recorded %s, re-run %s\n", pr.Exit.Recorded, pr.Exit.Rerun)
		if m := pr.Exit.Rerun.Message; m != "" {
			p.printf("            %s\n", termSafe(short(m, 120)))
		}
	}
	for _, s := range []struct {
		name string
		c    rerun.StreamComparison
	}{{"stdout", pr.Stdout}, {"stderr", pr.Stderr}} {
		switch {
		case !s.c.Compared:
			p.printf("  %-9s not compared: %s\n", s.name+":", termSafe(s.c.Note))
			continue
		case s.c.Same:
			p.printf("  %-9s same (%s, sha256:%s)\n", s.name+":", humanBytes(s.c.Recorded.Bytes), short8(s.c.Recorded.SHA256))
		default:
			p.printf("  %-9s differs at line %d (recorded %s, sha256:%s; re-run %s, sha256:%s)\n", s.name+":", s.c.Line,
				humanBytes(s.c.Recorded.Bytes), short8(s.c.Recorded.SHA256), humanBytes(s.c.Rerun.Bytes), short8(s.c.Rerun.SHA256))
			p.printf("    recorded: %s\n", quotedLine(s.c.RecordedLine))
			p.printf("    re-run:   %s\n", quotedLine(s.c.RerunLine))
			printStreamDiff(p, s.c.Diff)
		}
		if s.c.Note != "" && s.c.Compared {
			p.printf("            note: %s\n", termSafe(s.c.Note))
		}
	}
	c := pr.Changes
	switch {
	case !c.Compared:
		p.printf("  changes:  not compared: %s\n", termSafe(c.Note))
	case c.Same:
		p.printf("  changes:  same\n")
	default:
		p.printf("  changes:  %d missing, %d extra, %d different\n", len(c.Missing), len(c.Extra), len(c.Different))
		for _, e := range c.Missing {
			p.printf("    missing    %s %s %s\n", termSafe(e.Op), termSafe(e.Kind), termSafe(e.Path))
		}
		for _, e := range c.Extra {
			p.printf("    extra      %s %s %s\n", termSafe(e.Op), termSafe(e.Kind), termSafe(e.Path))
		}
		for _, d := range c.Different {
			p.printf("    different  %s: recorded %s %s %s sha256:%s, re-run %s %s %s sha256:%s\n", termSafe(d.Path),
				termSafe(d.Recorded.Op), termSafe(d.Recorded.Kind), humanBytes(d.Recorded.Size), short8(d.Recorded.SHA256),
				termSafe(d.Rerun.Op), termSafe(d.Rerun.Kind), humanBytes(d.Rerun.Size), short8(d.Rerun.SHA256))
		}
		if c.Note != "" {
			p.printf("            note: %s\n", termSafe(c.Note))
		}
	}
	for _, n := range pr.Notes {
		p.printf("  note: %s\n", termSafe(n))
	}
}

// maxDiffLines bounds the lines of a stream's diff the detail shows (the
// whole diff is in --json).
const maxDiffLines = 20

// printStreamDiff prints a stream's unified diff under its comparison,
// indented, without its file headers, cut at maxDiffLines.
func printStreamDiff(p *printer, diff string) {
	lines := strings.Split(strings.TrimSuffix(diff, "\n"), "\n")
	if len(lines) < 3 {
		return
	}
	lines = lines[2:] // "--- a/output", "+++ b/output"
	for i, l := range lines {
		if i == maxDiffLines {
			p.printf("      … %d more lines (--json has the whole diff)\n", len(lines)-i)
			return
		}
		p.printf("      ")
		printDiffLine(p, l, false)
	}
}

// quotedLine shows a compared line: always quoted (a trailing newline or
// space is part of what differs), or "(output ended)".
func quotedLine(s *string) string {
	if s == nil {
		return "(output ended before this line)"
	}
	return fmt.Sprintf("%q", *s)
}

const replayHelp = `usage: ` + replayUsage + `

Runs a sandbox's recorded session again: a new sandbox with the original's
pinned image, policy, datasets, env and dir, then each recorded process in
the order it was journaled, one after the other (same argv, env, dir and
terminal; the recorded stdin written, then closed). Each is compared with
its record: exit (reason and code), stdout and stderr (sha256, and the
first differing line), and its changes under /workspace. A table shows one
row per process, then the first divergence in detail. A process that
diverges (date, a random number) is flagged and the re-run goes on.

Exits 0 when the re-run completed, whether or not anything diverged (the
report and --json say); 1 when the re-run itself failed. The new sandbox is
removed at the end unless --keep, also on failure.

  --rerun        required: the re-run (a stream's state at a sequence is
                 stockade journal replay)
  --until POS    only the processes whose process.reserved stands at or
                 before position POS of the sandbox's history (1-based: the
                 POS-th line of stockade journal show SANDBOX, unfiltered)
  --keep         keep the new sandbox (its id is in the report)
  --timeout D    stop each re-run process after D (default: its recorded
                 timeout)
  --secret NAME  a secret variable the original sandbox had (the journal
                 keeps its name and ref, never its value): its value is read
                 from this command's environment variable NAME (repeatable;
                 a sandbox with secrets needs every one)
  --json         the report as one JSON object

  stockade replay "$id" --rerun
  stockade replay "$id" --rerun --until 12 --json
`
