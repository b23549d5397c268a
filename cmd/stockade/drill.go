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
	"github.com/stockade/stockade/internal/drillcheck"
	"github.com/stockade/stockade/internal/drilldocker"
	"github.com/stockade/stockade/internal/failpoint"
	"github.com/stockade/stockade/internal/recovery"
	"github.com/stockade/stockade/internal/survivor"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

type drillCmd struct {
	g       global
	points  []string
	random  int
	image   string
	seed    uint64
	dir     string
	hostile bool
}

func parseDrill(g global, args []string) (command, error) {
	c := &drillCmd{g: g}
	fs := newFlags("drill", &c.g)
	points := fs.String("failpoints", strings.Join(failpoint.All, ","), "comma-separated failpoints to arm in turn")
	fs.IntVar(&c.random, "random", 0, "also run N drills killing the child at a random moment")
	fs.StringVar(&c.image, "image", "stockade/toolbox:dev", "sandbox image")
	fs.Uint64Var(&c.seed, "seed", uint64(time.Now().UnixNano()), "seed for --random")
	fs.StringVar(&c.dir, "dir", "", "keep the drills' journals in this directory (default: a temporary one, deleted)")
	fs.BoolVar(&c.hostile, "hostile", false, "run a hostile survivor (setsid, double fork, planting links and markers) beside every checkpoint and rollback")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return nil, err
	}
	if err := wantArgs("drill", pos, 0, "stockade drill [--failpoints a,b] [--random N] [--hostile]"); err != nil {
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
		defer func() {
			if err := os.RemoveAll(dir); err != nil {
				note(stderr, "drill: removing %s: %v", dir, err)
			}
		}()
	}
	d := &driller{self: self, dir: dir, image: c.image, profile: c.g.profile, stderr: stderr, hostile: c.hostile}

	// A foreign runtime's kept sandbox: no drill may touch it.
	foreign, err := d.foreign(ctx)
	if err != nil {
		return fail(stderr, fmt.Errorf("drill: making the foreign owner's sandbox: %w", err), 1)
	}
	defer d.cleanupForeign(foreign)

	var runs []drillRun
	for _, fp := range c.points {
		mode := wardenMode
		if fp == failpoint.ProcessExecCreated {
			mode = execMode // only a sandbox without a warden creates execs
		}
		runs = append(runs, d.run(ctx, fp, 0, mode, foreign))
	}
	rng := rand.New(rand.NewPCG(c.seed, 0))
	for i := range c.random {
		// The workload takes a few seconds, most of them with the
		// streaming neighbour running; one drill in four runs the
		// sandboxes without a warden (processes as Docker execs).
		delay := time.Duration(rng.Int64N(int64(d.span())))
		mode := wardenMode
		if i%4 == 3 {
			mode = execMode
		}
		r := d.run(ctx, "", delay, mode, foreign)
		r.Failpoint = fmt.Sprintf("random#%d@%v%s", i+1, delay.Round(time.Millisecond), mode)
		runs = append(runs, r)
	}
	bad := 0
	out := &printer{w: stdout}
	if c.g.json {
		enc := json.NewEncoder(out)
		for _, r := range runs {
			out.keep(enc.Encode(r))
		}
	} else {
		out.printf("%-26s %-12s %-10s %-s\n", "FAILPOINT", "CHILD", "RECOVERY", "OUTCOME")
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
		out.printf("%-26s %-12s %-10s %s\n", r.Failpoint, r.Child, r.Recovery.Round(time.Millisecond), outcome)
	}
	if bad > 0 {
		if err := out.Err(); err != nil {
			_ = fail(stderr, err, 1) // the violations decide the exit code
		}
		d.warnf("%d of %d drills violated an invariant", bad, len(runs))
		return 1
	}
	out.printf("%d drills, no violation\n", len(runs))
	if err := out.Err(); err != nil {
		return fail(stderr, err, 1)
	}
	return 0
}

// defaultSpan bounds a random drill's kill until a whole workload was
// timed: about the child's workload on an idle machine.
const defaultSpan = 4 * time.Second

// span is how long a random drill's kill may wait: the longest whole
// workload seen so far (a loaded machine takes longer), so kills spread
// over all of it, streaming included.
func (d *driller) span() time.Duration {
	if d.whole > 0 {
		return d.whole
	}
	return defaultSpan
}

// drillMode says whether the drill's runtimes give their sandboxes a
// warden (the default) or run processes as Docker execs (a sandbox made
// without one, as an older journal's: the only path to exec-created).
type drillMode string

const (
	wardenMode drillMode = ""
	execMode   drillMode = "/no-warden"
)

type driller struct {
	self, dir, image, profile string
	stderr                    io.Writer
	hostile                   bool
	n                         int
	// whole is the longest a child took to run its workload to its end.
	whole time.Duration
}

// warnf prints a line of the drill's on stderr. A failing stderr is not
// reported: there is nowhere left to report it.
func (d *driller) warnf(format string, args ...any) {
	_, _ = fmt.Fprintf(d.stderr, "stockade drill: "+format+"\n", args...)
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
	_ = j.Close() // opened read-only for its owner: nothing to lose
	return drilldocker.MakeOrphan(ctx, d.profile, d.image, owner)
}

// foreignOwner is a kept sandbox of another journal (another owner).
type foreignOwner struct {
	journal string
	owner   string
	before  []string
}

// open opens a drill's runtime with the drill's warm pool (the foreign
// owner's has none: nothing of its may change while the drills run).
func (d *driller) open(ctx context.Context, path string, mode drillMode) (*drillRuntime, error) {
	return openDrillRuntime(ctx, path, d.profile, d.image, mode)
}

// drillRuntime is a drill's runtime and, in execMode, the engine it was
// given (Close closes both).
type drillRuntime struct {
	*stockade.Runtime
	engine io.Closer
}

func (r *drillRuntime) Close() error {
	err := r.Runtime.Close()
	if r.engine != nil {
		err = errors.Join(err, r.engine.Close())
	}
	return err
}

// drillPool is the drills' warm pool: one sandbox of the drill's image,
// claimed by the child's one-shot sandbox, refilled in the background
// (kills land in claims and refills alike).
const drillPool = "drill"

// openDrillRuntime opens a runtime on the journal at path, with a warm
// pool of one sandbox of poolImage (none when ""); in execMode its engine
// is a Docker adapter without a warden binary.
func openDrillRuntime(ctx context.Context, path, profile, poolImage string, mode drillMode) (*drillRuntime, error) {
	opts := stockade.Options{Journal: path, Profile: profile, StopGrace: time.Second}
	if poolImage != "" {
		opts.Pools = []stockade.PoolSpec{{Name: drillPool, Sandbox: spec.Sandbox{Image: poolImage}, Size: 1}}
	}
	if mode != execMode {
		rt, err := stockade.Open(ctx, opts)
		if err != nil {
			return nil, err
		}
		return &drillRuntime{Runtime: rt}, nil
	}
	engine, closer, err := drilldocker.ExecEngine(profile)
	if err != nil {
		return nil, err
	}
	opts.Engine = engine
	rt, err := stockade.Open(ctx, opts)
	if err != nil {
		_ = closer.Close() // the Open error is the one reported
		return nil, err
	}
	return &drillRuntime{Runtime: rt, engine: closer}, nil
}

func (d *driller) foreign(ctx context.Context) (_ foreignOwner, err error) {
	f := foreignOwner{journal: filepath.Join(d.dir, "foreign.db")}
	rt, err := openDrillRuntime(ctx, f.journal, d.profile, "", wardenMode)
	if err != nil {
		return f, err
	}
	// Its journal must hold the sandbox for the cleanup to find it.
	defer func() { err = errors.Join(err, rt.Close()) }()
	f.owner = rt.Owner()
	if _, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: d.image, Lifetime: spec.Kept}); err != nil {
		return f, err
	}
	f.before, err = d.owned(ctx, f.owner)
	return f, err
}

func (d *driller) cleanupForeign(f foreignOwner) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt, err := openDrillRuntime(ctx, f.journal, d.profile, "", wardenMode)
	if err != nil {
		d.warnf("cleanup of the foreign owner: %v", err)
		return
	}
	if err := errors.Join(removeAll(ctx, rt.Runtime), rt.Close()); err != nil {
		d.warnf("cleanup of the foreign owner: %v", err)
	}
}

// removeAll empties the drill's pool (nothing refills it after), then
// removes every sandbox. One gone meanwhile (a pool's discard) is not an
// error.
func removeAll(ctx context.Context, rt *stockade.Runtime) error {
	var errs []error
	if err := rt.ResizePool(ctx, drillPool, 0); err != nil && !spec.IsCode(err, spec.CodeNotFound) {
		errs = append(errs, err)
	}
	list, err := rt.Sandboxes(ctx)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, s := range list {
		sb, err := rt.Sandbox(ctx, s.ID)
		if err == nil {
			err = sb.Remove(ctx)
		}
		if !spec.IsCode(err, spec.CodeNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// owned lists the "kind/id" of every resource labelled with owner.
func (d *driller) owned(ctx context.Context, owner string) ([]string, error) {
	return drilldocker.Owned(ctx, d.profile, owner)
}

// child runs `stockade drill-child` on the journal, armed with fp (or
// killed after delay), and says how it ended.
func (d *driller) child(ctx context.Context, jpath, fp string, delay time.Duration, mode drillMode, recoverOnly bool) (string, error) {
	args := []string{"drill-child", "--journal", jpath, "--image", d.image}
	if d.profile != "" {
		args = append(args, "--profile", d.profile)
	}
	if recoverOnly {
		args = append(args, "--recover-only")
	}
	if d.hostile {
		args = append(args, "--hostile")
	}
	if mode == execMode {
		args = append(args, "--no-warden")
	}
	cmd := exec.CommandContext(ctx, d.self, args...)
	cmd.Env = append(os.Environ(), failpoint.Env+"="+fp)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	if delay > 0 {
		// A child that already ended cannot be killed: Wait says how it
		// ended.
		t := time.AfterFunc(delay, func() { _ = cmd.Process.Signal(syscall.SIGKILL) })
		defer t.Stop()
	}
	start := time.Now()
	err := cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		if took := time.Since(start); fp == "" && !recoverOnly {
			d.whole = max(d.whole, took)
		}
		return "finished", nil
	case errors.As(err, &ee) && ee.ProcessState.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL:
		return "killed", nil
	}
	return "", fmt.Errorf("drill child failed: %w\n%s", err, out.String())
}

func (d *driller) run(ctx context.Context, fp string, delay time.Duration, mode drillMode, foreign foreignOwner) (r drillRun) {
	d.n++
	r.Failpoint = fp
	jpath := filepath.Join(d.dir, fmt.Sprintf("drill-%d.db", d.n))
	violate := func(format string, args ...any) { r.Violations = append(r.Violations, fmt.Sprintf(format, args...)) }
	var err error
	if fp == failpoint.RecoveryDecided || fp == failpoint.RecoveryOrphan || fp == failpoint.RecoveryReattached {
		// The workload runs to its end; the kill comes in the recovery after
		// (with an orphan to sweep: resources of this owner the journal
		// does not know).
		if _, err = d.child(ctx, jpath, "", 0, mode, false); err == nil && fp == failpoint.RecoveryOrphan {
			err = d.orphan(ctx, jpath)
		}
		if err == nil {
			r.Child, err = d.child(ctx, jpath, fp, 0, mode, true)
		}
	} else {
		r.Child, err = d.child(ctx, jpath, fp, delay, mode, false)
	}
	if err != nil {
		violate("%v", err)
		return r
	}
	if fp != "" && r.Child != "killed" {
		violate("failpoint %s was never reached", fp)
	}
	// What the journal and the recordings held at the kill.
	atKill, err := drillcheck.Read(jpath)
	if err != nil {
		violate("reading the journal left at the kill: %v", err)
		return r
	}
	atKill.CheckAtKill(violate)
	start := time.Now()
	rt, err := d.open(ctx, jpath, mode)
	r.Recovery = time.Since(start)
	if err != nil {
		violate("recovery failed: %v", err)
		return r
	}
	report, err := rt.Recovery(ctx)
	if err != nil {
		violate("recovery report: %v", err)
	}
	tornDown := map[string]string{} // the decision by sandbox id
	for _, s := range report.Sandboxes {
		r.Decisions = append(r.Decisions, fmt.Sprintf("%s→%s", s.From, s.Decision))
		if s.Error != "" {
			violate("sandbox %s did not settle: %v", s.ID, s.Error)
		}
		if recovery.TornDown(s.Decision) {
			tornDown[s.ID] = s.Decision
		}
	}
	if n := len(report.Orphans); n > 0 {
		r.Decisions = append(r.Decisions, fmt.Sprintf("%d orphans removed", n))
	}
	r.Decisions = append(r.Decisions, d.check(ctx, rt.Runtime, foreign, violate)...)
	if err := removeAll(ctx, rt.Runtime); err != nil {
		violate("cleanup: %v", err)
	}
	owner := rt.Owner()
	if err := rt.Close(); err != nil {
		violate("close: %v", err)
	}
	if u := rt.Unanswered(); len(u) > 0 {
		violate("removed sandboxes left asks unanswered: %v", u)
	}
	if left, err := d.owned(ctx, owner); err != nil || len(left) > 0 {
		violate("resources left after cleanup: %v %v", left, err)
	}
	// The journal still replays: every record decodes and every stream
	// folds without an illegal transition.
	if err := drillcheck.Replay(jpath); err != nil {
		violate("journal does not replay: %v", err)
	}
	// Every process and every recording has ended by now (cleanup
	// removed every sandbox): the promise's invariants.
	final, err := drillcheck.Read(jpath)
	if err != nil {
		violate("reading the journal after cleanup: %v", err)
		return r
	}
	r.Decisions = append(r.Decisions, final.CheckFinal(atKill, tornDown, violate)...)
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
		if st, err := rt.ReplaySandbox(ctx, s.ID, 0); err != nil || st.RollingBack != nil {
			violate("sandbox %s: a rollback left unsettled after recovery (%v)", s.ID, err)
		}
		switch {
		case s.Phase == lifecycle.PhaseExited && s.Lifetime == spec.Kept:
		case s.Pool != "" && (s.Phase == lifecycle.PhasePooled || s.Phase == lifecycle.PhaseReserved):
			// Waiting in the pool (re-adopted), or a refill under way.
			if len(s.Processes) > 0 {
				violate("pooled sandbox %s has processes %v", s.ID, s.Processes)
			}
		case s.Phase == lifecycle.PhaseStarted && s.Adopted:
			decisions = append(decisions, d.checkReadopted(ctx, rt, s.ID, violate)...)
		case s.Pool != "" && !s.Claimed && (s.Phase == lifecycle.PhaseStopping || s.Phase == lifecycle.PhaseExited || s.Phase == lifecycle.PhaseRemoving):
			// A pooled sandbox the pool gave up after recovery (its
			// warden not reattached: a claim must find it linked) is
			// removed, never handed out.
			decisions = append(decisions, "pooled sandbox discarded after recovery")
		default:
			violate("sandbox %s is %s after recovery (adopted %v, pool %q, claimed %v)", s.ID, s.Phase, s.Adopted, s.Pool, s.Claimed)
		}
	}
	// A pooled sandbox the recovery took back is claimed and runs a
	// process (its warden reattached, then its secret rotated).
	if ps, err := rt.Pools(ctx); err == nil && len(ps) > 0 && ps[0].Ready > 0 {
		decisions = append(decisions, "pooled sandbox claimed after recovery")
		if err := claimAndRun(ctx, rt, d.image); err != nil {
			violate("claiming a pooled sandbox after recovery: %v", err)
		}
	}
	decisions = append(decisions, checkProcesses(ctx, rt, live, violate)...)
	owned, err := d.owned(ctx, rt.Owner())
	if err != nil {
		violate("listing owned resources: %v", err)
	}
	// The pool refills meanwhile: a sandbox it began after the first
	// listing owns resources too. Listed again, after the resources were.
	if again, err := rt.Sandboxes(ctx); err == nil {
		for _, s := range again {
			live[s.ID] = true
		}
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

// checkReadopted checks a re-adopted sandbox: it runs a new process
// (bounded: a launch never answered is a violation, not a drill that waits
// for ever), a rollback's outcome is what its workspace is, and one warden
// serves it.
func (d *driller) checkReadopted(ctx context.Context, rt *stockade.Runtime, id string, violate func(string, ...any)) (decisions []string) {
	sb, err := rt.Sandbox(ctx, id)
	if err != nil {
		violate("re-adopted sandbox %s: %v", id, err)
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, askBound)
	defer cancel()
	p, err := sb.Start(sctx, spec.Process{Argv: []string{"true"}, Stdout: spec.Discard, Stderr: spec.Discard})
	if err != nil {
		violate("re-adopted sandbox %s runs no new process: %v", id, err)
		return nil
	}
	if res, err := p.Wait(sctx); err != nil || res.ExitCode != 0 {
		violate("re-adopted sandbox %s: true ended %+v %v", id, res, err)
	}
	if outcome := checkRolledBack(sctx, rt, sb, violate); outcome != "" {
		what := map[string]string{"v1": "rolled back", "v2": "rollback abandoned"}[outcome]
		if d.hostile {
			what += ", a hostile survivor beside it"
		}
		decisions = append(decisions, what+": the workspace is the journal's, /workspace root's")
	}
	checkOneWarden(sctx, rt, sb, violate)
	return decisions
}

// checkProcesses checks that every process of the live sandboxes is
// terminal or re-adopted, and that none that never started has an exit
// code (unless recovery recorded the code Docker still reported); it
// returns recovery's decisions for processes.
func checkProcesses(ctx context.Context, rt *stockade.Runtime, live map[string]bool, violate func(string, ...any)) (decisions []string) {
	for id := range live {
		h, err := rt.History(ctx, id)
		if err != nil {
			violate("history of %s: %v", id, err)
			continue
		}
		procs := map[string]*drillcheck.Proc{}
		if err := drillcheck.Fold(procs, h); err != nil {
			violate("%v", err)
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
	return decisions
}

// checkRolledBack checks a re-adopted sandbox that was rolled back (the
// child's checkpointAndRollBack): the journal's last word on the rollback
// is what the workspace is (rolled back: v1; abandoned: v2), /workspace
// and the warden's directory are root's 0755, nothing of the workload
// runs as uid 0, no survivor's program ran as the warden, and no process
// the runtime did not track outlived a rollback that happened.
func checkRolledBack(ctx context.Context, rt *stockade.Runtime, sb *stockade.Sandbox, violate func(string, ...any)) (outcome string) {
	h, err := rt.History(ctx, sb.ID())
	if err != nil {
		violate("history of %s: %v", sb.ID(), err)
		return ""
	}
	for _, ev := range h {
		switch ev.Type {
		case (lifecycle.RolledBack{}).Type():
			outcome = "v1"
		case (lifecycle.RollbackAbandoned{}).Type():
			outcome = "v2"
		}
	}
	if outcome == "" {
		return "" // no rollback was journaled settled: not this drill's rollback sandbox
	}
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", "cat version; stat -c '%u %a' /workspace /workspace/.stockade; ls pwned 2>/dev/null; echo USER; ps -o user,args"}, Stderr: spec.Discard})
	if err != nil {
		violate("rolled back sandbox %s runs no check: %v", sb.ID(), err)
		return outcome
	}
	b, _ := io.ReadAll(io.LimitReader(p.Stdout(), 1<<20)) // a short read shows as a violation below
	if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 {
		violate("rolled back sandbox %s: its check ended %+v %v", sb.ID(), res, err)
		return outcome
	}
	head, ps, _ := strings.Cut(string(b), "USER\n")
	if want := outcome + "\n0 755\n0 755\n"; head != want {
		violate("rolled back sandbox %s: %q, want %q (the journal's outcome, /workspace and its warden's directory root's 0755, no survivor's program run)", sb.ID(), head, want)
	}
	for _, line := range strings.Split(ps, "\n")[1:] {
		f := strings.Fields(line)
		switch {
		case len(f) < 2:
		case f[0] == "root" || f[0] == "0":
			violate("rolled back sandbox %s: a process of the workload runs as uid 0: %q", sb.ID(), line)
		case outcome == "v1" && survivor.Is(line):
			// (An abandoned rollback may have ended before its kill of the workload.)
			violate("rolled back sandbox %s: a survivor outlived the rollback: %q", sb.ID(), line)
		}
	}
	return outcome
}

// checkOneWarden checks that a re-adopted sandbox with a warden runs
// exactly one warden server: one given up (not reattached, or its rekey
// cut by the kill) is killed before another starts.
func checkOneWarden(ctx context.Context, rt *stockade.Runtime, sb *stockade.Sandbox, violate func(string, ...any)) {
	st, err := rt.ReplaySandbox(ctx, sb.ID(), 0)
	if err != nil || st.Warden == nil {
		return // no warden: processes run as execs
	}
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"ps", "-o", "args"}, Stderr: spec.Discard})
	if err != nil {
		violate("re-adopted sandbox %s runs no ps: %v", sb.ID(), err)
		return
	}
	b, _ := io.ReadAll(io.LimitReader(p.Stdout(), 1<<20)) // a short read shows as a count below
	_, _ = p.Wait(ctx)
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); strings.HasSuffix(line, "stockade-warden") || strings.HasSuffix(line, "stockade-warden serve") {
			n++
		}
	}
	if n != 1 {
		violate("re-adopted sandbox %s runs %d wardens, want 1:\n%s", sb.ID(), n, b)
	}
}

// askBound bounds every ask the drill makes of a recovered runtime: each
// must be answered well within it.
const askBound = 2 * time.Minute

// streamer prints numbered lines without end, pausing a hundredth of a
// second every 200 lines (about 150 KB/s): fast enough that its recording
// passes the head bound into tail segments within a drill and a kill lands
// mid-stream, slow enough not to starve a shared machine or reach the
// output quota while a drill runs.
const streamer = `i=0; while :; do echo "line $i of the streaming neighbour"; i=$((i+1)); [ $((i % 200)) -ne 0 ] || sleep 0.01; done`

// streamedBefore is how much of the streamer the child reads before it goes
// on: past the default head bound, so its recording has a tail segment.
const streamedBefore = spec.DefaultRecordHead + 16<<10
