package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/statedir"
)

const usageUsage = "stockade usage [SANDBOX] [--label KEY=value]... [--since T] [--workspace] [--json]"

// usageCmd prints the usage ledger: what each sandbox picked and its
// processes used, and the sum.
type usageCmd struct {
	g global
	q host.UsageQuery
}

// ledgerReader is an offline journal's ledger (inspect.Reader.Usage).
type ledgerReader interface {
	Usage(ctx context.Context, q host.UsageQuery, recordings string) (host.Usage, error)
}

func parseUsage(g global, args []string) (command, error) {
	c := &usageCmd{g: g}
	fs := newFlags("usage", &c.g)
	fs.Func("label", "a sandbox label the sandboxes must carry (KEY=value, repeatable)", func(v string) error {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return fmt.Errorf("--label %q: want KEY=value", v)
		}
		if c.q.Labels == nil {
			c.q.Labels = map[string]string{}
		}
		c.q.Labels[k] = val
		return nil
	})
	fs.Func("since", "keep the sandboxes live at or after T (RFC 3339, or a duration back from now: 24h)", func(v string) error {
		t, err := parseSince(v, time.Now())
		c.q.Since = t
		return err
	})
	fs.BoolVar(&c.q.Workspace, "workspace", false, "measure each sandbox's /workspace/work (through a server: read as a copy would be)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return nil, err
	}
	switch len(pos) {
	case 0:
	case 1:
		if c.q.Sandbox = pos[0]; c.q.Sandbox == "" {
			return nil, spec.Errorf(spec.CodeInvalidArgument, "usage", "SANDBOX is empty (usage: %s)", usageUsage)
		}
	default:
		return nil, spec.Errorf(spec.CodeInvalidArgument, "usage", "%d arguments: name at most one sandbox (usage: %s)", len(pos), usageUsage)
	}
	return c, nil
}

// parseSince reads --since: a time in RFC 3339, or a duration before now.
func parseSince(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("--since %q: want a time (2026-12-06T10:00:00Z) or a duration back from now (24h)", v)
	}
	return now.Add(-d), nil
}

func (c *usageCmd) execute(ctx context.Context, _ io.Reader, stdout, stderr io.Writer) int {
	if c.q.Workspace {
		// Measuring a workspace reads it through Docker: a runtime does
		// (the server's, else one embedded for the command).
		rt, _, err := connect(ctx, c.g)
		if err != nil {
			return fail(stderr, err, 1)
		}
		defer func() { _ = rt.Close() }() // a client's connection, or the command's runtime: sandboxes stay as they are
		u, err := rt.Usage(ctx, c.q)
		if err != nil {
			return fail(stderr, err, 1)
		}
		return c.print(u, stdout, stderr)
	}
	src, err := openInspector(c.g)
	if err != nil {
		return fail(stderr, err, 1)
	}
	defer func() { _ = src.close() }() // a client's connection or a journal opened read-only: nothing to lose
	var u host.Usage
	switch in := src.in.(type) {
	case host.Runtime:
		u, err = in.Usage(ctx, c.q)
	case ledgerReader:
		u, err = in.Usage(ctx, c.q, statedir.Recordings(src.path))
	default:
		err = spec.Errorf(spec.CodeInternal, "usage", "%s cannot give a usage ledger", src.name)
	}
	if err != nil {
		return fail(stderr, err, 1)
	}
	return c.print(u, stdout, stderr)
}

func (c *usageCmd) print(u host.Usage, stdout, stderr io.Writer) int {
	out := &printer{w: stdout}
	if c.g.json {
		out.keep(newEncoder(out).Encode(u))
	} else {
		renderUsage(out, u, c.q.Sandbox != "", c.q.Workspace)
	}
	if err := out.Err(); err != nil {
		return fail(stderr, err, 1)
	}
	return 0
}

// renderUsage prints a line per sandbox and the total; with processes, a
// line per process under each sandbox.
func renderUsage(out *printer, u host.Usage, processes, workspace bool) {
	if len(u.Sandboxes) == 0 {
		out.printf("no sandbox matches\n")
		return
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	ws := func(w *host.WorkspaceSize) string {
		switch {
		case !workspace:
			return ""
		case w == nil:
			return "-\t"
		}
		return fmt.Sprintf("%s (%d files)\t", humanBytes(w.Bytes), w.Files)
	}
	head := "SANDBOX\tPHASE\tLABELS\tCPU\tMEM PEAK\tMEM GiB·s\tPIDS\tPROCS\tOUTPUT\tEGRESS\t"
	if workspace {
		head += "WORKSPACE\t"
	}
	_, _ = fmt.Fprintf(tw, "%sLEDGER\n", head)
	for _, s := range u.Sandboxes {
		w := s.Workload
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.3f\t%d\t%d\t%s\t%s\t%s%s\n", s.ID, s.Phase, termSafe(labelText(s.Labels)), seconds(w.CPU),
			humanBytes(w.MemoryPeak), w.MemoryGiBSeconds, w.PidsPeak, len(s.Processes), humanBytes(s.OutputBytes), egressText(s), ws(s.Workspace), ledgerText(s))
	}
	t := u.Total
	total := ""
	if workspace {
		total = humanBytes(t.WorkspaceBytes) + "\t"
	}
	_, _ = fmt.Fprintf(tw, "TOTAL (%d)\t\t\t%s\t%s\t%.3f\t\t%d\t%s\t%s\t%s\n", t.Sandboxes, seconds(t.CPU), humanBytes(t.MemoryPeak), t.MemoryGiBSeconds,
		t.Processes, humanBytes(t.OutputBytes), egressText(host.SandboxUsage{EgressAllowed: t.EgressAllowed, EgressDenied: t.EgressDenied, EgressBytes: t.EgressBytes}), total)
	_ = tw.Flush()
	if !processes {
		return
	}
	for _, s := range u.Sandboxes {
		out.printf("\nprocesses of %s:\n", s.ID)
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		_, _ = fmt.Fprintf(tw, "PROCESS\tPROGRAM\tEND\tWALL\tUSER\tSYS\tMAX RSS\tREAD\tWRITTEN\tOUTPUT\tFROM\n")
		for _, p := range s.Processes {
			prog := ""
			if len(p.Argv) > 0 {
				prog = p.Argv[0]
			}
			end := string(p.Phase)
			if p.Reason != "" {
				end = p.Reason
				if p.ExitCode != nil {
					end += fmt.Sprintf(" %d", *p.ExitCode)
				}
			}
			if u := p.Usage; u != nil {
				_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, termSafe(prog), end, seconds(u.Wall), seconds(u.User),
					seconds(u.System), humanBytes(u.MaxRSS), humanBytes(u.ReadBytes), humanBytes(u.WriteBytes), humanBytes(p.Output), u.Source)
			} else {
				_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t-\t-\t-\t%s\t-\n", p.ID, termSafe(prog), end, humanBytes(p.Output))
			}
		}
		_ = tw.Flush()
	}
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.3fs", d.Seconds()) }

func labelText(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+labels[k])
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ",")
}

func egressText(s host.SandboxUsage) string {
	if s.EgressAllowed == 0 && s.EgressDenied == 0 {
		return "-"
	}
	return fmt.Sprintf("%d allowed (%s), %d denied", s.EgressAllowed, humanBytes(s.EgressBytes), s.EgressDenied)
}

// ledgerText says how whole a sandbox's ledger is.
func ledgerText(s host.SandboxUsage) string {
	switch {
	case s.Complete:
		return "complete"
	case s.Ended.IsZero():
		return "running"
	case s.Workload.Unsampled > 0:
		return "partial (" + seconds(s.Workload.Unsampled) + " unsampled)"
	default:
		return "partial"
	}
}

const usageHelp = `usage: ` + usageUsage + `

Prints what sandboxes used, from the journal: each sandbox's workload as
its container's cgroup counted it (CPU time, peak memory, memory integrated
over time in GiB·s, peak tasks), sampled by the runtime from the daemon
every 10 s while it runs and once more as it stops; how many processes ran
and what they wrote; its egress; and the sum. A running sandbox is sampled
for the answer when a server holds the journal. With SANDBOX, each process
follows: its wall, user and system time, peak RSS and block I/O as the
warden's wait4 reported them (FROM rusage), or only its wall time for a
Docker exec (FROM wall).

The ledger holds across restarts: the cgroup's counters are cumulative and
the journal keeps the last sample, so a runtime that re-adopts a sandbox
reads on from where it was. LEDGER says complete (stopped, read at the
stop), running, or partial (its workload died, or stopped with no runtime
to read it, after its last sample: what it used since is not counted).

  --label KEY=value  only sandboxes with this label (repeatable: all must hold)
  --since T          only sandboxes live at or after T (RFC 3339, or 24h back);
                     each is reported whole, not the part after T
  --workspace        measure each sandbox's /workspace/work (not removed ones):
                     read through the export container, as costly as a copy
                     (through the server, else a runtime of the command's own)
  --json             the host.Usage object: {"sandboxes": [...], "total": {...}}

  stockade usage
  stockade usage "$id"
  stockade usage --label batch=nightly --since 24h --json
`
