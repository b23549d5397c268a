package main

import (
	"context"
	"fmt"
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
		rep = rt.Recovery()
		if err := rt.Close(); err != nil {
			return fail(stderr, err, 1)
		}
	}
	if c.g.json {
		newEncoder(stdout).Encode(rep)
		return 0
	}
	verb := "recovered"
	if c.dry {
		verb = "would recover"
	}
	fmt.Fprintf(stdout, "%s %d sandboxes, %d live processes, %d orphans in %v\n", verb, len(rep.Sandboxes), rep.Processes, len(rep.Orphans), rep.Duration.Round(time.Millisecond))
	for _, s := range rep.Sandboxes {
		settled := ""
		if !c.dry {
			settled = " → " + string(s.Settled)
		}
		fmt.Fprintf(stdout, "  %s  %s → %s%s\n      %s\n", s.ID, s.From, s.Decision, settled, termSafe(s.Observed))
		if s.Error != "" {
			fmt.Fprintf(stdout, "      error: %s\n", termSafe(s.Error))
		}
	}
	for _, o := range rep.Orphans {
		fmt.Fprintf(stdout, "  orphan %s %s (%s) of sandbox %s\n", o.Kind, o.Name, o.ID, o.Sandbox)
	}
	return 0
}
