package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/internal/survivor"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// stockade drill-child: the child a drill kills, and what it does before
// (a claim from the warm pool, a command, a checkpoint and a rollback,
// with a hostile survivor when asked).

type drillChildCmd struct {
	g           global
	image       string
	recoverOnly bool
	noWarden    bool
	hostile     bool
}

func parseDrillChild(g global, args []string) (command, error) {
	c := &drillChildCmd{g: g}
	fs := newFlags("drill-child", &c.g)
	fs.StringVar(&c.image, "image", "stockade/toolbox:dev", "")
	fs.BoolVar(&c.recoverOnly, "recover-only", false, "only open (recover) and close")
	fs.BoolVar(&c.noWarden, "no-warden", false, "sandboxes without a warden (processes as Docker execs)")
	fs.BoolVar(&c.hostile, "hostile", false, "a hostile survivor beside the checkpoint and the rollback")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return nil, err
	}
	if err := wantArgs("drill-child", pos, 0, "stockade drill-child [--image IMAGE] [--recover-only] [--no-warden]"); err != nil {
		return nil, err
	}
	return c, nil
}

// execute is the workload a drill kills: a kept sandbox with a running
// process and a streaming neighbour the child reads throughout, a short
// process run to its end beside them; a one-shot sandbox run to its end,
// stopped and removed.
func (c *drillChildCmd) execute(ctx context.Context, _ io.Reader, _, stderr io.Writer) (code int) {
	mode := wardenMode
	if c.noWarden {
		mode = execMode
	}
	rt, err := openDrillRuntime(ctx, c.g.journal, c.g.profile, c.image, mode)
	if err != nil {
		return fail(stderr, err, 1)
	}
	defer closeRuntime(rt, stderr, &code, 1)
	if c.recoverOnly {
		return 0
	}
	kept, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: c.image, Lifetime: spec.Kept})
	if err != nil {
		return fail(stderr, err, 1)
	}
	p, err := kept.Start(ctx, spec.Process{Argv: []string{"sh", "-c", "echo running; sleep 30"}, Stderr: spec.Discard})
	if err != nil {
		return fail(stderr, err, 1)
	}
	line := make([]byte, 8)
	if _, err := io.ReadFull(p.Stdout(), line); err != nil {
		return fail(stderr, err, 1)
	}
	go func() { _, _ = io.Copy(io.Discard, p.Stdout()) }() // drained: the drill checks the journal and recording
	s, err := kept.Start(ctx, spec.Process{Argv: []string{"sh", "-c", streamer}, Stderr: spec.Discard})
	if err != nil {
		return fail(stderr, err, 1)
	}
	if _, err := io.CopyN(io.Discard, s.Stdout(), streamedBefore); err != nil {
		return fail(stderr, fmt.Errorf("reading the streaming neighbour: %w", err), 1)
	}
	go func() { _, _ = io.Copy(io.Discard, s.Stdout()) }() // drained, as above
	// A short process beside the streamer: its reap, end record and
	// forget come while the neighbour's output flows.
	k, err := kept.Start(ctx, spec.Process{Argv: []string{"sh", "-c", "echo short"}, Stdout: spec.Discard, Stderr: spec.Discard})
	if err != nil {
		return fail(stderr, err, 1)
	}
	if res, err := k.Wait(ctx); err != nil || res.ExitCode != 0 {
		return fail(stderr, fmt.Errorf("the short process ended %+v: %v", res, err), 1) //nolint:errorlint // err is nil when the exit code is what failed: %w would print %!w(<nil>)
	}
	if mode == wardenMode { // a rollback's exchange is the warden binary's
		if err := checkpointAndRollBack(ctx, rt.Runtime, c.image, c.hostile); err != nil {
			return fail(stderr, err, 1)
		}
	}
	// The one-shot sandbox is claimed from the warm pool: wait for it to
	// be ready (a kill may also land in its refill after).
	if err := awaitPoolReady(ctx, rt.Runtime, drillPool); err != nil {
		return fail(stderr, err, 1)
	}
	// Kept: a kill between its claim's journal and the warden's rekey
	// leaves a re-adopted sandbox whose warden refuses the journal's
	// secret (its first launch must be answered, by one new warden).
	once, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: c.image, Lifetime: spec.Kept})
	if err != nil {
		return fail(stderr, err, 1)
	}
	if st, err := once.State(ctx); err != nil || !st.Claimed {
		return fail(stderr, fmt.Errorf("the one-shot sandbox was not claimed from the pool (%+v): %v", st, err), 1) //nolint:errorlint // err is nil when the sandbox was not claimed: %w would print %!w(<nil>)
	}
	q, err := once.Start(ctx, spec.Process{Argv: []string{"true"}, Stdout: spec.Discard, Stderr: spec.Discard})
	if err != nil {
		return fail(stderr, err, 1)
	}
	if _, err := q.Wait(ctx); err != nil {
		return fail(stderr, err, 1)
	}
	r, err := once.Start(ctx, spec.Process{Argv: []string{"sleep", "30"}, Stdout: spec.Discard, Stderr: spec.Discard})
	if err != nil {
		return fail(stderr, err, 1)
	}
	if err := r.Stop(ctx); err != nil {
		return fail(stderr, err, 1)
	}
	if res, _ := r.Wait(ctx); res.Reason != string(lifecycle.ReasonSignaled) {
		return fail(stderr, fmt.Errorf("stopped process ended %+v", res), 1)
	}
	if err := once.Stop(ctx); err != nil {
		return fail(stderr, err, 1)
	}
	if err := once.Remove(ctx); err != nil {
		return fail(stderr, err, 1)
	}
	return 0
}

// checkpointAndRollBack takes a checkpoint of a kept sandbox of its own,
// changes its workspace and rolls it back: a kill in either leaves the old
// workspace or the new one, journaled (the drill's check reads it back).
func checkpointAndRollBack(ctx context.Context, rt *stockade.Runtime, image string, withSurvivor bool) error {
	// A pids limit the drill's pool does not have: a cold create, so the
	// pool's first claim stays the one-shot sandbox's below.
	pol := spec.DefaultPolicy()
	pol.Pids--
	sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: image, Lifetime: spec.Kept, Policy: pol})
	if err != nil {
		return err
	}
	write := func(v string) error {
		p, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", "echo " + v + " > version"}, Stdout: spec.Discard, Stderr: spec.Discard})
		if err != nil {
			return err
		}
		if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 {
			return fmt.Errorf("writing %s ended %+v: %v", v, res, err) //nolint:errorlint // err is nil when the exit code is what failed: %w would print %!w(<nil>)
		}
		return nil
	}
	survive := func() error {
		if !withSurvivor {
			return nil
		}
		p, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", survivor.Script}, Stdout: spec.Discard, Stderr: spec.Discard})
		if err != nil {
			return err
		}
		if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 {
			return fmt.Errorf("starting the hostile survivor ended %+v: %v", res, err) //nolint:errorlint // err is nil when the exit code is what failed: %w would print %!w(<nil>)
		}
		return nil
	}
	if err := write("v1"); err != nil {
		return err
	}
	if err := survive(); err != nil {
		return err
	}
	ck, err := sb.Checkpoint(ctx, "v1")
	if err != nil {
		return err
	}
	if err := write("v2"); err != nil {
		return err
	}
	if err := survive(); err != nil {
		return err
	}
	return sb.Rollback(ctx, ck.ID)
}

// awaitPoolReady waits (a minute at most) until pool has a sandbox ready.
func awaitPoolReady(ctx context.Context, rt *stockade.Runtime, pool string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		ps, err := rt.Pools(ctx)
		if err != nil {
			return err
		}
		for _, p := range ps {
			if p.Name == pool && p.Ready > 0 {
				return nil
			}
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("pool %s: no sandbox ready within a minute: %+v", pool, ps)
		}
	}
}

// claimAndRun claims a one-shot sandbox from the drill's pool, runs true in
// it and removes it.
func claimAndRun(ctx context.Context, rt *stockade.Runtime, image string) error {
	sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: image, Lifetime: spec.OneShot})
	if err != nil {
		return err
	}
	st, err := sb.State(ctx)
	if err == nil && !st.Claimed {
		err = fmt.Errorf("sandbox %s was made cold", sb.ID())
	}
	if err == nil {
		var p *stockade.Process
		if p, err = sb.Start(ctx, spec.Process{Argv: []string{"true"}, Stdout: spec.Discard, Stderr: spec.Discard}); err == nil {
			if res, werr := p.Wait(ctx); werr != nil || res.ExitCode != 0 {
				err = fmt.Errorf("true ended %+v: %v", res, werr) //nolint:errorlint // werr is nil when the exit code is what failed: %w would print %!w(<nil>)
			}
		}
	}
	return errors.Join(err, sb.Remove(ctx))
}
