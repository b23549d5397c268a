package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/stockade/stockade/inspect"
	"github.com/stockade/stockade/statedir"

	"golang.org/x/term"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

const diffUsage = "stockade diff PROCESS_ID [--json]"

// diffCmd prints what a process did under /workspace: its journaled
// changes (the process.exited event) and, for the small text files the
// recorder kept, a unified diff of each.
type diffCmd struct {
	g  global
	id string
}

func parseDiffCmd(g global, args []string) (command, error) {
	c := &diffCmd{g: g}
	fs := newFlags("diff", &c.g)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return nil, err
	}
	if err := wantArgs("diff", pos, 1, diffUsage); err != nil {
		return nil, err
	}
	if c.id = pos[0]; c.id == "" {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "diff", "PROCESS_ID is empty (usage: %s)", diffUsage)
	}
	return c, nil
}

func (c *diffCmd) execute(ctx context.Context, _ io.Reader, stdout, stderr io.Writer) int {
	src, err := openInspector(c.g)
	if err != nil {
		return fail(stderr, err, 1)
	}
	defer func() { _ = src.close() }() // a client's connection or a journal opened read-only: nothing to lose
	if src.pathErr != nil {
		return fail(stderr, src.pathErr, 1)
	}
	d, err := changesOf(ctx, src, c.id)
	if err != nil {
		return fail(stderr, err, 1)
	}
	out := &printer{w: stdout}
	if c.g.json {
		out.keep(newEncoder(out).Encode(d))
	} else {
		renderProcessDiff(out, d, colourOn(stdout))
	}
	if err := out.Err(); err != nil {
		return fail(stderr, err, 1)
	}
	return 0
}

// changesOf asks the server for a process's changes, or reads them from
// the journal and its recordings (inspect.Changes).
func changesOf(ctx context.Context, src journalSource, id string) (host.ProcessChanges, error) {
	if rt, ok := src.in.(host.Runtime); ok {
		return rt.Changes(ctx, id)
	}
	return inspect.Changes(ctx, src.in, statedir.Recordings(src.path), id)
}

// short8 is a sha256's first 8 hex digits.
func short8(sha string) string {
	if len(sha) > 8 {
		return sha[:8]
	}
	return sha
}

// humanBytes: 12 B, 1.2 KiB, 3.4 MiB.
func humanBytes(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}

// changesHeadline is "3 changes: 1 created, 1 modified, 1 deleted" with
// what the journal says of the list's completeness.
func changesHeadline(ch *lifecycle.Changes) string {
	if ch == nil {
		return "changes not tracked (a journal from before changes were)"
	}
	if ch.Untracked != "" {
		return "changes not tracked: " + ch.Untracked
	}
	s := fmt.Sprintf("%d changes: %d created, %d modified, %d deleted, %d renamed", ch.Total(), ch.Created, ch.Modified, ch.Deleted, ch.Renamed)
	if ch.Total() == 1 {
		s = strings.Replace(s, "1 changes", "1 change", 1)
	}
	if ch.Omitted > 0 {
		s += fmt.Sprintf(" (%d not listed)", ch.Omitted)
	}
	if ch.Incomplete != "" {
		s += "; incomplete: " + ch.Incomplete
	}
	return s
}

// printChangeEntries prints one aligned line per change, each prefixed by
// indent: op, kind, path (from ← for a rename), size, sha256.
func printChangeEntries(w io.Writer, ch *lifecycle.Changes, indent string) {
	if ch == nil {
		return
	}
	// Built whole, then written with each line's padding trimmed (an
	// empty last cell would leave it).
	var buf strings.Builder
	tw := tabwriter.NewWriter(&buf, 0, 4, 2, ' ', 0)
	for _, e := range ch.Entries {
		path := termSafe(e.Path)
		if e.From != "" {
			path += " ← " + termSafe(e.From)
		}
		size := ""
		if e.Kind == "file" {
			size = humanBytes(e.Size)
		}
		sum := ""
		switch {
		case e.SHA256 != "":
			sum = "sha256:" + short8(e.SHA256)
		case e.Unhashed != "":
			sum = "(" + termSafe(e.Unhashed) + ")"
		}
		_, _ = fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\n", indent, termSafe(e.Op), termSafe(e.Kind), path, size, sum)
	}
	_ = tw.Flush() // into a strings.Builder: no error
	for _, line := range strings.SplitAfter(buf.String(), "\n") {
		if line != "" {
			_, _ = io.WriteString(w, strings.TrimRight(line, " \n")+"\n")
		}
	}
}

// ANSI colours for a diff on a terminal.
const (
	ansiRed   = "\x1b[31m"
	ansiGreen = "\x1b[32m"
	ansiCyan  = "\x1b[36m"
	ansiReset = "\x1b[0m"
)

// colourOn: colour only on a terminal, and never with NO_COLOR set
// (https://no-color.org: set, whatever its value).
func colourOn(w io.Writer) bool {
	if _, set := os.LookupEnv("NO_COLOR"); set {
		return false
	}
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// renderProcessDiff is diff's human output.
func renderProcessDiff(p *printer, d host.ProcessChanges, colour bool) {
	p.printf("process %s (sandbox %s): %s\n", d.Process, d.Sandbox, termSafe(changesHeadline(d.Changes)))
	printChangeEntries(p, d.Changes, "  ")
	for _, f := range d.Diffs {
		p.println()
		if f.Summary != "" {
			p.printf("%s: %s\n", termSafe(f.Path), termSafe(f.Summary))
			continue
		}
		for _, line := range strings.SplitAfter(strings.TrimSuffix(f.Unified, "\n"), "\n") {
			printDiffLine(p, strings.TrimSuffix(line, "\n"), colour)
		}
	}
}

// printDiffLine prints one line of a unified diff, escaped (the text is
// the sandbox's: a control byte is shown, not obeyed; tabs are kept) and
// coloured by its first byte.
func printDiffLine(p *printer, line string, colour bool) {
	safe := line
	if !printable(strings.ReplaceAll(line, "\t", " ")) {
		// The mark ("-", "+", " " or a header's "--- ") stays first,
		// the text after it quoted.
		n := min(1, len(line))
		if strings.HasPrefix(line, "--- ") || strings.HasPrefix(line, "+++ ") {
			n = 4
		}
		safe = line[:n] + strconv.Quote(line[n:])
	}
	col := ""
	switch {
	case !colour:
	case strings.HasPrefix(line, "---"), strings.HasPrefix(line, "+++"):
	case strings.HasPrefix(line, "@@"):
		col = ansiCyan
	case strings.HasPrefix(line, "-"):
		col = ansiRed
	case strings.HasPrefix(line, "+"):
		col = ansiGreen
	}
	if col != "" {
		p.printf("%s%s%s\n", col, safe, ansiReset)
		return
	}
	p.printf("%s\n", safe)
}

// printExitChanges is journal show --changes: under a process.exited
// line, its changes' headline and entries, indented as --output's lines.
func printExitChanges(w io.Writer, e host.HistoryEvent) error {
	const indent = "                "
	p := &printer{w: w}
	var x lifecycle.ProcessExited
	if err := json.Unmarshal(e.Payload, &x); err != nil {
		p.printf("%s(changes: %s)\n", indent, termSafe(err.Error()))
		return p.Err()
	}
	p.printf("%s%s\n", indent, termSafe(changesHeadline(x.Changes)))
	printChangeEntries(p, x.Changes, indent+"  ")
	return p.Err()
}

const diffHelp = `usage: ` + diffUsage + `

Prints what a process did under /workspace, as journaled with its exit: a
line per change (op, kind, path, size, sha256), then for each small text
file the recorder kept a unified diff of its text before and after (3
lines of context); a binary, large or not-kept file gets a one-line
summary. It reads the journal through a server when one answers, else the
journal file; the kept text is read from beside the journal.

Colour (red -, green +, cyan @@) only on a terminal and never with
NO_COLOR set; text from the sandbox is escaped as in every view.

  --json   one object: {"process", "sandbox", "changes", "diffs": [{"path",
           "unified" or "summary"}]}

  pid=$(stockade exec -d "$id" -- sh -c 'echo hi > out.txt')
  stockade diff "$pid"
  stockade diff "$pid" --json
`
