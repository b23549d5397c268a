package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/stockade/stockade/statedir"

	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/inspect"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/recorder"
	"github.com/stockade/stockade/spec"
)

// journalUsage is each journal subcommand's usage line.
var journalUsage = map[string]string{
	"show":    "stockade journal show SANDBOX [--output] [--changes] [--follow] [--type T] [--egress]",
	"replay":  "stockade journal replay ID [--process] [--at SEQ]",
	"export":  "stockade journal export",
	"ls":      "stockade journal ls",
	"verify":  "stockade journal verify",
	"restore": "stockade journal restore COPY DEST",
	"diff":    "stockade journal diff ID [--process] --at A --at B",
	"tail":    "stockade journal tail [--json]",
}

type journalCmd struct {
	g       global
	sub     string
	id      string  // show, replay
	dst     string  // restore: the new journal file
	at      seqList // replay: one (none: the stream's end); diff: two
	process bool    // replay: id is a process's
	output  bool    // show: each process's recorded output under its exit
	follow  bool    // show: then its new events, live (needs a server)
	types   string  // show: only events whose type starts so (e.g. process, sandbox.exited)
	egress  bool    // show: the sandbox's egress decisions instead of its events
	changes bool    // show: each process's changes under its exit
}

func parseJournal(g global, args []string) (command, error) {
	c := &journalCmd{g: g}
	// Global flags may also stand between journal and its subcommand.
	fs := newFlags("journal", &c.g)
	if err := fs.Parse(args); err != nil {
		return nil, usageError("journal", err)
	}
	if fs.NArg() == 0 {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "journal", "no subcommand given (show, replay, diff, tail, export, ls, verify or restore)")
	}
	c.sub, args = fs.Arg(0), fs.Args()
	line, ok := journalUsage[c.sub]
	if !ok {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "journal", "unknown subcommand %q (show, replay, diff, tail, export, ls, verify or restore)", c.sub)
	}
	name := "journal " + c.sub
	fs = newFlags(name, &c.g)
	if c.sub == "replay" || c.sub == "diff" {
		fs.Var(&c.at, "at", "fold up to this sequence (0: the end)")
		fs.BoolVar(&c.process, "process", false, "the id is a process's")
	}
	if c.sub == "show" {
		fs.BoolVar(&c.output, "output", false, "each process's recorded output under its exit line")
		fs.BoolVar(&c.changes, "changes", false, "each process's changes under /workspace under its exit line")
		fs.BoolVar(&c.follow, "follow", false, "then its new events as they happen (needs stockade serve)")
		fs.StringVar(&c.types, "type", "", "only events whose type starts with this (process, sandbox.exited, ...)")
		fs.BoolVar(&c.egress, "egress", false, "the sandbox's egress decisions (allowlist network) instead of its events")
	}
	pos, err := parseArgs(fs, args[1:])
	if err != nil {
		return nil, err
	}
	n := 0
	switch c.sub {
	case "show", "replay", "diff":
		n = 1
	case "restore":
		n = 2
	}
	if err := wantArgs(name, pos, n, line); err != nil {
		return nil, err
	}
	switch {
	case c.egress && (c.follow || c.output || c.changes || c.types != ""):
		return nil, spec.Errorf(spec.CodeInvalidArgument, name, "--egress goes alone: it shows decisions, not events")
	case c.follow && c.changes:
		return nil, spec.Errorf(spec.CodeInvalidArgument, name, "--changes and --follow together: see a process's changes with stockade diff")
	case c.follow && c.output:
		return nil, spec.Errorf(spec.CodeInvalidArgument, name, "--output and --follow together: follow a process's output with stockade logs -f")
	case c.sub == "replay" && len(c.at) > 1:
		return nil, spec.Errorf(spec.CodeInvalidArgument, name, "one --at at most (usage: %s)", line)
	case c.sub == "diff" && len(c.at) != 2:
		return nil, spec.Errorf(spec.CodeInvalidArgument, name, "two --at points needed (usage: %s)", line)
	}
	if n >= 1 {
		if c.id = pos[0]; c.id == "" {
			return nil, spec.Errorf(spec.CodeInvalidArgument, name, "the first argument is empty (usage: %s)", line)
		}
	}
	if n == 2 {
		if c.dst = pos[1]; c.dst == "" {
			return nil, spec.Errorf(spec.CodeInvalidArgument, name, "DEST is empty (usage: %s)", line)
		}
	}
	return c, nil
}

// journalSource is what the journal commands read: a host.Inspector and
// where its journal's recordings are.
type journalSource struct {
	in host.Inspector
	// path is the journal file; recordings are files beside it, read
	// without its lock.
	path    string
	pathErr error // why there is no path (served: only show needs one)
	// name names the journal in verify's line.
	name  string
	close func() error
}

// openInspector asks a running server when one answers (it holds the
// journal), else opens the journal file read-only: with a shared lock, so
// it works beside another reader but fails fast (journal_locked, naming the
// holder) while a runtime holds it.
func openInspector(g global) (journalSource, error) {
	if cl := dial(g); cl != nil {
		path, err := journalPath(g)
		return journalSource{in: cl, path: path, pathErr: err, name: "the served journal", close: cl.Close}, nil
	}
	path, err := journalPath(g)
	if err != nil {
		return journalSource{}, err
	}
	r, err := inspect.Open(path)
	if err != nil {
		return journalSource{}, err
	}
	return journalSource{in: r, path: r.Path(), name: r.Path(), close: r.Close}, nil
}

func (c *journalCmd) execute(ctx context.Context, _ io.Reader, stdout, stderr io.Writer) int {
	if c.sub == "restore" {
		// A copy is never a second runtime by accident; this makes one on
		// purpose, into a new file.
		if err := journal.Restore(c.id, c.dst); err != nil {
			return fail(stderr, err, 1)
		}
		return printText(stdout, stderr, fmt.Sprintf("%s: restored from the copy %s; it opens writable with the copy's owner\n", c.dst, c.id))
	}
	if c.egress {
		// Decisions are recorded beside the journal, read as files
		// whether or not a server holds it.
		path, err := journalPath(c.g)
		if err != nil {
			return fail(stderr, err, 1)
		}
		if err := printEgress(stdout, statedir.Recordings(path), c.id, c.g.json); err != nil {
			return fail(stderr, err, 1)
		}
		return 0
	}
	if c.follow || c.sub == "tail" {
		if err := c.followLive(ctx, stdout); err != nil {
			return fail(stderr, err, 1)
		}
		return 0
	}
	src, err := openInspector(c.g)
	if err != nil {
		return fail(stderr, err, 1)
	}
	defer func() { _ = src.close() }() // a client's connection or a journal opened read-only: nothing to lose
	out := &printer{w: stdout}
	if err := c.inspect(ctx, src, out); err != nil {
		return fail(stderr, err, 1)
	}
	if err := out.Err(); err != nil {
		return fail(stderr, err, 1)
	}
	return 0
}

// followLive prints the journal's events as they are committed: live
// events need a living runtime, a server. A failed write ends the follow
// and fails the command.
func (c *journalCmd) followLive(ctx context.Context, stdout io.Writer) error {
	cl := dial(c.g)
	if cl == nil {
		return needServer("journal " + c.sub + " following live events")
	}
	defer func() { _ = cl.Close() }() // a client's connection: nothing to lose
	p := historyPrinter{w: stdout, json: c.g.json}
	return cl.Follow(ctx, c.id, func(e host.HistoryEvent) error {
		if !c.wanted(e) {
			return nil
		}
		return p.print(e)
	})
}

// inspect answers the subcommands that read the journal (show, replay,
// diff, verify, export, ls) from src, printing to out.
func (c *journalCmd) inspect(ctx context.Context, src journalSource, out *printer) error {
	in := src.in
	switch c.sub {
	case "show":
		evs, err := in.History(ctx, c.id)
		if err != nil {
			return err
		}
		if src.pathErr != nil {
			return src.pathErr
		}
		if err := c.show(out, src.path, evs); err != nil {
			return err
		}
	case "replay":
		var state any
		var err error
		if c.process {
			state, err = in.ReplayProcess(ctx, c.id, c.at.first())
		} else {
			state, err = in.ReplaySandbox(ctx, c.id, c.at.first())
		}
		if err != nil {
			return err
		}
		enc := newEncoder(out)
		enc.SetIndent("", "  ")
		out.keep(enc.Encode(state))
	case "diff":
		changes, err := inspect.Diff(ctx, in, c.id, c.process, c.at[0], c.at[1])
		if err != nil {
			return err
		}
		printDiff(out, changes, c.g.json)
	case "verify":
		if err := in.Verify(ctx); err != nil {
			return err
		}
		out.printf("%s: every record decodes, every stream folds, the indexes agree\n", src.name)
	case "export":
		if err := in.Export(ctx, out); err != nil {
			return err
		}
	case "ls":
		list, err := in.Live(ctx)
		if err != nil {
			return err
		}
		printLive(out, list, c.g.json)
	}
	return nil
}

// seqList is a repeatable --at flag.
type seqList []uint64

func (l *seqList) String() string { return fmt.Sprint([]uint64(*l)) }

func (l *seqList) Set(v string) error {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return fmt.Errorf("%q is not a sequence number", v)
	}
	*l = append(*l, n)
	return nil
}

// first is the one --at of a replay (0: the end).
func (l seqList) first() uint64 {
	if len(l) == 0 {
		return 0
	}
	return l[0]
}

func printDiff(w *printer, changes []inspect.Change, asJSON bool) {
	if asJSON {
		enc := newEncoder(w)
		for _, c := range changes {
			w.keep(enc.Encode(c))
		}
		return
	}
	for _, c := range changes {
		w.printf("%s: %s → %s\n", termSafe(c.Field), termSafe(showValue(c.From)), termSafe(showValue(c.To)))
	}
}

func showValue(v any) string {
	if v == nil {
		return "(none)"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return short(string(b), 120)
}

// printLive prints the live index, a line (or a JSON object) an entity.
func printLive(w *printer, list []host.LiveEntity, asJSON bool) {
	enc := newEncoder(w)
	for _, e := range list {
		if asJSON {
			w.keep(enc.Encode(e))
			continue
		}
		w.printf("%-8s %-26s parent=%-26s last=%-22s seq=%d %s\n", e.Kind, e.ID, e.Parent, e.Last, e.Seq, e.Updated.Format("2006-01-02T15:04:05Z"))
	}
}

// printHistoryWithOutput is journal show --output and --changes: under
// each process's exit line its changes (with changes) and its recorded
// output (with output), and a process without one (still running,
// or left by a crash) after the history. A write error ends it and is
// returned.
func printHistoryWithOutput(w io.Writer, path string, evs []host.HistoryEvent, asJSON, output, changes bool) error {
	var open []string
	seen := map[string]bool{}
	lost := map[string]map[int64]string{} // a process's output gaps: offset → why
	p := historyPrinter{w: w, json: asJSON}
	for _, e := range evs {
		if err := p.print(e); err != nil {
			return err
		}
		if e.Kind != string(journal.KindProcess) {
			continue
		}
		if !seen[e.ID] {
			seen[e.ID] = true
			open = append(open, e.ID)
		}
		if e.Type == (lifecycle.OutputGap{}).Type() {
			var g lifecycle.OutputGap
			if json.Unmarshal(e.Payload, &g) == nil {
				if lost[e.ID] == nil {
					lost[e.ID] = map[int64]string{}
				}
				lost[e.ID][g.From] = g.Why
			}
		}
		if e.Type == (lifecycle.ProcessExited{}).Type() {
			// --json: the changes are in the event's payload already.
			if changes && !asJSON {
				if err := printExitChanges(w, e); err != nil {
					return err
				}
			}
			if !output {
				continue
			}
			if err := printOutput(w, path, e.ID, lost[e.ID], asJSON); err != nil {
				return err
			}
			open = slices.DeleteFunc(open, func(id string) bool { return id == e.ID })
		}
	}
	for _, id := range open {
		if !output {
			break
		}
		if !asJSON {
			if _, err := fmt.Fprintf(w, "output of process %s, which has no exit in the journal:\n", id); err != nil {
				return outputError(err)
			}
		}
		if err := printOutput(w, path, id, lost[id], asJSON); err != nil {
			return err
		}
	}
	return nil
}

// wanted: show --type keeps only the events whose type starts with it.
func (c *journalCmd) wanted(e host.HistoryEvent) bool { return strings.HasPrefix(e.Type, c.types) }

func (c *journalCmd) filter(evs []host.HistoryEvent) []host.HistoryEvent {
	return slices.DeleteFunc(evs, func(e host.HistoryEvent) bool { return !c.wanted(e) })
}

// show prints a history as journal show asks: filtered by --type, with
// each process's recorded output (from the files beside the journal at
// path) under its exit with --output. A write error ends it and is
// returned.
func (c *journalCmd) show(w io.Writer, path string, evs []host.HistoryEvent) error {
	evs = c.filter(evs)
	if c.output || c.changes {
		return printHistoryWithOutput(w, path, evs, c.g.json, c.output, c.changes)
	}
	return printHistory(w, evs, c.g.json)
}

// printEgress prints a sandbox's egress decisions: a table, or with --json
// one decision per line. A write error ends it and is returned.
func printEgress(w io.Writer, dir, id string, asJSON bool) error {
	p := &printer{w: w}
	enc := newEncoder(p)
	// The table's write errors are p's (Flush reports them too).
	tw := tabwriter.NewWriter(p, 0, 4, 2, ' ', 0)
	if !asJSON {
		_, _ = fmt.Fprintln(tw, "TIME\tPROCESS\tVERDICT\tMETHOD\tHOST:PORT\tADDRESS\tRULE / REASON\tUP\tDOWN")
	}
	n := 0
	err := recorder.ReadDecisions(dir, id, func(d egress.Decision) error {
		n++
		if asJSON {
			p.keep(enc.Encode(d))
			return p.err
		}
		why := d.Rule
		if d.Verdict != egress.VerdictAllow {
			why = d.Reason
		}
		// Every field but the numbers comes from the proxy, which took it
		// from the sandbox's request: escaped for the terminal.
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", d.Time.Format("15:04:05.000"), dash(d.Process), termSafe(d.Verdict), dash(d.Method),
			termSafe(net.JoinHostPort(d.Host, strconv.Itoa(int(d.Port)))), dash(d.Addr), dash(why), d.Up, d.Down)
		return p.err
	})
	if p.err != nil {
		return p.Err()
	}
	if err != nil {
		return err
	}
	if !asJSON {
		p.keep(tw.Flush())
		if n == 0 {
			p.printf("no egress decisions recorded for %s\n", id)
		}
	}
	return p.Err()
}

// dash is a table cell: "-" when empty, else s escaped for the terminal.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return termSafe(s)
}
