package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/stockade/stockade/internal/sandboxflag"
	"io"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/warden/link"
)

type runCmd struct {
	g       global
	image   string
	policy  spec.Policy
	proc    spec.Process
	history bool
	// labels are the caller's names for the sandbox (listed while it runs,
	// journaled). run has no --env or --dir: its one process's -e and
	// --workdir say the same.
	labels labelFlag
}

const runUsage = "stockade run [flags] -- CMD..."

func parseRun(g global, args []string) (command, error) {
	c := &runCmd{g: g}
	fs := newFlags("run", &c.g)
	fs.StringVar(&c.image, "image", "stockade/toolbox:dev", "sandbox image (tag or sha256 ID)")
	var pf sandboxflag.Policy
	pf.Register(fs)
	var xf processFlags
	xf.register(fs)
	fs.BoolVar(&c.history, "history", false, "print the sandbox's journaled history after it is removed")
	fs.Var(&c.labels, "label", "KEY=value, the caller's name for the sandbox (repeatable)")
	// Flags stop at the command: what follows it is the command's own.
	if err := fs.Parse(clusters(fs, args)); err != nil {
		return nil, usageError("run", err)
	}
	if c.image == "" {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "run", "--image is empty")
	}
	var err error
	if c.policy, err = pf.Policy(); err != nil {
		return nil, err
	}
	if c.proc, err = xf.process("run", fs.Args(), runUsage); err != nil {
		return nil, err
	}
	if err := (spec.Sandbox{Image: c.image, Policy: c.policy, Lifetime: spec.OneShot, Labels: c.labels}).ValidateUnpinned(); err != nil {
		return nil, spec.Wrap(spec.CodeInvalidArgument, "run", err, "")
	}
	return c, nil
}

// processFlags are a process's flags (run and exec).
type processFlags struct{ p spec.Process }

func (f *processFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.p.Stdin, "i", false, "keep stdin open and pass it to the command")
	fs.BoolVar(&f.p.TTY, "t", false, "run the command on a terminal the size of this one (needs the sandbox's warden)")
	fs.BoolVar(&f.p.TTY, "tty", false, "same as -t")
	fs.DurationVar(&f.p.Timeout, "timeout", 0, "stop the command after this long (0: none)")
	fs.StringVar(&f.p.Dir, "workdir", "", "working directory (default /workspace/work)")
	fs.Var((*multiFlag)(&f.p.Env), "e", "NAME=value added to the environment (repeatable)")
	fs.BoolVar(&f.p.NoChanges, "no-changes", false, "do not track what the command changes under /workspace (stockade diff then says untracked)")
}

// process validates the process with argv, both streams piped.
func (f *processFlags) process(name string, argv []string, usage string) (spec.Process, error) {
	p := f.p
	if p.Argv = argv; len(argv) == 0 {
		return p, spec.Errorf(spec.CodeInvalidArgument, name, "no command given (usage: %s)", usage)
	}
	p.Stdout, p.Stderr = spec.Pipe, spec.Pipe
	return p, p.Validate()
}

func (c *runCmd) execute(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) (code int) {
	rt, _, err := connect(ctx, c.g)
	if err != nil {
		return fail(stderr, err, 125)
	}
	defer closeRuntime(rt, stderr, &code, 125)
	sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: c.image, Policy: c.policy, Lifetime: spec.OneShot, Labels: c.labels})
	if err != nil {
		return fail(stderr, err, 125)
	}
	exit := runIn(ctx, sb, c.proc, stdin, stdout, stderr)
	// Remove even when the caller interrupted us: a one-shot sandbox must not
	// outlive its command.
	rctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := sb.Remove(rctx); err != nil {
		return fail(stderr, err, 125)
	}
	if c.history {
		evs, err := rt.History(rctx, sb.ID())
		if err != nil {
			return fail(stderr, err, 125)
		}
		if err := printHistory(stdout, evs, c.g.json); err != nil {
			return fail(stderr, err, 125)
		}
	}
	return exit
}

// runIn starts the process, wires its streams and returns its exit code.
// With p.TTY the process's terminal takes the local terminal's size and
// follows it, and a local terminal on stdin is raw while -i forwards it
// (localTTY); the terminal is given back its mode on every way out.
func runIn(ctx context.Context, sb host.Sandbox, p spec.Process, stdin io.Reader, stdout, stderr io.Writer) int {
	var tty *localTTY
	if p.TTY {
		tty = newLocalTTY(stdin, stdout, p.Stdin)
		p.Rows, p.Cols = tty.size()
	}
	proc, err := sb.Start(ctx, p)
	if err != nil {
		return fail(stderr, err, startFailure(err))
	}
	if tty != nil {
		defer tty.restore()
		if err := tty.attach(proc); err != nil {
			tty.restore()
			for _, rc := range []io.ReadCloser{proc.Stdout(), proc.Stderr()} {
				if rc != nil {
					_ = rc.Close() // the terminal's error is the one reported
				}
			}
			if err := proc.Stop(context.Background()); err != nil {
				note(stderr, "stopping the process: %s", termSafe(err.Error()))
			}
			return fail(stderr, spec.Wrap(spec.CodeInternal, "cli", err, "putting the terminal into raw mode"), 125)
		}
	}
	// Interrupted (Ctrl-C, SIGTERM): stop the process (TERM, then KILL after
	// the grace) and report how it ended; the caller then removes the
	// sandbox.
	//nolint:gosec // G118: the stop follows ctx's end, so it cannot use ctx; it is bounded by its own timeout.
	go func() {
		select {
		case <-ctx.Done():
		case <-proc.Done():
			return
		}
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := proc.Stop(sctx); err != nil {
			note(stderr, "stopping the process: %s", termSafe(err.Error()))
		}
	}()
	if w := proc.Stdin(); w != nil {
		go func() {
			// A process that ends or closes its stdin ends the copy with an
			// error; the close then says EOF where it still can. How the
			// process ended is what is reported.
			_, _ = io.Copy(w, stdin)
			_ = w.Close()
		}()
	}
	// A read error ends a copy early and is the process's: Wait reports
	// how it ended. A write error is ours, told apart by the printers.
	errOut, out := &printer{w: stderr}, &printer{w: stdout}
	errDone := make(chan struct{})
	go func() {
		_, _ = io.Copy(errOut, proc.Stderr())
		close(errDone)
	}()
	_, _ = io.Copy(out, proc.Stdout())
	<-errDone
	for _, p := range []*printer{out, errOut} {
		if err := p.Err(); err != nil {
			note(stderr, "%s", termSafe(err.Error()))
		}
	}
	if tty != nil {
		tty.restore() // before any message: a raw terminal would garble it
	}
	res, err := proc.Wait(context.Background())
	switch {
	case err == nil && res.Reason == string(lifecycle.ReasonOOM):
		note(stderr, "the process was killed by the kernel's OOM killer (the sandbox's memory limit)")
		return res.ExitCode
	case err == nil:
		return res.ExitCode
	case spec.IsCode(err, spec.CodeExecFailed):
		if res.ExitCode == 126 || res.ExitCode == 127 {
			return fail(stderr, err, res.ExitCode)
		}
		return fail(stderr, err, notStarted(err))
	case res.ExitCode >= 0:
		note(stderr, "process ended: %s: %s", res.Reason, termSafe(err.Error()))
		return res.ExitCode
	}
	return fail(stderr, err, 125)
}

// startFailure is the exit code for a failed Start: 126 or 127 when the
// command could not be started (notStarted), 125 when stockade failed.
func startFailure(err error) int {
	if spec.IsCode(err, spec.CodeExecFailed) {
		return notStarted(err)
	}
	return 125
}

// notStartedText finds the code in an exec_failed error's text: the
// warden's "spawn failed with 126", Docker's "exit 126" (see
// dockerio.ExecFailure). The leftmost match is stockade's own words; the
// command's name comes after them.
var notStartedText = regexp.MustCompile(`\b(?:spawn failed with|exit) (12[67])\b`)

// notStarted is the exit code for a command that could not start, as a
// shell has it: 126 found but not executable, 127 not found. Embedded, the
// warden's *link.SpawnError carries the code; through a server only the
// error's text arrives, which says it too. Anything else is 127.
func notStarted(err error) int {
	var se *link.SpawnError
	if errors.As(err, &se) && (se.Code == 126 || se.Code == 127) {
		return se.Code
	}
	if m := notStartedText.FindStringSubmatch(err.Error()); m != nil && m[1] == "126" {
		return 126
	}
	return 127
}

// printHistory prints one line per event: its time, the time since the
// event before it, the entity, the sequence, the type and a summary.
func printHistory(w io.Writer, evs []host.HistoryEvent, asJSON bool) error {
	p := historyPrinter{w: w, json: asJSON}
	for _, e := range evs {
		if err := p.print(e); err != nil {
			return err
		}
	}
	return nil
}

// historyPrinter prints events one by one (a live follow), each with the
// time since the one before.
type historyPrinter struct {
	w    io.Writer
	json bool
	prev time.Time
}

func (p *historyPrinter) print(e host.HistoryEvent) error {
	if p.json {
		if err := newEncoder(p.w).Encode(e); err != nil {
			return outputError(err)
		}
		return nil
	}
	delta := ""
	if !p.prev.IsZero() {
		delta = "+" + e.Time.Sub(p.prev).Round(time.Millisecond).String()
	}
	p.prev = e.Time
	if _, err := fmt.Fprintf(p.w, "%s %8s  %-7s %s #%-2d %-21s %s\n", e.Time.Format("15:04:05.000"), delta, e.Kind, e.ID, e.Seq, e.Type, termSafe(summary(e))); err != nil {
		return outputError(err)
	}
	return nil
}

// summary says in a few words what an event carries; the full payload is in
// --json and `journal export`.
func summary(e host.HistoryEvent) string {
	ev, err := lifecycle.Decode(e.Type, e.Payload)
	if err != nil {
		return "(undecodable: " + err.Error() + ")"
	}
	code := func(c *int) string {
		if c == nil {
			return "no code"
		}
		return fmt.Sprintf("code %d", *c)
	}
	why := func(msg string) string {
		if msg == "" {
			return ""
		}
		return ": " + short(msg, 100)
	}
	switch v := ev.(type) {
	case lifecycle.SandboxReserved:
		p := v.Spec.Policy
		network := string(p.Network)
		if p.Network == spec.NetworkAllowlist {
			network = "allow=" + short(spec.FormatEgressRules(p.Egress), 60)
		}
		return fmt.Sprintf("%s, %s, %g cpu, %d MiB, %d pids, %s, user %s", short(v.Spec.Image, 19), v.Spec.Lifetime, p.CPUs, p.MemoryBytes>>20, p.Pids, network, p.User)
	case lifecycle.SandboxCreated:
		if v.Egress != "" {
			return fmt.Sprintf("workload %s, export %s, volume %s, egress %s (proxy %s)", short(v.Workload, 12), short(v.Export, 12), v.Volume, short(v.Egress, 12), v.Proxy)
		}
		return fmt.Sprintf("workload %s, export %s, volume %s", short(v.Workload, 12), short(v.Export, 12), v.Volume)
	case lifecycle.EgressChanged:
		return "allow=" + short(spec.FormatEgressRules(v.Rules), 100)
	case lifecycle.EgressReplaced:
		return fmt.Sprintf("egress %s: %s", short(v.Egress, 12), short(v.Reason, 80))
	case lifecycle.Checkpointed:
		name := ""
		if v.Name != "" {
			name = " (" + v.Name + ")"
		}
		return fmt.Sprintf("%s%s, %d entries, %s", v.ID, name, v.Files, humanBytes(v.Bytes))
	case lifecycle.RollingBack:
		return fmt.Sprintf("to %s, staged in /workspace/%s", v.Checkpoint, v.Staging)
	case lifecycle.RolledBack:
		return "to " + v.Checkpoint
	case lifecycle.RollbackAbandoned:
		return fmt.Sprintf("to %s%s", v.Checkpoint, why(v.Why))
	case lifecycle.Restored:
		return "from " + v.Checkpoint
	case lifecycle.SandboxStopping:
		return string(v.Reason)
	case lifecycle.SandboxExited:
		oom := ""
		if v.OOM {
			oom = ", OOM-killed"
		}
		return fmt.Sprintf("%s, %s%s%s", v.Reason, code(v.ExitCode), oom, why(v.Message))
	case lifecycle.ProcessReserved:
		return short(strings.Join(v.Spec.Argv, " "), 80)
	case lifecycle.ExecCreated:
		return "exec " + short(v.ExecID, 12)
	case lifecycle.ProcessStarted:
		if v.ByWarden {
			return fmt.Sprintf("pid %d, process group %d, by the warden", v.PID, v.Group)
		}
		return fmt.Sprintf("process group %d", v.Group)
	case lifecycle.WardenStarted:
		// The secret stays out of the view (it is in the export).
		return fmt.Sprintf("pid %d, %s, socket %s", v.PID, v.Version, v.Socket)
	case lifecycle.WardenLost:
		return short(v.Reason, 100)
	case lifecycle.QuotaHit:
		return fmt.Sprintf("%d bytes", v.Bytes)
	case lifecycle.ProcessStopping:
		return string(v.Reason)
	case lifecycle.ProcessExited:
		used := ""
		if u := v.Usage; u != nil && u.Source == spec.UsageRusage {
			used = fmt.Sprintf(", %.3fs cpu, %s rss", u.CPU().Seconds(), humanBytes(u.MaxRSS))
		}
		return fmt.Sprintf("%s, %s, %d B out, %d B err%s%s", v.Reason, code(v.ExitCode), v.StdoutBytes, v.StderrBytes, used, why(v.Message))
	case lifecycle.UsageSampled:
		end := ""
		if v.RunEnded {
			end = ", at the stop"
		}
		return fmt.Sprintf("%.3fs cpu, peak %s, %.4f GiB·s, %d samples%s", v.Usage.CPU.Seconds(), humanBytes(v.Usage.MemoryPeak), v.Usage.MemoryGiBSeconds, v.Usage.Samples, end)
	case lifecycle.OutputGap:
		return fmt.Sprintf("%d bytes of output lost at offset %d (to %d): %s", v.To-v.From, v.From, v.To, short(v.Why, 100))
	case lifecycle.Recovered:
		return v.Decision + " — " + short(v.Observed, 100)
	case lifecycle.Adopted:
		if v.Detached {
			return "detached"
		}
	}
	return ""
}

// short cuts s to n characters, marking the cut.
func short(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) <= n {
		return s
	}
	// Cut on a rune's start: half a rune is invalid UTF-8, which the
	// terminal escaping (termSafe) would show as such.
	cut := n - 1
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
