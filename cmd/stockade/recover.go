package main

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/stockade/stockade"
)

type recoverCmd struct {
	g         global
	dry       bool
	stopProcs bool
}

func parseRecover(g global, args []string) (command, error) {
	c := &recoverCmd{g: g}
	fs := newFlags("recover", &c.g)
	fs.BoolVar(&c.dry, "dry-run", false, "decide, print, and touch nothing")
	fs.BoolVar(&c.stopProcs, "stop-processes", false, "stop processes still running in re-adopted sandboxes instead of re-adopting them detached")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return nil, err
	}
	if err := wantArgs("recover", pos, 0, "stockade recover [--dry-run] [--stop-processes]"); err != nil {
		return nil, err
	}
	return c, nil
}

// execute runs (or, with --dry-run, only plans) the recovery Open does, and
// prints what was decided for each sandbox and which orphans went.
func (c *recoverCmd) execute(ctx context.Context, _ io.Reader, stdout, stderr io.Writer) int {
	opts := stockade.Options{Journal: c.g.journal, Profile: c.g.profile, StopAdoptedProcesses: c.stopProcs}
	var rep stockade.RecoveryReport
	if c.dry {
		var err error
		if rep, err = stockade.PlanRecovery(ctx, opts); err != nil {
			return fail(stderr, err, 1)
		}
	} else {
		rt, err := stockade.Open(ctx, opts)
		if err != nil {
			return fail(stderr, err, 1)
		}
		rep, err = rt.Recovery(ctx)
		if err = errors.Join(err, rt.Close()); err != nil {
			return fail(stderr, err, 1)
		}
	}
	out := &printer{w: stdout}
	if c.g.json {
		out.keep(newEncoder(out).Encode(rep))
	} else {
		printRecovery(out, rep, c.dry)
	}
	// A failed write fails the command, as in the other commands.
	if err := out.Err(); err != nil {
		return fail(stderr, err, 1)
	}
	return 0
}

// printRecovery prints what was decided (or, dry, would be) for each
// sandbox and which orphans went.
func printRecovery(out *printer, rep stockade.RecoveryReport, dry bool) {
	verb := "recovered"
	if dry {
		verb = "would recover"
	}
	out.printf("%s %d sandboxes, %d live processes, %d orphans in %v\n", verb, len(rep.Sandboxes), rep.Processes, len(rep.Orphans), rep.Duration.Round(time.Millisecond))
	for _, s := range rep.Sandboxes {
		settled := ""
		if !dry {
			settled = " → " + string(s.Settled)
		}
		out.printf("  %s  %s → %s%s\n      %s\n", s.ID, s.From, s.Decision, settled, termSafe(s.Observed))
		if s.Error != "" {
			out.printf("      error: %s\n", termSafe(s.Error))
		}
	}
	for _, o := range rep.Orphans {
		out.printf("  orphan %s %s (%s) of sandbox %s\n", o.Kind, o.Name, o.ID, o.Sandbox)
	}
}
