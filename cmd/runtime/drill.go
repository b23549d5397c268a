package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/internal/failpoint"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

type drillCmd struct {
	g      global
	points []string
	random int
	image  string
	seed   uint64
	dir    string
}

func parseDrill(g global, args []string) (command, error) {
	c := &drillCmd{g: g}
	fs := newFlags("drill", &c.g)
	points := fs.String("failpoints", strings.Join(failpoint.All, ","), "comma-separated failpoints to arm in turn")
	fs.IntVar(&c.random, "random", 0, "also run N drills killing the child at a random moment")
	fs.StringVar(&c.image, "image", "stockade/toolbox:dev", "sandbox image")
	fs.Uint64Var(&c.seed, "seed", uint64(time.Now().UnixNano()), "seed for --random")
	fs.StringVar(&c.dir, "dir", "", "keep the drills' journals in this directory (default: a temporary one, deleted)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return nil, err
	}
	if err := wantArgs("drill", pos, 0, "stockade drill [--failpoints a,b] [--random N]"); err != nil {
		return nil, err
	}
	if *points != "" {
		for _, fp := range strings.Split(*points, ",") {
			fp = strings.TrimSpace(fp)
			if !slices.Contains(failpoint.All, fp) {
				return nil, spec.Errorf(spec.CodeInvalidArgument, "drill", "--failpoints: unknown failpoint %q", fp)
			}
			c.points = append(c.points, fp)
		}
	}
	if c.random < 0 {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "drill", "--random %d is negative", c.random)
	}
	if c.image == "" {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "drill", "--image is empty")
	}
	return c, nil
}

// execute runs crash drills against the local daemon: for each failpoint (or
// at random moments) a child runtime runs a workload and is SIGKILLed; a new
// runtime recovers the journal; the invariants are checked. It prints a table
// and exits 1 on any violation.
func (c *drillCmd) execute(ctx context.Context, _ io.Reader, stdout, stderr io.Writer) int {
	self, err := os.Executable()
	if err != nil {
		return fail(stderr, err, 1)
	}
	dir := c.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "stockade-drill-"); err != nil {
			return fail(stderr, err, 1)
		}
		defer os.RemoveAll(dir)
	}
	d := &driller{self: self, dir: dir, image: c.image, profile: c.g.profile, stderr: stderr}

	// A foreign runtime's kept sandbox: no drill may touch it.
	foreign, err := d.foreign(ctx)
	if err != nil {
		return fail(stderr, fmt.Errorf("drill: making the foreign owner's sandbox: %w", err), 1)
	}
	defer d.cleanupForeign(foreign)

	var runs []drillRun
	for _, fp := range c.points {
		runs = append(runs, d.run(ctx, fp, 0, foreign))
	}
	rng := rand.New(rand.NewPCG(c.seed, 0))
	for i := range c.random {
		delay := time.Duration(rng.Int64N(int64(2 * time.Second)))
		r := d.run(ctx, "", delay, foreign)
		r.Failpoint = fmt.Sprintf("random#%d@%v", i+1, delay.Round(time.Millisecond))
		runs = append(runs, r)
	}
	bad := 0
	if c.g.json {
		enc := json.NewEncoder(stdout)
		for _, r := range runs {
			enc.Encode(r)
		}
	} else {
		fmt.Fprintf(stdout, "%-26s %-12s %-10s %-s\n", "FAILPOINT", "CHILD", "RECOVERY", "OUTCOME")
	}
	for _, r := range runs {
		if len(r.Violations) > 0 {
			bad++
		}
		if c.g.json {
			continue
		}
		outcome := "ok: " + strings.Join(r.Decisions, "; ")
		if len(r.Violations) > 0 {
			outcome = "VIOLATION: " + strings.Join(r.Violations, "; ")
		}
		fmt.Fprintf(stdout, "%-26s %-12s %-10s %s\n", r.Failpoint, r.Child, r.Recovery.Round(time.Millisecond), outcome)
	}
	if bad > 0 {
		fmt.Fprintf(stderr, "stockade drill: %d of %d drills violated an invariant\n", bad, len(runs))
		return 1
	}
	fmt.Fprintf(stdout, "%d drills, no violation\n", len(runs))
	return 0
}

type driller struct {
	self, dir, image, profile string
	stderr                    io.Writer
	n                         int
}

type drillRun struct {
	Failpoint  string        `json:"failpoint"`
	Child      string        `json:"child"`
	Recovery   time.Duration `json:"recovery_ns"`
	Decisions  []string      `json:"decisions"`
	Violations []string      `json:"violations,omitempty"`
}

// orphan makes a sandbox's resources under the journal's owner, with an id
// the journal does not know.
func (d *driller) orphan(ctx context.Context, jpath string) error {
	j, err := journal.Open(jpath, journal.Options{ReadOnly: true})
	if err != nil {
		return err
	}
	owner := j.Owner()
	j.Close()
	a, err := dockerio.NewAdapter(dockerio.Options{Profile: d.profile})
	if err != nil {
		return err
	}
	defer a.Close()
	if _, err := a.Preflight(ctx); err != nil {
		return err
	}
	image, err := a.ResolveImage(ctx, d.image)
	if err != nil {
		return err
	}
	id, _ := journal.NewID()
	_, err = a.CreateSandbox(ctx, dockerio.SandboxRequest{Owner: owner, ID: id,
		Spec: spec.Sandbox{Image: image, Policy: spec.DefaultPolicy(), Lifetime: spec.OneShot}})
	return err
}

// foreignOwner is a kept sandbox of another journal (another owner).
type foreignOwner struct {
	journal string
	owner   string
	before  []string
}

func (d *driller) open(ctx context.Context, path string) (*stockade.Runtime, error) {
	return stockade.Open(ctx, stockade.Options{Journal: path, Profile: d.profile, StopGrace: time.Second})
}

func (d *driller) foreign(ctx context.Context) (foreignOwner, error) {
	f := foreignOwner{journal: filepath.Join(d.dir, "foreign.db")}
	rt, err := d.open(ctx, f.journal)
	if err != nil {
		return f, err
	}
	defer rt.Close()
	f.owner = rt.Owner()
	if _, err := rt.CreateSandbox(ctx, stockade.SandboxSpec{Image: d.image, Lifetime: spec.Kept}); err != nil {
		return f, err
	}
	f.before, err = d.owned(ctx, f.owner)
	return f, err
}

func (d *driller) cleanupForeign(f foreignOwner) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt, err := d.open(ctx, f.journal)
	if err != nil {
		fmt.Fprintf(d.stderr, "stockade drill: cleanup of the foreign owner: %v\n", err)
		return
	}
	defer rt.Close()
	removeAll(ctx, rt)
}

func removeAll(ctx context.Context, rt *stockade.Runtime) error {
	list, err := rt.Sandboxes(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range list {
		sb, err := rt.Sandbox(s.ID)
		if err == nil {
			err = sb.Remove(ctx)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// owned lists the "kind/id" of every resource labelled with owner.
func (d *driller) owned(ctx context.Context, owner string) ([]string, error) {
	a, err := dockerio.NewAdapter(dockerio.Options{Profile: d.profile})
	if err != nil {
		return nil, err
	}
	defer a.Close()
	if _, err := a.Preflight(ctx); err != nil {
		return nil, err
	}
	groups, err := a.ListOwned(ctx, owner)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, g := range groups {
		for _, r := range g.Resources {
			out = append(out, string(r.Kind)+"/"+r.ID+"@"+g.Sandbox)
		}
	}
	sort.Strings(out)
	return out, nil
}

// child runs `stockade drill-child` on the journal, armed with fp (or
// killed after delay), and says how it ended.
func (d *driller) child(ctx context.Context, jpath, fp string, delay time.Duration, recoverOnly bool) (string, error) {
	args := []string{"drill-child", "--journal", jpath, "--image", d.image}
	if d.profile != "" {
		args = append(args, "--profile", d.profile)
	}
	if recoverOnly {
		args = append(args, "--recover-only")
	}
	cmd := exec.CommandContext(ctx, d.self, args...)
	cmd.Env = append(os.Environ(), failpoint.Env+"="+fp)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	if delay > 0 {
		t := time.AfterFunc(delay, func() { cmd.Process.Signal(syscall.SIGKILL) })
		defer t.Stop()
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "finished", nil
	case errors.As(err, &ee) && ee.ProcessState.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL:
		return "killed", nil
	}
	return "", fmt.Errorf("drill child failed: %v\n%s", err, out.String())
}

func (d *driller) run(ctx context.Context, fp string, delay time.Duration, foreign foreignOwner) (r drillRun) {
	d.n++
	r.Failpoint = fp
	jpath := filepath.Join(d.dir, fmt.Sprintf("drill-%d.db", d.n))
	violate := func(format string, args ...any) { r.Violations = append(r.Violations, fmt.Sprintf(format, args...)) }
	var err error
	if fp == failpoint.RecoveryDecided || fp == failpoint.RecoveryOrphan || fp == failpoint.RecoveryReattached {
		// The workload runs to its end; the kill comes in the recovery after
		// (with an orphan to sweep: resources of this owner the journal
		// does not know).
		if _, err = d.child(ctx, jpath, "", 0, false); err == nil && fp == failpoint.RecoveryOrphan {
			err = d.orphan(ctx, jpath)
		}
		if err == nil {
			r.Child, err = d.child(ctx, jpath, fp, 0, true)
		}
	} else {
		r.Child, err = d.child(ctx, jpath, fp, delay, false)
	}
	if err != nil {
		violate("%v", err)
		return r
	}
	if fp != "" && r.Child != "killed" {
		violate("failpoint %s was never reached", fp)
	}
	start := time.Now()
	rt, err := d.open(ctx, jpath)
	r.Recovery = time.Since(start)
	if err != nil {
		violate("recovery failed: %v", err)
		return r
	}
	for _, s := range rt.Recovery().Sandboxes {
		r.Decisions = append(r.Decisions, fmt.Sprintf("%s→%s", s.From, s.Decision))
		if s.Err != nil {
			violate("sandbox %s did not settle: %v", s.ID, s.Err)
		}
	}
	if n := len(rt.Recovery().Orphans); n > 0 {
		r.Decisions = append(r.Decisions, fmt.Sprintf("%d orphans removed", n))
	}
	r.Decisions = append(r.Decisions, d.check(ctx, rt, foreign, violate)...)
	if err := removeAll(ctx, rt); err != nil {
		violate("cleanup: %v", err)
	}
	owner := rt.Owner()
	if err := rt.Close(); err != nil {
		violate("close: %v", err)
	}
	if left, err := d.owned(ctx, owner); err != nil || len(left) > 0 {
		violate("resources left after cleanup: %v %v", left, err)
	}
	// The journal still replays: every record decodes and every stream
	// folds without an illegal transition.
	if err := replayAll(jpath); err != nil {
		violate("journal does not replay: %v", err)
	}
	return r
}

// check verifies the invariants after a recovery and returns the decisions
// recovery journaled for processes.
func (d *driller) check(ctx context.Context, rt *stockade.Runtime, foreign foreignOwner, violate func(string, ...any)) (decisions []string) {
	list, err := rt.Sandboxes(ctx)
	if err != nil {
		violate("listing sandboxes: %v", err)
		return nil
	}
	live := map[string]bool{}
	for _, s := range list {
		live[s.ID] = true
		switch {
		case s.Phase == lifecycle.PhaseExited && s.Lifetime == spec.Kept:
		case s.Phase == lifecycle.PhaseStarted && s.Adopted:
			sb, err := rt.Sandbox(s.ID)
			if err != nil {
				violate("re-adopted sandbox %s: %v", s.ID, err)
				continue
			}
			p, err := sb.Start(ctx, spec.Process{Argv: []string{"true"}, Stdout: spec.Discard, Stderr: spec.Discard})
			if err != nil {
				violate("re-adopted sandbox %s runs no new process: %v", s.ID, err)
				continue
			}
			if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 {
				violate("re-adopted sandbox %s: true ended %+v %v", s.ID, res, err)
			}
		default:
			violate("sandbox %s is %s after recovery (adopted %v)", s.ID, s.Phase, s.Adopted)
		}
	}
	// Every process is terminal or re-adopted.
	for id := range live {
		h, err := rt.History(id)
		if err != nil {
			violate("history of %s: %v", id, err)
			continue
		}
		procs := map[string]*lifecycle.Process{}
		for _, e := range h {
			if e.Kind != string(journal.KindProcess) {
				continue
			}
			p := procs[e.ID]
			if p == nil {
				p = &lifecycle.Process{ID: e.ID}
				procs[e.ID] = p
			}
			ev, err := lifecycle.Decode(e.Type, e.Payload)
			if err == nil {
				*p, err = lifecycle.ApplyProcess(*p, e.Seq, e.Time, ev)
			}
			if err != nil {
				violate("process %s: %v", e.ID, err)
			}
		}
		for _, p := range procs {
			if !p.Terminal() && !p.Adopted {
				violate("process %s is %s, neither terminal nor re-adopted", p.ID, p.Phase)
			}
			reported := false // recovery recorded the code Docker still reported
			for _, r := range p.Recovered {
				reported = reported || r.Decision == "record exit"
			}
			if p.Exit != nil && p.Exit.ExitCode != nil && p.Group == 0 && !reported {
				violate("process %s never started but has exit code %d", p.ID, *p.Exit.ExitCode)
			}
			for _, r := range p.Recovered {
				decisions = append(decisions, "process→"+r.Decision)
			}
		}
	}
	owned, err := d.owned(ctx, rt.Owner())
	if err != nil {
		violate("listing owned resources: %v", err)
	}
	for _, o := range owned {
		if sid := o[strings.LastIndexByte(o, '@')+1:]; !live[sid] {
			violate("leaked resource %s", o)
		}
	}
	after, err := d.owned(ctx, foreign.owner)
	if err != nil || strings.Join(after, ",") != strings.Join(foreign.before, ",") {
		violate("foreign resources touched: before %v, after %v (%v)", foreign.before, after, err)
	}
	sort.Strings(decisions)
	return decisions
}

// replayAll opens a journal read-only, verifies it and folds every stream.
func replayAll(path string) error {
	j, err := journal.Open(path, journal.Options{ReadOnly: true})
	if err != nil {
		return err
	}
	defer j.Close()
	return stockade.VerifyJournal(j)
}

type drillChildCmd struct {
	g           global
	image       string
	recoverOnly bool
}

func parseDrillChild(g global, args []string) (command, error) {
	c := &drillChildCmd{g: g}
	fs := newFlags("drill-child", &c.g)
	fs.StringVar(&c.image, "image", "stockade/toolbox:dev", "")
	fs.BoolVar(&c.recoverOnly, "recover-only", false, "only open (recover) and close")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return nil, err
	}
	if err := wantArgs("drill-child", pos, 0, "stockade drill-child [--image IMAGE] [--recover-only]"); err != nil {
		return nil, err
	}
	return c, nil
}

// execute is the workload a drill kills: a kept sandbox with a running
// process, a one-shot sandbox run to its end, stopped and removed.
func (c *drillChildCmd) execute(ctx context.Context, _ io.Reader, _, stderr io.Writer) int {
	rt, err := stockade.Open(ctx, stockade.Options{Journal: c.g.journal, Profile: c.g.profile, StopGrace: time.Second})
	if err != nil {
		return fail(stderr, err, 1)
	}
	defer rt.Close()
	if c.recoverOnly {
		return 0
	}
	kept, err := rt.CreateSandbox(ctx, stockade.SandboxSpec{Image: c.image, Lifetime: spec.Kept})
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
	go io.Copy(io.Discard, p.Stdout())
	once, err := rt.CreateSandbox(ctx, stockade.SandboxSpec{Image: c.image, Lifetime: spec.OneShot})
	if err != nil {
		return fail(stderr, err, 1)
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
