package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/journal"
)

func doctor(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var g global
	fs := newFlags("doctor", stderr)
	g.register(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	rep, err := dockerio.Doctor(ctx, g.profile)
	if err != nil {
		return fail(stderr, err, 1)
	}
	rep.WriteTo(stdout)
	if err := rep.Err(); err != nil {
		return fail(stderr, err, 1)
	}
	return 0
}

// openJournal opens the journal for a read-only command: with a shared lock,
// so it works beside another reader but fails fast (journal_locked, naming
// the holder) while a runtime holds it.
func openJournal(g global) (*journal.Journal, error) {
	path := g.journal
	if path == "" {
		var err error
		if path, err = journal.DefaultPath(); err != nil {
			return nil, err
		}
	}
	return journal.Open(path, journal.Options{ReadOnly: true})
}

func journalCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, "usage: stockade journal show SANDBOX | replay SANDBOX|PROCESS [--at SEQ] | export | ls | verify\n")
		return 2
	}
	sub, rest := args[0], args[1:]
	var g global
	fs := newFlags("journal "+sub, stderr)
	g.register(fs)
	at := fs.Uint64("at", 0, "replay: fold up to this sequence (0: the end)")
	process := fs.Bool("process", false, "replay: the id is a process's")
	// Flags may follow the positional argument: stockade journal show ID --json.
	var pos []string
	for {
		if err := fs.Parse(rest); err != nil {
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	j, err := openJournal(g)
	if err != nil {
		return fail(stderr, err, 1)
	}
	defer j.Close()
	switch sub {
	case "show":
		if len(pos) != 1 {
			fmt.Fprint(stderr, "usage: stockade journal show SANDBOX\n")
			return 2
		}
		evs, err := stockade.History(j, pos[0])
		if err != nil {
			return fail(stderr, err, 1)
		}
		printHistory(stdout, evs, g.json)
	case "replay":
		if len(pos) != 1 {
			fmt.Fprint(stderr, "usage: stockade journal replay ID [--process] [--at SEQ]\n")
			return 2
		}
		kind := journal.KindSandbox
		if *process {
			kind = journal.KindProcess
		}
		state, err := replay(j, kind, pos[0], *at)
		if err != nil {
			return fail(stderr, err, 1)
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(state)
	case "verify":
		j.Close()
		if err := replayAll(j.Path()); err != nil {
			return fail(stderr, err, 1)
		}
		fmt.Fprintf(stdout, "%s: every record decodes, every stream folds, the indexes agree\n", j.Path())
	case "export":
		if err := j.Export(stdout, nil); err != nil {
			return fail(stderr, err, 1)
		}
	case "ls":
		err := j.Live(func(e journal.LiveEntity) error {
			_, err := fmt.Fprintf(stdout, "%-8s %-26s parent=%-26s last=%-22s seq=%d %s\n", e.Key.Kind, e.Key.ID, e.Parent, e.Type, e.LastSeq, e.Updated.Format("2006-01-02T15:04:05Z"))
			return err
		})
		if err != nil {
			return fail(stderr, err, 1)
		}
	default:
		fmt.Fprintf(stderr, "stockade journal: unknown subcommand %q\n", sub)
		return 2
	}
	return 0
}
