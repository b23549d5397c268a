package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	stockade "github.com/stockade/stockade"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/spec"
)

// poolUsage is each pool subcommand's usage line.
var poolUsage = map[string]string{
	"ls":     "stockade pool ls [--json]",
	"resize": "stockade pool resize NAME N",
}

// poolCmd is `stockade pool ls|resize`: the warm pools of a running
// server (configured by `stockade serve --pool`). Pools live in a server:
// an embedded command's runtime has none, so both need one.
type poolCmd struct {
	g    global
	sub  string
	name string
	size int
}

func parsePool(g global, args []string) (command, error) {
	c := &poolCmd{g: g}
	fs := newFlags("pool", &c.g)
	if err := fs.Parse(args); err != nil {
		return nil, usageError("pool", err)
	}
	if fs.NArg() == 0 {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "pool", "no subcommand given (ls or resize)")
	}
	c.sub, args = fs.Arg(0), fs.Args()[1:]
	line, ok := poolUsage[c.sub]
	if !ok {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "pool", "unknown subcommand %q (ls or resize)", c.sub)
	}
	name := "pool " + c.sub
	pos, err := parseArgs(newFlags(name, &c.g), args)
	if err != nil {
		return nil, err
	}
	if c.sub == "ls" {
		return c, wantArgs(name, pos, 0, line)
	}
	if err := wantArgs(name, pos, 2, line); err != nil {
		return nil, err
	}
	if err := stockade.CheckPoolName(pos[0]); err != nil {
		return nil, spec.Wrap(spec.CodeInvalidArgument, name, err, "")
	}
	c.name = pos[0]
	if c.size, err = strconv.Atoi(pos[1]); err != nil || c.size < 0 || c.size > stockade.MaxPoolSize {
		return nil, spec.Errorf(spec.CodeInvalidArgument, name, "size %q is not a number from 0 to %d (usage: %s)", pos[1], stockade.MaxPoolSize, line)
	}
	return c, nil
}

func (c *poolCmd) execute(ctx context.Context, _ io.Reader, stdout, stderr io.Writer) (code int) {
	cl := dial(c.g)
	if cl == nil {
		return fail(stderr, needServer("pool "+c.sub+" (pools live in `stockade serve --pool`)"), 1)
	}
	defer closeRuntime(cl, stderr, &code, 1)
	out := &printer{w: stdout}
	switch c.sub {
	case "ls":
		list, err := cl.Pools(ctx)
		if err != nil {
			return fail(stderr, err, 1)
		}
		printPools(out, list, c.g.json)
	case "resize":
		if err := cl.ResizePool(ctx, c.name, c.size); err != nil {
			return fail(stderr, err, 1)
		}
		out.printf("%s: size=%d\n", c.name, c.size)
	}
	if err := out.Err(); err != nil {
		return fail(stderr, err, 1)
	}
	return 0
}

// printPools prints one line a pool; the LAST ERROR column only when a
// pool has one (a refill's failure: Docker's words, escaped).
func printPools(w *printer, list []host.PoolInfo, asJSON bool) {
	if asJSON {
		enc := newEncoder(w)
		for _, p := range list {
			w.keep(enc.Encode(p))
		}
		return
	}
	errs := false
	for _, p := range list {
		errs = errs || p.LastError != ""
	}
	// The table's write errors are w's (Flush reports them too).
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "NAME\tSIZE\tREADY\tFILLING\tWARM\tCOLD\tFAILURES\tIMAGE"
	if errs {
		head += "\tLAST ERROR"
	}
	_, _ = fmt.Fprintln(tw, head)
	for _, p := range list {
		_, _ = fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s", p.Name, p.Size, p.Ready, p.Filling, p.Warm, p.Cold, p.Failures, short(p.Image, 19))
		if errs {
			_, _ = fmt.Fprintf(tw, "\t%s", termSafe(short(p.LastError, 100)))
		}
		_, _ = fmt.Fprintln(tw)
	}
	w.keep(tw.Flush())
}
