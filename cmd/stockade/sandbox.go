package main

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/stockade/stockade/internal/sandboxflag"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// sandboxUsage is each sandbox subcommand's usage line.
var sandboxUsage = map[string]string{
	"create":  "stockade sandbox create [policy flags] [--ttl D] [--image I] [--env NAME=value]... [--dir D] [--label KEY=value]... [--from CHECKPOINT]",
	"ls":      "stockade sandbox ls [--all] [--json]",
	"inspect": "stockade sandbox inspect ID [--json]",
	"stop":    "stockade sandbox stop ID",
	"rm":      "stockade sandbox rm [-f] ID",
	"network": "stockade sandbox network ID allow=RULE[,RULE...]",
}

type sandboxCmd struct {
	g      global
	sub    string
	id     string
	image  string
	policy spec.Policy
	ttl    time.Duration
	force  bool
	rules  []spec.EgressRule // network: the new allowlist
	// create: the sandbox's defaults for every process, and its labels.
	env    []string
	from   string
	dir    string
	labels labelFlag
	all    bool // ls: pooled sandboxes too
}

func parseSandbox(g global, args []string) (command, error) {
	c := &sandboxCmd{g: g}
	fs := newFlags("sandbox", &c.g)
	if err := fs.Parse(args); err != nil {
		return nil, usageError("sandbox", err)
	}
	if fs.NArg() == 0 {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "sandbox", "no subcommand given (create, ls, inspect, stop, rm or network)")
	}
	c.sub, args = fs.Arg(0), fs.Args()[1:]
	line, ok := sandboxUsage[c.sub]
	if !ok {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "sandbox", "unknown subcommand %q (create, ls, inspect, stop, rm or network)", c.sub)
	}
	name := "sandbox " + c.sub
	fs = newFlags(name, &c.g)
	var pf sandboxflag.Policy
	switch c.sub {
	case "create":
		fs.StringVar(&c.image, "image", "stockade/toolbox:dev", "sandbox image (tag or sha256 ID)")
		fs.DurationVar(&c.ttl, "ttl", 0, "stop the sandbox this long after creation (needs stockade serve)")
		fs.Var((*multiFlag)(&c.env), "env", "NAME=value in every process's environment (repeatable; a process's own -e wins)")
		fs.StringVar(&c.dir, "dir", "", "every process's default working directory (default /workspace/work)")
		fs.Var(&c.labels, "label", "KEY=value, the caller's name for the sandbox (repeatable; listed by sandbox ls --json)")
		fs.StringVar(&c.from, "from", "", "start with a checkpoint's workspace (its ck-… id; its env and dir unless given)")
		pf.Register(fs)
	case "ls":
		fs.BoolVar(&c.all, "all", false, "list the warm pools' pooled sandboxes too")
	case "rm":
		fs.BoolVar(&c.force, "f", false, "stop the sandbox first if it runs")
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return nil, err
	}
	n := 1
	switch c.sub {
	case "create", "ls":
		n = 0
	case "network":
		n = 2
	}
	if err := wantArgs(name, pos, n, line); err != nil {
		return nil, err
	}
	if n >= 1 {
		if c.id = pos[0]; c.id == "" {
			return nil, spec.Errorf(spec.CodeInvalidArgument, name, "the id is empty (usage: %s)", line)
		}
	}
	if c.sub == "network" {
		kind, rules, err := spec.ParseNetwork(pos[1])
		if err != nil {
			return nil, err
		}
		if kind != spec.NetworkAllowlist {
			return nil, spec.Errorf(spec.CodeInvalidArgument, name, "%q: only an allowlist's rules change on a running sandbox (its network kind is fixed at create); usage: %s", pos[1], line)
		}
		c.rules = rules
	}
	if c.sub == "create" {
		if c.image == "" {
			return nil, spec.Errorf(spec.CodeInvalidArgument, name, "--image is empty")
		}
		if c.ttl < 0 {
			return nil, spec.Errorf(spec.CodeInvalidArgument, name, "--ttl %v is negative", c.ttl)
		}
		if c.policy, err = pf.Policy(); err != nil {
			return nil, err
		}
		// The env, dir and labels as the runtime will judge them.
		if err := c.spec().ValidateUnpinned(); err != nil {
			return nil, spec.Wrap(spec.CodeInvalidArgument, name, err, "")
		}
	}
	return c, nil
}

// spec is what create asks for, as the runtime checks it.
func (c *sandboxCmd) spec() spec.Sandbox {
	return spec.Sandbox{Image: c.image, Policy: c.policy, Lifetime: spec.Kept, TTL: c.ttl, Env: c.env, Dir: c.dir, Labels: c.labels, From: c.from}
}

// labelFlag is a repeatable KEY=value flag; a key given twice is refused
// (which value was meant is not ours to guess).
type labelFlag map[string]string

func (l *labelFlag) String() string { return fmt.Sprint(map[string]string(*l)) }

func (l *labelFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("label %q is not KEY=value", v)
	}
	if *l == nil {
		*l = labelFlag{}
	}
	if _, dup := (*l)[k]; dup {
		return fmt.Errorf("label %q is given twice", k)
	}
	(*l)[k] = val
	return nil
}

// needServer is the error of a command that needs a living runtime.
func needServer(what string) error {
	return spec.Errorf(spec.CodeUnsupported, "cli", "%s needs a living runtime: start `stockade serve` (an embedded command's runtime ends with it)", what)
}

func (c *sandboxCmd) execute(ctx context.Context, _ io.Reader, stdout, stderr io.Writer) (code int) {
	if c.ttl > 0 && !serverAnswers(c.g) {
		// Without a server the TTL would have nobody to enforce it; said
		// before an embedded runtime would recover anything.
		return fail(stderr, needServer("sandbox create --ttl"), 1)
	}
	rt, _, err := connect(ctx, c.g)
	if err != nil {
		return fail(stderr, err, 1)
	}
	defer closeRuntime(rt, stderr, &code, 1)
	out := &printer{w: stdout}
	switch c.sub {
	case "create":
		sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: c.image, Policy: c.policy, Lifetime: spec.Kept, TTL: c.ttl,
			Env: c.env, Dir: c.dir, Labels: c.labels, From: c.from})
		if err != nil {
			return fail(stderr, err, 1)
		}
		out.println(sb.ID())
	case "ls":
		list, err := rt.Sandboxes(ctx)
		if err != nil {
			return fail(stderr, err, 1)
		}
		if !c.all {
			// A pool's sandbox is the runtime's until a claim (pooled,
			// or being made or removed for its pool): not the caller's
			// to use or remove, so not listed unless asked.
			list = slices.DeleteFunc(list, func(s host.SandboxInfo) bool { return s.Pool != "" && !s.Claimed })
		}
		printSandboxes(out, list, c.g.json)
	case "inspect":
		sb, err := rt.Sandbox(ctx, c.id)
		if err != nil {
			return fail(stderr, err, 1)
		}
		st, err := sb.State(ctx)
		if err != nil {
			return fail(stderr, err, 1)
		}
		printState(out, st, c.g.json)
	case "network":
		sb, err := rt.Sandbox(ctx, c.id)
		if err != nil {
			return fail(stderr, err, 1)
		}
		if err := sb.SetEgress(ctx, c.rules); err != nil {
			return fail(stderr, err, 1)
		}
		out.printf("%s: allow=%s\n", c.id, spec.FormatEgressRules(c.rules))
	case "stop", "rm":
		sb, err := rt.Sandbox(ctx, c.id)
		if err != nil {
			return fail(stderr, err, 1)
		}
		if c.sub == "stop" {
			err = sb.Stop(ctx)
		} else {
			err = c.remove(ctx, sb)
		}
		if err != nil {
			return fail(stderr, err, 1)
		}
		out.println(c.id)
	}
	if err := out.Err(); err != nil {
		return fail(stderr, err, 1)
	}
	return 0
}

// remove deletes a sandbox; one still running only with -f, as docker rm.
func (c *sandboxCmd) remove(ctx context.Context, sb host.Sandbox) error {
	if !c.force {
		st, err := sb.State(ctx)
		if err != nil {
			return err
		}
		if st.Phase == lifecycle.PhaseStarted || st.Phase == lifecycle.PhaseStopping {
			return spec.Errorf(spec.CodeConflict, "sandbox rm", "sandbox %s is %s: stop it first, or rm -f", c.id, st.Phase)
		}
	}
	return sb.Remove(ctx)
}

func printSandboxes(w *printer, list []host.SandboxInfo, asJSON bool) {
	if asJSON {
		// Labels are the caller's text: escaped as every --json is.
		enc := newEncoder(w)
		for _, s := range list {
			w.keep(enc.Encode(s))
		}
		return
	}
	// The table's write errors are w's (Flush reports them too).
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "ID\tPHASE\tLIFETIME\tPROCESSES\tPOOL\tIMAGE\tRESERVED")
	for _, s := range list {
		phase := string(s.Phase)
		if s.Unreconciled {
			phase += " (unreconciled)"
		}
		pool := s.Pool
		if pool == "" {
			pool = "-"
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", s.ID, phase, s.Lifetime, len(s.Processes), pool, short(s.Image, 19), s.Reserved.Format(time.RFC3339))
	}
	w.keep(tw.Flush())
}

func printState(w *printer, st lifecycle.Sandbox, asJSON bool) {
	if asJSON {
		w.keep(json.NewEncoder(w).Encode(st))
		return
	}
	p := st.Spec.Policy
	w.printf("id:        %s\nphase:     %s\nlifetime:  %s\nimage:     %s\n", st.ID, st.Phase, st.Spec.Lifetime, st.Spec.Image)
	w.printf("policy:    %g cpu, %d MiB, %d pids, %s, user %s\n", p.CPUs, p.MemoryBytes>>20, p.Pids, p.Network, p.User)
	if c := st.Created; c != nil {
		w.printf("workload:  %s\nexport:    %s\nvolume:    %s\n", c.Workload, c.Export, c.Volume)
	}
	if !st.Deadline.IsZero() {
		w.printf("deadline:  %s\n", st.Deadline.Format(time.RFC3339))
	}
	if st.Exit != nil {
		w.printf("exit:      %s\n", st.Exit.Reason)
	}
	var flags []string
	if st.Adopted {
		flags = append(flags, "re-adopted")
	}
	if st.Paused {
		flags = append(flags, "paused")
	}
	if len(flags) > 0 {
		w.printf("state:     %s\n", strings.Join(flags, ", "))
	}
	w.printf("reserved:  %s\njournal:   seq %d at %s\n", st.Reserved.Format(time.RFC3339Nano), st.Seq, st.At.Format(time.RFC3339Nano))
}

type execCmd struct {
	g      global
	id     string
	proc   spec.Process
	detach bool
}

const execUsage = "stockade exec [-i] [-t] [-d] [-e NAME=value] [--workdir D] [--timeout D] [--no-changes] ID -- CMD..."

func parseExec(g global, args []string) (command, error) {
	c := &execCmd{g: g}
	fs := newFlags("exec", &c.g)
	var xf processFlags
	xf.register(fs)
	fs.BoolVar(&c.detach, "d", false, "start the command detached and print its process id (needs stockade serve)")
	if err := fs.Parse(clusters(fs, args)); err != nil {
		return nil, usageError("exec", err)
	}
	rest := fs.Args()
	if len(rest) == 0 || rest[0] == "" {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "exec", "no sandbox id given (usage: %s)", execUsage)
	}
	c.id, rest = rest[0], rest[1:]
	if len(rest) > 0 && rest[0] == "--" {
		rest = rest[1:]
	}
	var err error
	if c.proc, err = xf.process("exec", rest, execUsage); err != nil {
		return nil, err
	}
	if c.detach && c.proc.Stdin {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "exec", "-i and -d together: a detached process has nobody to read stdin from")
	}
	if c.detach && c.proc.TTY {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "exec", "-t and -d together: a detached process's terminal has nobody to show it or to resize it")
	}
	return c, nil
}

func (c *execCmd) execute(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) (code int) {
	if c.detach && !serverAnswers(c.g) {
		return fail(stderr, needServer("exec -d"), 125)
	}
	rt, sb, _, err := openSandbox(ctx, c.g, c.id)
	if err != nil {
		return fail(stderr, err, 125)
	}
	defer closeRuntime(rt, stderr, &code, 125)
	if !c.detach {
		return runIn(ctx, sb, c.proc, stdin, stdout, stderr)
	}
	d, ok := sb.(detacher)
	if !ok {
		return fail(stderr, needServer("exec -d"), 125)
	}
	id, err := d.StartDetached(ctx, c.proc)
	if err != nil {
		return fail(stderr, err, startFailure(err))
	}
	if _, err := fmt.Fprintln(stdout, id); err != nil {
		return fail(stderr, outputError(err), 125)
	}
	return 0
}
