package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/spec"
)

// checkpointUsage is each form's usage line.
var checkpointUsage = map[string]string{
	"take": "stockade checkpoint SANDBOX [NAME]",
	"ls":   "stockade checkpoint ls [SANDBOX] [--json]",
	"rm":   "stockade checkpoint rm CHECKPOINT",
}

// checkpointCmd is `stockade checkpoint SANDBOX [NAME]` (take one),
// `checkpoint ls [SANDBOX]` and `checkpoint rm ID`: the workspace
// checkpoints in the store beside the journal.
type checkpointCmd struct {
	g    global
	sub  string // take, ls, rm
	id   string // the sandbox (take, ls) or the checkpoint (rm)
	name string
}

func parseCheckpoint(g global, args []string) (command, error) {
	c := &checkpointCmd{g: g}
	pos, err := parseArgs(newFlags("checkpoint", &c.g), args)
	if err != nil {
		return nil, err
	}
	if len(pos) == 0 {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "checkpoint", "no sandbox given (usage: %s)", checkpointUsage["take"])
	}
	switch pos[0] {
	case "ls":
		c.sub = "ls"
		if len(pos) > 2 {
			return nil, spec.Errorf(spec.CodeInvalidArgument, "checkpoint ls", "too many arguments (usage: %s)", checkpointUsage["ls"])
		}
		if len(pos) == 2 {
			c.id = pos[1]
		}
		return c, nil
	case "rm":
		c.sub = "rm"
		if err := wantArgs("checkpoint rm", pos[1:], 1, checkpointUsage["rm"]); err != nil {
			return nil, err
		}
		if c.id = pos[1]; !spec.IsCheckpointID(c.id) {
			return nil, spec.Errorf(spec.CodeInvalidArgument, "checkpoint rm", "%q is not a checkpoint id (ck-…)", c.id)
		}
		return c, nil
	}
	c.sub = "take"
	if len(pos) > 2 {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "checkpoint", "too many arguments (usage: %s)", checkpointUsage["take"])
	}
	if c.id = pos[0]; c.id == "" {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "checkpoint", "the sandbox id is empty")
	}
	if len(pos) == 2 {
		c.name = pos[1]
	}
	return c, nil
}

func (c *checkpointCmd) execute(ctx context.Context, _ io.Reader, stdout, stderr io.Writer) (code int) {
	rt, _, err := connect(ctx, c.g)
	if err != nil {
		return fail(stderr, err, 1)
	}
	defer closeRuntime(rt, stderr, &code, 1)
	out := &printer{w: stdout}
	switch c.sub {
	case "take":
		sb, err := rt.Sandbox(ctx, c.id)
		if err != nil {
			return fail(stderr, err, 1)
		}
		info, err := sb.Checkpoint(ctx, c.name)
		if err != nil {
			return fail(stderr, err, 1)
		}
		if c.g.json {
			out.keep(newEncoder(out).Encode(info))
		} else {
			out.println(info.ID)
			for _, s := range info.Skipped {
				// Said where it is seen: a rollback to it will not have it.
				note(stderr, "checkpoint %s: skipped %s", info.ID, termSafe(s))
			}
		}
	case "ls":
		list, err := rt.Checkpoints(ctx, c.id)
		if err != nil {
			return fail(stderr, err, 1)
		}
		printCheckpoints(out, list, c.g.json)
	case "rm":
		if err := rt.RemoveCheckpoint(ctx, c.id); err != nil {
			return fail(stderr, err, 1)
		}
	}
	if err := out.Err(); err != nil {
		return fail(stderr, err, 1)
	}
	return 0
}

// printCheckpoints prints one line a checkpoint.
func printCheckpoints(w *printer, list []host.CheckpointInfo, asJSON bool) {
	if asJSON {
		enc := newEncoder(w)
		for _, ck := range list {
			w.keep(enc.Encode(ck))
		}
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "ID\tNAME\tSANDBOX\tCREATED\tFILES\tBYTES")
	for _, ck := range list {
		name := ck.Name
		if name == "" {
			name = "-"
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", ck.ID, termSafe(name), ck.Sandbox, ck.Created.UTC().Format(time.RFC3339), ck.Files, humanBytes(ck.Bytes))
	}
	w.keep(tw.Flush())
}

// rollbackCmd is `stockade rollback SANDBOX CHECKPOINT`.
type rollbackCmd struct {
	g       global
	id, ckp string
}

const rollbackUsage = "stockade rollback SANDBOX CHECKPOINT"

func parseRollback(g global, args []string) (command, error) {
	c := &rollbackCmd{g: g}
	pos, err := parseArgs(newFlags("rollback", &c.g), args)
	if err != nil {
		return nil, err
	}
	if err := wantArgs("rollback", pos, 2, rollbackUsage); err != nil {
		return nil, err
	}
	c.id, c.ckp = pos[0], pos[1]
	if c.id == "" || c.ckp == "" {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "rollback", "an empty argument (usage: %s)", rollbackUsage)
	}
	return c, nil
}

func (c *rollbackCmd) execute(ctx context.Context, _ io.Reader, stdout, stderr io.Writer) (code int) {
	rt, _, err := connect(ctx, c.g)
	if err != nil {
		return fail(stderr, err, 1)
	}
	defer closeRuntime(rt, stderr, &code, 1)
	sb, err := rt.Sandbox(ctx, c.id)
	if err != nil {
		return fail(stderr, err, 1)
	}
	if err := sb.Rollback(ctx, c.ckp); err != nil {
		return fail(stderr, err, 1)
	}
	return 0
}
