package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/stockade/stockade/statedir"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

const logsUsage = "stockade logs [--stdout|--stderr] [--json] [-f] PROCESS_ID"

// logsCmd prints a process's recorded output. It reads the recording files
// beside the journal: no lock, no runtime, so it works while a runtime
// holds the journal and after it is gone.
type logsCmd struct {
	g      global
	id     string
	stdout bool // only stdout
	stderr bool // only stderr
	follow bool
}

func parseLogs(g global, args []string) (command, error) {
	c := &logsCmd{g: g}
	fs := newFlags("logs", &c.g)
	fs.BoolVar(&c.stdout, "stdout", false, "only stdout")
	fs.BoolVar(&c.stderr, "stderr", false, "only stderr")
	fs.BoolVar(&c.follow, "f", false, "follow a running process until it ends")
	fs.BoolVar(&c.follow, "follow", false, "follow a running process until it ends")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return nil, err
	}
	if err := wantArgs("logs", pos, 1, logsUsage); err != nil {
		return nil, err
	}
	if c.id = pos[0]; c.id == "" {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "logs", "PROCESS_ID is empty (usage: %s)", logsUsage)
	}
	if c.stdout && c.stderr {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "logs", "--stdout and --stderr exclude each other; give neither for both (usage: %s)", logsUsage)
	}
	return c, nil
}

func (c *logsCmd) execute(ctx context.Context, _ io.Reader, stdout, stderr io.Writer) int {
	path, err := journalPath(c.g)
	if err != nil {
		return fail(stderr, err, 1)
	}
	keep := func(s string) bool {
		return !(c.stdout && s == "stderr" || c.stderr && s == "stdout")
	}
	var emit func(stockade.OutputChunk) error
	var finish func(stockade.OutputSummary) error
	if c.g.json {
		enc := newEncoder(stdout)
		emit = func(ch stockade.OutputChunk) error { return enc.Encode(outputLineOf(ch)) }
		finish = func(sum stockade.OutputSummary) error { return enc.Encode(outputLine{Stream: "end", Summary: &sum}) }
	} else {
		w := &streamWriter{out: stdout, err: stderr}
		emit, finish = w.chunk, w.end
	}
	filtered := func(ch stockade.OutputChunk) error {
		if ch.Stream != "" && !keep(ch.Stream) {
			return nil
		}
		return emit(ch)
	}
	if c.follow {
		return c.followLogs(ctx, path, filtered, finish, stderr)
	}
	sum, err := stockade.ReadOutput(path, c.id, filtered)
	if err != nil {
		return fail(stderr, err, 1)
	}
	if err := finish(sum); err != nil {
		return fail(stderr, outputError(err), 1)
	}
	return 0
}

// errFollowed ends a follow that saw what it waited for.
var errFollowed = errors.New("followed to the end")

// followLogs prints what is recorded, then what is added, until the
// journal (through a server: only a living runtime writes the recording)
// says the process exited; the recording is synced before the exit is
// journaled and its end record follows the exit a moment later (a short,
// bounded wait for it: a runtime that died in between leaves it without
// one, and the note says so). New output is picked up by reading the
// recording again (a few times a second; it is bounded in size), printing
// only what lies past what was printed.
func (c *logsCmd) followLogs(ctx context.Context, path string, emit func(stockade.OutputChunk) error, finish func(stockade.OutputSummary) error, stderr io.Writer) int {
	cl := dial(c.g)
	if cl == nil {
		return fail(stderr, spec.Errorf(spec.CodeUnsupported, "logs", "-f follows a running process through a server: start `stockade serve` (without -f, logs prints what is recorded so far)"), 1)
	}
	defer func() { _ = cl.Close() }() // a client's connection: nothing to lose
	st, err := cl.ReplayProcess(ctx, c.id, 0)
	if err != nil {
		return fail(stderr, err, 1)
	}
	ended := make(chan struct{})
	broken := make(chan error, 1) // the follow ended without the exit
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		// The sandbox's history comes first: an exit before the follow
		// began is in it.
		err := cl.Follow(fctx, st.Sandbox, func(e host.HistoryEvent) error {
			if e.ID == c.id && e.Type == (lifecycle.ProcessExited{}).Type() {
				close(ended)
				return errFollowed
			}
			return nil
		})
		if !errors.Is(err, errFollowed) && fctx.Err() == nil {
			if err == nil {
				err = spec.Errorf(spec.CodeCancelled, "logs", "the server ended the follow")
			}
			broken <- err
		}
	}()
	var printed int64 // how far into the output has been printed
	endWait := 40     // reads after the exit, 50 ms apart, waiting for the end record
	for {
		final := false
		select {
		case <-ended:
			final = true
		default:
		}
		sum, err := stockade.ReadOutput(path, c.id, func(ch stockade.OutputChunk) error {
			end := ch.Offset + int64(len(ch.Data)) + ch.Gap
			if end <= printed {
				return nil
			}
			if skip := printed - ch.Offset; skip > 0 && ch.Stream != "" {
				ch.Data, ch.Offset = ch.Data[skip:], printed
			}
			printed = end
			return emit(ch)
		})
		switch {
		case err != nil && (final || !spec.IsCode(err, spec.CodeNotFound)):
			return fail(stderr, err, 1)
		case final && !sum.Complete && endWait > 0:
			endWait--
			select {
			case <-time.After(50 * time.Millisecond):
			case <-ctx.Done():
				return 0
			}
			continue
		case final:
			if err := finish(sum); err != nil {
				return fail(stderr, outputError(err), 1)
			}
			return 0
		}
		select {
		case <-ended:
		case err := <-broken:
			// The server went away (or the follow lagged): what was
			// recorded is printed; the end is not known.
			return fail(stderr, spec.Wrap(spec.CodeOf(err), "logs", err, "following process %s (its recording so far is printed)", c.id), 1)
		case <-time.After(250 * time.Millisecond):
		case <-ctx.Done():
			return 0
		}
	}
}

// journalPath is the journal the global flags name, else the default.
func journalPath(g global) (string, error) {
	if g.journal != "" {
		return g.journal, nil
	}
	return statedir.DefaultJournal()
}

// streamWriter prints chunks to the process's own streams, a gap as a line
// on stderr (after a newline if the output stood mid-line).
type streamWriter struct {
	out, err io.Writer
	midLine  bool
}

func (w *streamWriter) chunk(ch stockade.OutputChunk) error {
	if ch.Stream == "" {
		return w.note(gapNote(ch, ""))
	}
	dst := w.out
	if ch.Stream == "stderr" {
		dst = w.err
	}
	if len(ch.Data) > 0 {
		w.midLine = ch.Data[len(ch.Data)-1] != '\n'
	}
	_, err := dst.Write(ch.Data)
	return err
}

func (w *streamWriter) note(s string) error {
	if w.midLine {
		if _, err := fmt.Fprintln(w.err); err != nil {
			return err
		}
		w.midLine = false
	}
	_, err := fmt.Fprintf(w.err, "stockade: %s\n", s)
	return err
}

func (w *streamWriter) end(sum stockade.OutputSummary) error {
	if !sum.Complete {
		return w.note(incompleteNote(sum))
	}
	return nil
}

// gapNote marks a gap where it stands in the output: bytes beyond the
// recording's bounds, or bytes known lost (a gap record: the journal's
// process.output_gap says why, given as why when known).
func gapNote(ch stockade.OutputChunk, why string) string {
	switch {
	case ch.Lost && why != "":
		return fmt.Sprintf("[%d bytes of output lost here: %s]", ch.Gap, termSafe(why))
	case ch.Lost:
		return fmt.Sprintf("[%d bytes of output lost here (journal show --output says why)]", ch.Gap)
	}
	return fmt.Sprintf("[%d bytes of output not recorded here]", ch.Gap)
}

func incompleteNote(sum stockade.OutputSummary) string {
	s := "[the recording ends here without its end mark: the process is still running, or the runtime stopped before it ended (its last second of output may be missing)]"
	if sum.Torn {
		s = "[the recording ends in a torn record: the process is still running, or the runtime stopped before it ended (its last second of output may be missing)]"
	}
	return s
}

// outputLine is one line of --json output: a chunk ("stdout", "stderr"),
// a gap, or the end with the summary. Text holds valid UTF-8 output,
// Base64 any other.
type outputLine struct {
	Kind    string                  `json:"kind,omitempty"` // "output" under journal show
	ID      string                  `json:"id,omitempty"`   // the process, under journal show
	Stream  string                  `json:"stream"`
	Offset  int64                   `json:"offset"`
	Text    *string                 `json:"text,omitempty"`
	Base64  []byte                  `json:"base64,omitempty"`
	Bytes   int64                   `json:"bytes,omitempty"` // a gap's
	Lost    bool                    `json:"lost,omitempty"`  // a gap of bytes known lost
	Why     string                  `json:"why,omitempty"`   // why, from the journal (journal show)
	Summary *stockade.OutputSummary `json:"summary,omitempty"`
}

func outputLineOf(ch stockade.OutputChunk) outputLine {
	l := outputLine{Offset: ch.Offset}
	switch ch.Stream {
	case "":
		l.Stream, l.Bytes, l.Lost = "gap", ch.Gap, ch.Lost
		return l
	case "stdout":
		l.Stream = "stdout"
	default:
		l.Stream = "stderr"
	}
	if utf8.Valid(ch.Data) {
		s := string(ch.Data)
		l.Text = &s
	} else {
		l.Base64 = ch.Data
	}
	return l
}

// printOutput prints process id's recorded output under its line in
// journal show: indented, each line marked with its stream. lost maps the
// offsets of the process's journaled output gaps to why they happened.
func printOutput(w io.Writer, path, id string, lost map[int64]string, asJSON bool) error {
	// A read error is shown in the output; a write error ends it and is
	// returned.
	p := &printer{w: w}
	if asJSON {
		enc := newEncoder(p)
		sum, err := stockade.ReadOutput(path, id, func(ch stockade.OutputChunk) error {
			l := outputLineOf(ch)
			l.Kind, l.ID = "output", id
			if ch.Lost {
				l.Why = lost[ch.Offset]
			}
			return enc.Encode(l)
		})
		if err != nil {
			msg := err.Error()
			p.keep(enc.Encode(outputLine{Kind: "output", ID: id, Stream: "error", Text: &msg}))
			return p.Err()
		}
		p.keep(enc.Encode(outputLine{Kind: "output", ID: id, Stream: "end", Summary: &sum}))
		return p.Err()
	}
	const indent = "                "
	sum, err := stockade.ReadOutput(path, id, func(ch stockade.OutputChunk) error {
		if ch.Stream == "" {
			p.printf("%s%s\n", indent, gapNote(ch, lost[ch.Offset]))
			return p.err
		}
		tag := "out|"
		if ch.Stream == "stderr" {
			tag = "err|"
		}
		for _, line := range bytes.SplitAfter(ch.Data, []byte("\n")) {
			if len(line) > 0 {
				// A view, not the output itself: escaped for the terminal
				// (stockade logs writes the bytes as they are).
				p.printf("%s%s %s\n", indent, tag, termSafe(string(bytes.TrimSuffix(line, []byte("\n")))))
			}
		}
		return p.err
	})
	switch {
	case spec.IsCode(err, spec.CodeNotFound):
		p.printf("%s(no recorded output: recording off, or removed by retention)\n", indent)
	case err != nil:
		p.printf("%s(output: %s)\n", indent, termSafe(err.Error()))
	case !sum.Complete:
		p.printf("%s%s\n", indent, incompleteNote(sum))
	case sum.Recorded == 0 && sum.Missing == 0:
		p.printf("%s(no output)\n", indent)
	}
	return p.Err()
}
