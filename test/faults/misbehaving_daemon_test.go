package faults

// A misbehaving daemon (issue 13): a runtime talks to the real daemon
// through internal/faultproxy, which resets connections mid-create, mid-exec
// and mid-stream, slows replies, truncates and corrupts the multiplexed
// frames of hijacked streams, and stalls them. Each fault must end in a
// typed error (or a typed exit reason) within a bound, leave a journal that
// verifies, leave no goroutine behind, and a recovery directly against the
// daemon afterwards must leave nothing leaked.
//
// Part of make test; `make faults` runs these alone (CI=true go test -race
// -run TestFaults ./test/faults/). Every wait is bounded by faultWait; no
// assertion is about how fast anything is.

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/helpers"
	"github.com/stockade/stockade/inspect"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/internal/faultproxy"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/statedir"
	"github.com/stockade/stockade/test/testkit"
)

// faultWait bounds every wait of these tests: a fault must have played out
// well within it (it is a hang detector, not a performance bound).
const faultWait = 90 * time.Second

// goroutineSlack is how many goroutines above the baseline are tolerated
// in the process's total once everything is closed (the proxy's own are
// subtracted; HTTP clients' connection goroutines come and go). The
// runtime's own goroutines (a frame of a stockade package, or of the actor
// library) must be back to their baseline exactly.
const goroutineSlack = 5

// faultEnv is a runtime whose Docker client goes through a fault proxy.
type faultEnv struct {
	t       *testing.T
	px      *faultproxy.Proxy
	cli     *client.Client // direct to the daemon
	image   string
	journal string
	warden  bool
	ad      *dockerio.Adapter
	rt      *stockade.Runtime
	base    int                 // all goroutines but the proxy's
	own     int                 // the runtime's (see ownGoroutines)
	pre     []*faultproxy.Fault // the faults in place before the runtime opened
}

var warmOnce sync.Once

// warmUp opens and closes a runtime once per test binary, so goroutines
// that live for the whole process once started (none are expected, but a
// library may keep one) are in every baseline.
func warmUp(t *testing.T) {
	warmOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		rt, err := stockade.Open(ctx, stockade.Options{Journal: filepath.Join(t.TempDir(), "warm.db")})
		if err != nil {
			t.Fatalf("warm-up open: %v", err)
		}
		_ = rt.Close()
	})
}

func newFaultEnv(t *testing.T, warden bool) *faultEnv {
	t.Helper()
	return newFaultEnvWith(t, warden)
}

// newFaultEnvWith is newFaultEnv with rules in force before the runtime
// opens (its Open and its event subscription go through them too).
func newFaultEnvWith(t *testing.T, warden bool, pre ...faultproxy.Rule) *faultEnv {
	t.Helper()
	cli := dockertest.Client(t)
	image := dockertest.ImageID(t, cli)
	warmUp(t)
	px, err := faultproxy.New(faultproxy.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = px.Close()
	})
	e := &faultEnv{t: t, px: px, cli: cli, image: image, journal: filepath.Join(t.TempDir(), "journal.db"), warden: warden}
	e.base = e.goroutines()
	e.own, _ = ownGoroutines()
	for _, r := range pre {
		e.pre = append(e.pre, px.Add(r))
	}
	e.open()
	dockertest.CleanupOwner(t, cli, e.rt.Owner())
	t.Cleanup(e.closeRuntime)
	return e
}

// open opens the runtime on the journal with an adapter whose client goes
// through the proxy (Options.Engine: stockade.Open's own adapter reads
// DOCKER_HOST, which is process-wide; this one is the test's alone).
func (e *faultEnv) open() {
	e.t.Helper()
	opts := dockerio.Options{ClientOpts: []client.Opt{client.WithHost(e.px.Host())}}
	dir := statedir.Helpers(e.journal)
	if e.warden {
		w, err := helpers.Resolve(helpers.Warden, "", dir)
		if err != nil {
			e.t.Fatal(err)
		}
		opts.WardenBinary = w
	}
	if eg, err := helpers.Resolve(helpers.Egress, "", dir); err == nil {
		opts.EgressBinary = eg
	}
	ad, err := dockerio.NewAdapter(opts)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), faultWait)
	defer cancel()
	rt, err := stockade.Open(ctx, stockade.Options{Journal: e.journal, Engine: ad, StopGrace: 2 * time.Second})
	if err != nil {
		_ = ad.Close()
		e.t.Fatalf("open through the proxy: %v", err)
	}
	e.ad, e.rt = ad, rt
}

func (e *faultEnv) closeRuntime() {
	if e.rt != nil {
		_ = e.rt.Close()
		_ = e.ad.Close()
		e.rt, e.ad = nil, nil
	}
}

// goroutines counts this process's goroutines but the proxy's, with the
// direct client's idle connections closed.
func (e *faultEnv) goroutines() int {
	_ = e.cli.Close() // closes idle connections only; the client stays usable
	return runtime.NumGoroutine() - e.px.Goroutines()
}

func (e *faultEnv) sandbox(ctx context.Context) (*stockade.Sandbox, error) {
	return e.rt.CreateSandbox(ctx, spec.Sandbox{Image: e.image, Policy: testkit.SmallPolicy(), Lifetime: spec.Kept})
}

func (e *faultEnv) mustSandbox(t *testing.T) *stockade.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), faultWait)
	defer cancel()
	sb, err := e.sandbox(ctx)
	if err != nil {
		t.Fatalf("create sandbox (no fault): %v", err)
	}
	return sb
}

// ownedBySandbox counts the owner's containers, networks and volumes by
// their sandbox label, straight from the daemon.
func (e *faultEnv) ownedBySandbox(t *testing.T, ctx context.Context, owner string) map[string]int {
	t.Helper()
	f := filters.NewArgs(filters.Arg("label", dockertest.OwnerLabel+"="+owner))
	out := map[string]int{}
	cs, err := e.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		out[c.Labels["io.stockade.sandbox"]]++
	}
	ns, err := e.cli.NetworkList(ctx, network.ListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ns {
		out[n.Labels["io.stockade.sandbox"]]++
	}
	vs, err := e.cli.VolumeList(ctx, volume.ListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs.Volumes {
		out[v.Labels["io.stockade.sandbox"]]++
	}
	return out
}

// noStray fails the test for any resource of the owner whose sandbox is
// not among live (the sandboxes the runtime holds).
func (e *faultEnv) noStray(t *testing.T, ctx context.Context, owner string, live map[string]bool, when string) {
	t.Helper()
	for id, n := range e.ownedBySandbox(t, ctx, owner) {
		if !live[id] {
			t.Errorf("%s: %d Docker resources of sandbox %q are left, and the runtime holds no such live sandbox", when, n, id)
		}
	}
}

func (e *faultEnv) liveSandboxes(t *testing.T, ctx context.Context, rt *stockade.Runtime) map[string]bool {
	t.Helper()
	infos, err := rt.Sandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	live := map[string]bool{}
	for _, s := range infos {
		live[s.ID] = true
	}
	return live
}

// finish is every fault test's end: the faults are cleared, the runtime
// closes, the journal verifies, and a new runtime opens on the same journal
// directly against the daemon. Its recovery must settle every sandbox,
// leave no resource outside the sandboxes it holds, and removing those
// must leave nothing; once all is closed, the goroutines are back near
// the baseline.
func (e *faultEnv) finish() {
	t := e.t
	t.Helper()
	e.px.Clear()
	owner := e.rt.Owner()
	e.closeRuntime()
	// Verified closed: a verify on a live runtime can be fooled by its
	// appends (TestFaultsVerifyLiveJournal).
	e.verifyOffline("after the faulted runtime closed")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rt, err := stockade.Open(ctx, stockade.Options{Journal: e.journal, StopGrace: 2 * time.Second})
	if err != nil {
		t.Fatalf("reopening directly against the daemon: %v", err)
	}
	defer func() { _ = rt.Close() }()
	report, err := rt.Recovery(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range report.Sandboxes {
		t.Logf("recovery: sandbox %s from %s: %s (saw %s), settled %s %s", s.ID, s.From, s.Decision, s.Observed, s.Settled, s.Error)
		if s.Error != "" {
			t.Errorf("recovery of sandbox %s did not settle: %v", s.ID, s.Error)
		}
	}
	for _, r := range report.Orphans {
		t.Logf("recovery removed an orphan: %s %s (sandbox %s)", r.Kind, r.Name, r.Sandbox)
	}
	live := e.liveSandboxes(t, ctx, rt)
	e.noStray(t, ctx, owner, live, "after recovery")
	infos, _ := rt.Sandboxes(ctx)
	for _, s := range infos {
		if s.Unreconciled {
			t.Errorf("sandbox %s is unreconciled after recovery: %s", s.ID, s.Why)
			continue
		}
		sb, err := rt.Sandbox(ctx, s.ID)
		if err == nil {
			err = sb.Remove(ctx)
		}
		if err != nil {
			t.Errorf("removing sandbox %s after recovery: %v", s.ID, err)
		}
	}
	if n, err := dockertest.Owned(ctx, e.cli, owner); err != nil || n != 0 {
		t.Errorf("%d Docker resources left after every sandbox was removed (%v)", n, err)
	}
	_ = rt.Close()
	e.verifyOffline("after recovery and removal")
	e.checkGoroutines()
}

// verifyOffline verifies the journal file, opened read-only while no
// runtime holds it.
func (e *faultEnv) verifyOffline(when string) {
	e.t.Helper()
	j, err := journal.Open(e.journal, journal.Options{ReadOnly: true})
	if err != nil {
		e.t.Errorf("opening the journal read-only %s: %v", when, err)
		return
	}
	defer func() { _ = j.Close() }()
	if err := inspect.New(j).Verify(e.t.Context()); err != nil {
		e.t.Errorf("the journal does not verify %s: %v", when, err)
	}
}

// checkGoroutines waits (bounded) for the goroutines to come back to the
// baseline taken before the runtime opened: the runtime's own exactly, the
// process's total within goroutineSlack.
func (e *faultEnv) checkGoroutines() {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := e.goroutines()
		own, stacks := ownGoroutines()
		if n <= e.base+goroutineSlack && own <= e.own {
			e.t.Logf("goroutines: %d (baseline %d); the runtime's: %d (baseline %d)", n, e.base, own, e.own)
			return
		}
		if time.Now().After(deadline) {
			if own > e.own {
				e.t.Errorf("goroutine leak: %d of the runtime's goroutines 30 s after everything closed, baseline %d; their stacks:\n%s", own, e.own, stacks)
			}
			if n > e.base+goroutineSlack {
				buf := make([]byte, 4<<20)
				buf = buf[:runtime.Stack(buf, true)]
				e.t.Errorf("goroutine leak: %d goroutines 30 s after everything closed, baseline %d (+%d tolerated); all stacks:\n%s", n, e.base, goroutineSlack, buf)
			}
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ownGoroutines counts the goroutines with a frame in a stockade package
// (not this test package's, nor the proxy's, dockertest's or testenv's) or
// in the actor library, and returns their stacks.
func ownGoroutines() (int, string) {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	var stacks strings.Builder
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, line := range strings.Split(g, "\n") {
			own := strings.HasPrefix(line, "github.com/asynkron/protoactor-go") ||
				strings.HasPrefix(line, "github.com/stockade/stockade/") &&
					!strings.HasPrefix(line, "github.com/stockade/stockade/test.") &&
					!strings.HasPrefix(line, "github.com/stockade/stockade/internal/faultproxy.") &&
					!strings.HasPrefix(line, "github.com/stockade/stockade/internal/dockertest.") &&
					!strings.HasPrefix(line, "github.com/stockade/stockade/internal/testenv.")
			if own {
				n++
				stacks.WriteString(g + "\n\n")
				break
			}
		}
	}
	return n, stacks.String()
}

// token is a unique word put in a process's argv, so rules can pick its
// exec (Rule.Exec, Rule.Body) out of the helper execs around it.
func token() string { return "fault" + dockertest.RandomHex(6) }

// talkerScript prints a line, then one more for each line of stdin, then
// sleeps: the test decides when each frame is written.
const talkerScript = `echo one; read a; echo two; read b; echo three; exec sleep 300`

// talker is a running talker process.
type talker struct {
	t   *testing.T
	p   *stockade.Process
	out chan lineOrErr
	tok string
}

type lineOrErr struct {
	line string
	err  error
}

// startTalker starts a talker and reads its first line.
func startTalker(t *testing.T, sb *stockade.Sandbox, timeout time.Duration) *talker {
	t.Helper()
	tk := &talker{t: t, tok: token()}
	ctx, cancel := context.WithTimeout(context.Background(), faultWait)
	defer cancel()
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", talkerScript, tk.tok}, Stdin: true, Timeout: timeout})
	if err != nil {
		t.Fatalf("starting the talker (no fault yet): %v", err)
	}
	tk.p = p
	go func() { _, _ = io.Copy(io.Discard, p.Stderr()) }()
	tk.out = make(chan lineOrErr, 8)
	go func() {
		r := bufio.NewReader(p.Stdout())
		for {
			s, err := r.ReadString('\n')
			if err != nil {
				tk.out <- lineOrErr{s, err}
				_, _ = io.Copy(io.Discard, r)
				close(tk.out)
				return
			}
			tk.out <- lineOrErr{line: s}
		}
	}()
	if l := tk.next(); l.err != nil || l.line != "one\n" {
		t.Fatalf("the talker's first line: %q %v", l.line, l.err)
	}
	return tk
}

// next is the talker's next stdout line or the error that ended it.
func (tk *talker) next() lineOrErr {
	select {
	case l, ok := <-tk.out:
		if !ok {
			return lineOrErr{err: io.EOF}
		}
		return l
	case <-time.After(faultWait):
		tk.t.Fatalf("no stdout line nor end within %v", faultWait)
		return lineOrErr{}
	}
}

// poke writes a line to the talker's stdin (it prints its next line).
func (tk *talker) poke() error {
	_, err := io.WriteString(tk.p.Stdin(), "x\n")
	return err
}

// wait waits (bounded) for the process's end; a hang fails the test.
func (tk *talker) wait(what string) (spec.Result, error) {
	tk.t.Helper()
	return waitBounded(tk.t, tk.p, what)
}

func waitBounded(t *testing.T, p *stockade.Process, what string) (spec.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), faultWait)
	defer cancel()
	res, err := p.Wait(ctx)
	if ctx.Err() != nil {
		t.Fatalf("%s: the process did not end within %v (a hang): %v", what, faultWait, err)
	}
	t.Logf("%s: process %s ended: reason %s code %d err %v", what, p.ID(), res.Reason, res.ExitCode, err)
	return res, err
}

// typed checks err is a *spec.Error and returns its code.
func typed(t *testing.T, what string, err error) spec.Code {
	t.Helper()
	var se *spec.Error
	if !errors.As(err, &se) {
		t.Errorf("%s: %v (%T) is not a typed *spec.Error", what, err, err)
		return ""
	}
	return se.Code
}

func oneOf(c spec.Code, codes ...spec.Code) bool {
	for _, k := range codes {
		if c == k {
			return true
		}
	}
	return false
}

// history returns the types of a sandbox's own events, in order, and how
// many times each appears.
func history(t *testing.T, rt *stockade.Runtime, id string) ([]string, map[string]int) {
	t.Helper()
	h, err := rt.History(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	n := map[string]int{}
	for _, ev := range h {
		if ev.Kind == "sandbox" {
			types = append(types, ev.Type)
			n[ev.Type]++
		}
	}
	return types, n
}

// runs checks a process runs normally in sb (the runtime still serves).
func runs(t *testing.T, sb *stockade.Sandbox, what string) {
	t.Helper()
	out, _, res, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"echo", "still-serving"}})
	if err != nil || res.Reason != "exited" || res.ExitCode != 0 || out != "still-serving\n" {
		t.Errorf("%s: a plain process after the fault: out %q reason %s code %d err %v", what, out, res.Reason, res.ExitCode, err)
	}
}

// eventuallyPhase waits (bounded) for a sandbox to reach a phase.
func eventuallyPhase(t *testing.T, sb *stockade.Sandbox, want lifecycle.Phase) lifecycle.Sandbox {
	t.Helper()
	deadline := time.Now().Add(faultWait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := sb.State(ctx)
		cancel()
		if err == nil && st.Phase == want {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s: phase %s (%v) after %v, want %s", sb.ID(), st.Phase, err, faultWait, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestFaultsResetMidCreate: the connection is reset while a sandbox is
// being made: the daemon never sees the workload's create; it makes it
// but the reply is cut in its status line or its body; the workload's
// start is reset; the warden's exec start is reset, or its stream cut
// right after the daemon started it. Each create fails typed within its
// deadline and rolls back everything it made; the runtime goes on serving.
func TestFaultsResetMidCreate(t *testing.T) {
	workload := `"io.stockade.role":"workload"`
	for _, tc := range []struct {
		name  string
		rule  faultproxy.Rule
		codes []spec.Code
	}{
		{"reset before the workload create", faultproxy.Rule{Match: "POST /containers/create", Body: workload, Action: faultproxy.Reset}, []spec.Code{spec.CodeEngine}},
		{"workload create reply cut in its status line", faultproxy.Rule{Match: "POST /containers/create", Body: workload, Action: faultproxy.ResetAfter, N: 12}, []spec.Code{spec.CodeEngine}},
		{"workload create reply cut in its body", faultproxy.Rule{Match: "POST /containers/create", Body: workload, Action: faultproxy.Truncate, N: 10}, []spec.Code{spec.CodeEngine}},
		// Only the workload is started with /containers/{id}/start, and
		// it starts before the warden's exec.
		{"workload start reset", faultproxy.Rule{Match: "/start", Action: faultproxy.Reset}, []spec.Code{spec.CodeEngine}},
		{"warden exec start reset", faultproxy.Rule{Match: "POST /exec/", Exec: wardenServe, Action: faultproxy.Reset}, []spec.Code{spec.CodeEngine, spec.CodeStreamFailure}},
		{"warden stream cut after the daemon started it", faultproxy.Rule{Match: "POST /exec/", Exec: wardenServe, Action: faultproxy.Truncate, N: 0}, []spec.Code{spec.CodeEngine, spec.CodeStreamFailure}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newFaultEnv(t, true)
			r := tc.rule
			r.Times = 1
			f := e.px.Add(r)
			ctx, cancel := context.WithTimeout(context.Background(), faultWait)
			defer cancel()
			sb, err := e.sandbox(ctx)
			if err == nil {
				t.Fatalf("create succeeded under the fault (sandbox %s; fault hits %d)", sb.ID(), f.Hits())
			}
			if f.Hits() != 1 {
				t.Fatalf("the fault fired %d times", f.Hits())
			}
			if ctx.Err() != nil {
				t.Fatalf("the create outlived its deadline: %v", err)
			}
			if c := typed(t, "create", err); !oneOf(c, tc.codes...) {
				t.Errorf("create failed with code %q (%v), want one of %v", c, err, tc.codes)
			}
			t.Logf("create failed: %v", err)
			e.noStray(t, ctx, e.rt.Owner(), e.liveSandboxes(t, ctx, e.rt), "after the failed create's rollback")
			f.Remove()
			runs(t, e.mustSandbox(t), "a create after the fault")
			e.finish()
		})
	}
}

// TestFaultsResetMidExec: a process of a sandbox without a warden (a
// Docker exec) whose exec create is reset, whose exec start is reset
// before the daemon sees it, or whose stream is cut right after the daemon
// started it (before the wrapper's first output). Each ends typed within a
// bound (Start fails, or the process ends with a typed reason); none
// hangs.
func TestFaultsResetMidExec(t *testing.T) {
	for _, tc := range []struct {
		name string
		rule func(tok string) faultproxy.Rule
		// journaled: the process reached the journal (its exec was made).
		journaled bool
	}{
		{"exec create reset", func(tok string) faultproxy.Rule {
			return faultproxy.Rule{Match: "POST /containers/", Body: tok, Action: faultproxy.Reset, Times: 1}
		}, false},
		{"exec start reset before the daemon sees it", func(tok string) faultproxy.Rule {
			return faultproxy.Rule{Match: "POST /exec/", Exec: tok, Action: faultproxy.Reset, Times: 1}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newFaultEnv(t, false)
			sb := e.mustSandbox(t)
			tok := token()
			f := e.px.Add(tc.rule(tok))
			ctx, cancel := context.WithTimeout(context.Background(), faultWait)
			defer cancel()
			_, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", "echo never", tok}})
			if f.Hits() != 1 {
				t.Fatalf("the fault fired %d times", f.Hits())
			}
			if ctx.Err() != nil {
				t.Fatalf("Start outlived its deadline: %v", err)
			}
			if c := typed(t, "start", err); c != spec.CodeEngine {
				t.Errorf("start under %s: code %q (%v), want engine", tc.name, c, err)
			}
			if tc.journaled {
				if pr := e.processByToken(t, sb.ID(), tok); pr.Phase != lifecycle.PhaseExited {
					t.Errorf("the process is %s in the journal, want exited", pr.Phase)
				}
			}
			runs(t, sb, "after the fault")
			e.finish()
		})
	}

	// The daemon started the exec (101 sent) and the stream is cut before
	// the wrapper's marker: the process runs, unattached, and must still
	// end within its timeout (it sleeps far longer).
	t.Run("exec stream cut after the daemon started it", func(t *testing.T) {
		e := newFaultEnv(t, false)
		sb := e.mustSandbox(t)
		tok := token()
		f := e.px.Add(faultproxy.Rule{Match: "POST /exec/", Exec: tok, Action: faultproxy.Truncate, N: 0, Times: 1})
		const timeout = 5 * time.Second
		// Bound: the timeout, the stop's grace and room for the Docker
		// calls of a stop, many times over.
		ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
		defer cancel()
		begun := time.Now()
		p, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", "exec sleep 300", tok}, Timeout: timeout})
		if f.Hits() != 1 {
			t.Fatalf("the fault fired %d times", f.Hits())
		}
		switch {
		case ctx.Err() != nil:
			// Evidence: the journal's view of the process and the
			// daemon's view of its exec, well past the timeout.
			pr := e.processByToken(t, sb.ID(), tok)
			ictx, icancel := context.WithTimeout(context.Background(), 10*time.Second)
			st, ierr := e.cli.ContainerExecInspect(ictx, pr.ExecID)
			icancel()
			t.Errorf("BUG: Start did not return within %v (%v after it began) although the process's timeout is %v: "+
				"the exec's stream was cut after the daemon started it, so AttachExec failed and the process actor now only waits for the exec to end by itself "+
				"(a stop before the journaled start signals nothing): the journal holds process %s in phase %q (exec %s, group %d, no stopping intent), "+
				"and the daemon shows that exec running=%v pid=%d (%v): the process runs on past its timeout, unsignalled, and Start blocks until it ends: %v",
				45*time.Second, time.Since(begun).Round(time.Second), timeout, pr.ID, pr.Phase, pr.ExecID, pr.Group, st.Running, st.Pid, ierr, err)
		case err != nil:
			c := typed(t, "start", err)
			t.Logf("start failed after %v: code %s: %v", time.Since(begun).Round(time.Second), c, err)
			// It ran unattached: its group was read back and journaled,
			// then the stop, then it was killed; nothing of it is left.
			pr := e.processByToken(t, sb.ID(), tok)
			if pr.Phase != lifecycle.PhaseExited || pr.Group <= 1 || pr.Stopping == "" || pr.Exit == nil {
				t.Errorf("the unattached process in the journal: phase %s, group %d, stopping %q, exit %+v; want exited after a journaled group and stop", pr.Phase, pr.Group, pr.Stopping, pr.Exit)
			}
			if e.inSandbox(t, sb.ID(), "sleep 300") {
				t.Errorf("the unattached process still runs after Start failed")
			}
		default:
			res, werr := waitBounded(t, p, "cut before the marker")
			if res.Reason != string(lifecycle.ReasonTimeout) && res.Reason != string(lifecycle.ReasonFailed) {
				t.Errorf("reason %s (%v), want timeout or failed", res.Reason, werr)
			}
		}
		runs(t, sb, "after the fault")
		e.finish()
	})
}

// TestFaultsMidStreamExec: the output stream of a process run as a Docker
// exec (a sandbox without a warden) is reset between frames, cut inside a
// frame header, given a frame with an invalid stream id or a length longer
// than what follows, or stalled. A clean cut between frames is the end of
// the output (the process then ends by its timeout, or a stop); a torn or
// malformed frame is a stream_failure that fails the sandbox closed; a
// stall ends by the process's timeout. All within a bound.
func TestFaultsMidStreamExec(t *testing.T) {
	t.Run("reset between frames", func(t *testing.T) {
		e := newFaultEnv(t, false)
		sb := e.mustSandbox(t)
		tk := startTalker(t, sb, 8*time.Second)
		f := e.px.Add(faultproxy.Rule{Match: "POST /exec/", Exec: tk.tok, Action: faultproxy.Reset, Open: true})
		if f.Hits() != 1 {
			t.Fatalf("the open stream was not reset (hits %d)", f.Hits())
		}
		l := tk.next()
		t.Logf("stdout after the reset: %q %v", l.line, l.err)
		res, err := tk.wait("reset between frames")
		// A clean end between frames is the output's end: the process
		// lives on to its timeout. (Had the client seen ECONNRESET instead,
		// a read error is a stream_failure: failed, the sandbox closed.)
		clean := res.Reason == string(lifecycle.ReasonTimeout) && spec.IsCode(err, spec.CodeTimeout)
		torn := res.Reason == string(lifecycle.ReasonFailed) && spec.IsCode(err, spec.CodeStreamFailure)
		if !clean && !torn {
			t.Errorf("reset between frames: reason %s (%v), want timeout (the output ended; the process lived on to its timeout)", res.Reason, err)
		}
		e.exitCodeMatchesDaemon(t, sb.ID(), tk.tok, res)
		if clean {
			runs(t, sb, "after a reset between frames")
		}
		e.finish()
	})

	// The same cut under a process with no timeout: the runtime must not
	// take the cut (nor what the daemon says after it) for the process's
	// end while it runs; a stop then ends it, and the exit code journaled
	// is the one the process died with.
	t.Run("reset between frames, then stopped", func(t *testing.T) {
		e := newFaultEnv(t, false)
		sb := e.mustSandbox(t)
		tk := startTalker(t, sb, 0)
		f := e.px.Add(faultproxy.Rule{Match: "POST /exec/", Exec: tk.tok, Action: faultproxy.Reset, Open: true})
		if f.Hits() != 1 {
			t.Fatalf("the open stream was not reset (hits %d)", f.Hits())
		}
		select {
		case <-tk.p.Done():
			res, err := tk.wait("reset, no timeout")
			if e.inSandbox(t, sb.ID(), "sleep 300") {
				pr := e.processByToken(t, sb.ID(), tk.tok)
				t.Errorf("BUG: process %s is journaled ended (phase %s, reason %s, exit code %d, err %v) while it still runs in its sandbox (ps shows its `sleep 300`)", pr.ID, pr.Phase, res.Reason, res.ExitCode, err)
			}
		case <-time.After(5 * time.Second):
			ctx, cancel := context.WithTimeout(context.Background(), faultWait)
			defer cancel()
			if err := tk.p.Stop(ctx); err != nil {
				t.Errorf("stopping it: %v", err)
			}
			res, err := tk.wait("stopped after the reset")
			if res.Reason != string(lifecycle.ReasonSignaled) || err != nil {
				t.Errorf("stopped after the reset: reason %s (%v), want signaled", res.Reason, err)
			}
			if e.inSandbox(t, sb.ID(), "sleep 300") {
				t.Errorf("the stopped process still runs")
			}
			e.exitCodeMatchesDaemon(t, sb.ID(), tk.tok, res)
		}
		e.finish()
	})

	for _, tc := range []struct {
		name string
		rule faultproxy.Rule
	}{
		{"torn frame header", faultproxy.Rule{Action: faultproxy.Truncate, N: 3}},
		{"invalid stream id", faultproxy.Rule{Action: faultproxy.CorruptStream}},
		{"length longer than what follows", faultproxy.Rule{Action: faultproxy.CorruptLength}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newFaultEnv(t, false)
			sb := e.mustSandbox(t)
			tk := startTalker(t, sb, time.Minute)
			r := tc.rule
			r.Match, r.Exec, r.Open = "POST /exec/", tk.tok, true
			f := e.px.Add(r)
			if f.Hits() != 1 {
				t.Fatalf("the rule did not take the open stream (hits %d)", f.Hits())
			}
			if err := tk.poke(); err != nil {
				t.Fatalf("stdin: %v", err)
			}
			// The payload a frame carried before it proved torn is
			// delivered (those bytes are the daemon's); then the stream
			// fails.
			l := tk.next()
			for l.err == nil {
				t.Logf("stdout before the failure: %q", l.line)
				l = tk.next()
			}
			if !spec.IsCode(l.err, spec.CodeStreamFailure) {
				t.Errorf("stdout ended with %v, want stream_failure", l.err)
			}
			res, err := tk.wait(tc.name)
			if res.Reason != string(lifecycle.ReasonFailed) || !spec.IsCode(err, spec.CodeStreamFailure) {
				t.Errorf("%s: reason %s err %v; want failed with stream_failure", tc.name, res.Reason, err)
			}
			// A stream that cannot be trusted fails the sandbox closed.
			st := eventuallyPhase(t, sb, lifecycle.PhaseExited)
			if st.Stopping != lifecycle.ReasonFailed {
				t.Errorf("the sandbox stopped with reason %q, want failed", st.Stopping)
			}
			// The process was killed (SIGKILL) as its attach dropped.
			e.exitCodeMatchesDaemon(t, sb.ID(), tk.tok, res)
			e.finish()
		})
	}

	t.Run("stalled stream", func(t *testing.T) {
		e := newFaultEnv(t, false)
		sb := e.mustSandbox(t)
		tk := startTalker(t, sb, 6*time.Second)
		f := e.px.Add(faultproxy.Rule{Match: "POST /exec/", Exec: tk.tok, Action: faultproxy.Stall, Open: true})
		if f.Hits() != 1 {
			t.Fatalf("the stall did not take the open stream (hits %d)", f.Hits())
		}
		_ = tk.poke()
		res, err := tk.wait("stalled stream")
		if res.Reason != string(lifecycle.ReasonTimeout) || !spec.IsCode(err, spec.CodeTimeout) {
			t.Errorf("stalled stream: reason %s err %v; want timeout", res.Reason, err)
		}
		runs(t, sb, "after a stalled stream")
		e.finish()
	})
}

// TestFaultsWardenLink: the warden's link is a Docker exec stream too.
// Resetting it, corrupting its frames or stalling it ends the link: the
// processes on it end (lost, or by their timeout once the link is given
// up), the loss is journaled, and the next launch gets a new warden. A new
// warden whose handshake stalls holds the launch only until its caller's
// deadline, and one whose stream is cut fails the launch typed; the launch
// after works.
func TestFaultsWardenLink(t *testing.T) {
	for _, tc := range []struct {
		name string
		rule faultproxy.Rule
	}{
		{"reset", faultproxy.Rule{Action: faultproxy.Reset}},
		{"invalid stream id", faultproxy.Rule{Action: faultproxy.CorruptStream}},
		{"length longer than what follows", faultproxy.Rule{Action: faultproxy.CorruptLength}},
		{"torn frame header", faultproxy.Rule{Action: faultproxy.Truncate, N: 3}},
		{"stall", faultproxy.Rule{Action: faultproxy.Stall}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newFaultEnv(t, true)
			sb := e.mustSandbox(t)
			_, before := history(t, e.rt, sb.ID())
			timeout := time.Minute
			if tc.rule.Action == faultproxy.Stall {
				timeout = 6 * time.Second
			}
			tk := startTalker(t, sb, timeout)
			r := tc.rule
			// Times 1: the open link only, not the next warden's.
			r.Match, r.Exec, r.Open, r.Times = "POST /exec/", wardenServe, true, 1
			f := e.px.Add(r)
			if f.Hits() != 1 {
				t.Fatalf("the rule did not take the warden's open stream (hits %d)", f.Hits())
			}
			_ = tk.poke() // the warden's next frame carries "two"
			l := tk.next()
			t.Logf("stdout after the fault: %q %v", l.line, l.err)
			res, err := tk.wait(tc.name)
			want := []string{string(lifecycle.ReasonLost)}
			if tc.rule.Action == faultproxy.Stall {
				// The stop at the timeout goes out on the link, the reap
				// report never comes back: the link is given up.
				want = append(want, string(lifecycle.ReasonTimeout))
			}
			if !oneOf(spec.Code(res.Reason), toCodes(want)...) || !spec.IsCode(err, spec.CodeStreamFailure) {
				t.Errorf("%s: reason %s err %v; want %v with stream_failure", tc.name, res.Reason, err, want)
			}
			runs(t, sb, "after the warden's link broke")
			_, after := history(t, e.rt, sb.ID())
			if after["sandbox.warden_lost"] != before["sandbox.warden_lost"]+1 || after["sandbox.warden_started"] != before["sandbox.warden_started"]+1 {
				t.Errorf("warden history: lost %d→%d, started %d→%d; want one more of each", before["sandbox.warden_lost"], after["sandbox.warden_lost"], before["sandbox.warden_started"], after["sandbox.warden_started"])
			}
			e.finish()
		})
	}

	// After a loss, the next launch starts a new warden; a stall in its
	// handshake holds the launch until the caller's deadline (typed), and
	// once the stall lifts the new warden serves.
	t.Run("new warden's handshake stalled", func(t *testing.T) {
		e, sb := wardenLost(t)
		stall := e.px.Add(faultproxy.Rule{Match: "POST /exec/", Exec: wardenServe, Action: faultproxy.Stall, Times: 1})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := sb.Start(ctx, spec.Process{Argv: []string{"echo", "never"}})
		if stall.Hits() != 1 {
			t.Fatalf("the new warden's stream was not stalled (hits %d)", stall.Hits())
		}
		if c := typed(t, "launch under a stalled handshake", err); !oneOf(c, spec.CodeCancelled, spec.CodeTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("launch under a stalled handshake: code %q (%v), want the caller's deadline", c, err)
		}
		stall.Remove() // the handshake goes on
		runs(t, sb, "after the stall lifted")
		e.finish()
	})

	t.Run("new warden's stream cut at relaunch", func(t *testing.T) {
		e, sb := wardenLost(t)
		cut := e.px.Add(faultproxy.Rule{Match: "POST /exec/", Exec: wardenServe, Action: faultproxy.Truncate, N: 0, Times: 1})
		ctx, cancel := context.WithTimeout(context.Background(), faultWait)
		defer cancel()
		_, err := sb.Start(ctx, spec.Process{Argv: []string{"echo", "never"}})
		if cut.Hits() != 1 {
			t.Fatalf("the new warden's stream was not cut (hits %d)", cut.Hits())
		}
		if ctx.Err() != nil {
			t.Fatalf("the launch outlived its deadline: %v", err)
		}
		if c := typed(t, "launch with the new warden's stream cut", err); !oneOf(c, spec.CodeStreamFailure, spec.CodeEngine) {
			t.Errorf("launch with the new warden's stream cut: code %q (%v)", c, err)
		}
		runs(t, sb, "after the new warden's stream was cut")
		e.finish()
	})
}

// wardenServe matches the warden exec's create body: Cmd
// [".../stockade-warden","serve"].
const wardenServe = `"serve"`

// wardenLost is a fault env with a warden whose link was reset under a
// running process (which has ended): the next launch starts a new warden.
func wardenLost(t *testing.T) (*faultEnv, *stockade.Sandbox) {
	t.Helper()
	e := newFaultEnv(t, true)
	sb := e.mustSandbox(t)
	tk := startTalker(t, sb, time.Minute)
	if f := e.px.Add(faultproxy.Rule{Match: "POST /exec/", Exec: wardenServe, Action: faultproxy.Reset, Open: true, Times: 1}); f.Hits() != 1 {
		t.Fatalf("the warden's link was not reset (hits %d)", f.Hits())
	}
	// How the reset ended the talker is logged by wait; the callers check
	// the sandbox after it.
	_, _ = tk.wait("link reset")
	return e, sb
}

func toCodes(ss []string) []spec.Code {
	out := make([]spec.Code, len(ss))
	for i, s := range ss {
		out[i] = spec.Code(s)
	}
	return out
}

// TestFaultsSlowReplies: replies slowed under the deadlines are only slow;
// a reply slower than the caller's deadline fails the call with a timeout
// (the request is abandoned, nothing is left of it); a create slower than
// its caller's wait goes on in the runtime and is listed when done; an exec
// start slower than the process's timeout ends the process by its timeout.
func TestFaultsSlowReplies(t *testing.T) {
	t.Run("slow but within the deadlines", func(t *testing.T) {
		e := newFaultEnv(t, true)
		var fs []*faultproxy.Fault
		for _, m := range []string{"GET /images/", "POST /containers/create", "POST /volumes/create", "POST /exec/", "GET /containers/"} {
			fs = append(fs, e.px.Add(faultproxy.Rule{Match: m, Action: faultproxy.Delay, D: 300 * time.Millisecond}))
		}
		ctx, cancel := context.WithTimeout(context.Background(), faultWait)
		defer cancel()
		sb, err := e.rt.CreateSandbox(ctx, spec.Sandbox{Image: dockertest.ImageTag, Policy: testkit.SmallPolicy(), Lifetime: spec.Kept})
		if err != nil {
			t.Fatalf("a slow create failed: %v", err)
		}
		runs(t, sb, "with slow replies")
		for _, f := range fs {
			if f.Hits() == 0 {
				t.Errorf("no request delayed by %q", f.Rule().Match)
			}
		}
		e.finish()
	})

	t.Run("image inspect slower than the caller's deadline", func(t *testing.T) {
		e := newFaultEnv(t, true)
		// By tag: image IDs are cached, a tag is inspected every time.
		f := e.px.Add(faultproxy.Rule{Match: "GET /images/", Action: faultproxy.Delay, D: time.Minute, Times: 1})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := e.rt.CreateSandbox(ctx, spec.Sandbox{Image: dockertest.ImageTag, Policy: testkit.SmallPolicy(), Lifetime: spec.Kept})
		if f.Hits() != 1 {
			t.Fatalf("the image inspect was not delayed (hits %d)", f.Hits())
		}
		if c := typed(t, "create", err); c != spec.CodeTimeout || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("create with the image inspect slower than its deadline: code %q (%v), want timeout", c, err)
		}
		if got := e.ownedBySandbox(t, context.Background(), e.rt.Owner()); len(got) != 0 {
			t.Errorf("a create that timed out before it began left resources: %v", got)
		}
		e.finish()
	})

	t.Run("put slower than the caller's deadline", func(t *testing.T) {
		e := newFaultEnv(t, true)
		sb := e.mustSandbox(t)
		f := e.px.Add(faultproxy.Rule{Match: "PUT /containers/", Action: faultproxy.Delay, D: time.Minute, Times: 1})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		err := sb.Put(ctx, "work", strings.NewReader(emptyTar))
		if f.Hits() != 1 {
			t.Fatalf("the put was not delayed (hits %d)", f.Hits())
		}
		// The caller's deadline: Put says cancelled (the sandbox's
		// answer did not come in time), wrapping the deadline.
		if c := typed(t, "put", err); !oneOf(c, spec.CodeTimeout, spec.CodeCancelled) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("put slower than its deadline: code %q (%v), want the caller's deadline", c, err)
		}
		t.Logf("put: %v", err)
		runs(t, sb, "after a timed-out put")
		e.finish()
	})

	t.Run("create slower than the caller's wait", func(t *testing.T) {
		e := newFaultEnv(t, true)
		f := e.px.Add(faultproxy.Rule{Match: "POST /containers/create", Body: `"io.stockade.role":"workload"`, Action: faultproxy.Delay, D: 6 * time.Second, Times: 1})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := e.sandbox(ctx)
		if f.Hits() != 1 {
			t.Fatalf("the workload create was not delayed (hits %d)", f.Hits())
		}
		c := typed(t, "create", err)
		if !oneOf(c, spec.CodeTimeout, spec.CodeCancelled) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("create slower than the caller's wait: code %q (%v), want the caller's deadline", c, err)
		}
		t.Logf("the caller's wait ended: code %s: %v", c, err)
		// The create goes on in the runtime (the error says so): it is
		// listed, and reaches started once the slow reply came.
		deadline := time.Now().Add(faultWait)
		for {
			var found *stockade.Sandbox
			for id := range e.liveSandboxes(t, context.Background(), e.rt) {
				found, _ = e.rt.Sandbox(context.Background(), id) // ctx has ended: the caller gave up
			}
			if found != nil {
				st := eventuallyPhase(t, found, lifecycle.PhaseStarted)
				t.Logf("the abandoned create went on: sandbox %s is %s", st.ID, st.Phase)
				runs(t, found, "the create the caller gave up on")
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the create the caller gave up on is not listed")
			}
			time.Sleep(100 * time.Millisecond)
		}
		e.finish()
	})

	t.Run("exec start slow, under the process's timeout", func(t *testing.T) {
		e := newFaultEnv(t, false)
		sb := e.mustSandbox(t)
		tok := token()
		f := e.px.Add(faultproxy.Rule{Match: "POST /exec/", Exec: tok, Action: faultproxy.Delay, D: time.Second, Times: 1})
		out, _, res, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"sh", "-c", "echo slow-but-fine", tok}, Timeout: time.Minute})
		if f.Hits() != 1 || err != nil || res.Reason != "exited" || res.ExitCode != 0 || out != "slow-but-fine\n" {
			t.Errorf("a start delayed 1 s (hits %d): out %q reason %s code %d err %v", f.Hits(), out, res.Reason, res.ExitCode, err)
		}
		e.finish()
	})

	t.Run("exec start slower than the process's timeout", func(t *testing.T) {
		e := newFaultEnv(t, false)
		sb := e.mustSandbox(t)
		tok := token()
		f := e.px.Add(faultproxy.Rule{Match: "POST /exec/", Exec: tok, Action: faultproxy.Delay, D: 6 * time.Second, Times: 1})
		ctx, cancel := context.WithTimeout(context.Background(), faultWait)
		defer cancel()
		p, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", "exec sleep 300", tok}, Timeout: 2 * time.Second})
		if f.Hits() != 1 {
			t.Fatalf("the fault fired %d times", f.Hits())
		}
		if err != nil {
			if c := typed(t, "start", err); c != spec.CodeTimeout {
				t.Errorf("start delayed past the timeout: code %q (%v), want timeout", c, err)
			}
		} else {
			go func() { _, _ = io.Copy(io.Discard, p.Stdout()) }()
			go func() { _, _ = io.Copy(io.Discard, p.Stderr()) }()
			res, err := waitBounded(t, p, "start delayed past the timeout")
			if res.Reason != string(lifecycle.ReasonTimeout) || !spec.IsCode(err, spec.CodeTimeout) {
				t.Errorf("start delayed past the timeout: reason %s, err %v; want timeout", res.Reason, err)
			}
		}
		e.finish()
	})
}

// TestFaultsEventStream: the runtime's Docker event stream (die and
// exec_die) is cut, or stalls (open, silent). A cut stream is subscribed
// again; either way processes still end (their end is confirmed by
// inspect), and a workload that dies on its own is noticed: by its event,
// or, when none can come, at the next launch, which fails typed.
func TestFaultsEventStream(t *testing.T) {
	kill := func(t *testing.T, e *faultEnv, sb *stockade.Sandbox) {
		t.Helper()
		st, err := e.rt.ReplaySandbox(t.Context(), sb.ID(), 0)
		if err != nil || st.Created == nil {
			t.Fatalf("sandbox %s: %v", sb.ID(), err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), faultWait)
		defer cancel()
		if err := e.cli.ContainerKill(ctx, st.Created.Workload, "KILL"); err != nil {
			t.Fatalf("killing the workload behind the runtime's back: %v", err)
		}
	}
	t.Run("cut", func(t *testing.T) {
		f := faultproxy.Rule{Match: "GET /events", Action: faultproxy.Truncate, N: 0, Times: 1}
		e := newFaultEnvWith(t, false, f)
		sb := e.mustSandbox(t)
		testutil.Eventually(t, "the event stream to be cut", func() bool { return e.pre[0].Hits() == 1 })
		runs(t, sb, "after the event stream was cut")
		kill(t, e, sb)
		st := eventuallyPhase(t, sb, lifecycle.PhaseExited)
		t.Logf("the killed workload was noticed: %s (%s)", st.Phase, st.Stopping)
		e.finish()
	})
	t.Run("stalled", func(t *testing.T) {
		f := faultproxy.Rule{Match: "GET /events", Action: faultproxy.Stall, N: 0}
		e := newFaultEnvWith(t, false, f)
		sb := e.mustSandbox(t)
		testutil.Eventually(t, "the event stream to be stalled", func() bool { return e.pre[0].Hits() >= 1 })
		runs(t, sb, "with the event stream stalled")
		kill(t, e, sb)
		// No die event can come. Within a bound, the next launch finds
		// the workload gone.
		ctx, cancel := context.WithTimeout(context.Background(), faultWait)
		defer cancel()
		select {
		case <-time.After(5 * time.Second):
		case <-ctx.Done():
		}
		st, _ := sb.State(ctx)
		t.Logf("5 s after the kill, with no event: the sandbox is %s", st.Phase)
		_, err := sb.Start(ctx, spec.Process{Argv: []string{"true"}})
		if ctx.Err() != nil {
			t.Fatalf("a launch into a dead workload outlived its deadline: %v", err)
		}
		if err == nil {
			t.Errorf("a launch into a dead workload succeeded")
		} else {
			t.Logf("the launch into the dead workload: code %s: %v", typed(t, "launch", err), err)
		}
		st = eventuallyPhase(t, sb, lifecycle.PhaseExited)
		t.Logf("the killed workload was noticed: %s (%s)", st.Phase, st.Stopping)
		e.finish()
	})
}

// TestFaultsVerifyLiveJournal: Runtime.Verify (the server's
// Journal.Verify) while the runtime appends must not report a sound
// journal corrupt. It runs bbolt's Tx.Check in a read-only transaction,
// which bbolt documents as unsafe with concurrent writers: pages freed by a
// later commit look "reachable freed" to it. (Found by these tests: a
// verify just after a recovery, while re-adopted processes journaled,
// reported the journal corrupt.)
func TestFaultsVerifyLiveJournal(t *testing.T) {
	e := newFaultEnv(t, true)
	sb := e.mustSandbox(t)
	var (
		mu      sync.Mutex
		reports []error
		checks  int
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			err := e.rt.Verify(t.Context())
			mu.Lock()
			checks++
			if err != nil {
				reports = append(reports, err)
			}
			mu.Unlock()
		}
	}()
	// Appends: short processes, four at a time, until the verifier has
	// complained or 200 processes have run.
	for round := 0; round < 50; round++ {
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, _, res, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
					t.Errorf("a process beside the verifier: %+v %v", res, err)
				}
			}()
		}
		wg.Wait()
		mu.Lock()
		n := len(reports)
		mu.Unlock()
		if n > 0 {
			break
		}
	}
	close(stop)
	<-done
	e.closeRuntime()
	j, err := journal.Open(e.journal, journal.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	offline := inspect.New(j).Verify(t.Context())
	_ = j.Close()
	t.Logf("%d verifications while appending, %d reported problems; offline verify after close: %v", checks, len(reports), offline)
	if checks == 0 {
		t.Fatal("no verification ran while the runtime appended: the test did not test")
	}
	if len(reports) > 0 && offline == nil {
		t.Errorf("BUG: Runtime.Verify reported a sound journal corrupt while the runtime appended (%d of %d verifications; the same file verifies clean once closed): "+
			"journal.Verify runs bbolt's Tx.Check inside a read-only transaction (j.db.View), which bbolt documents as unsafe with concurrent write transactions "+
			"(under -race it is also a data race: Tx.Check reads the freelist's map while the committer's Tx.Commit writes it); first report: %v",
			len(reports), checks, reports[0])
	}
	if offline != nil {
		t.Errorf("the journal does not verify offline: %v", offline)
	}
	e.open()
	e.finish()
}

// emptyTar is a tar stream of one empty file.
var emptyTar = func() string {
	var b strings.Builder
	tw := tar.NewWriter(&b)
	// A fixed, valid header into a strings.Builder: an error is a bug here.
	if err := tw.WriteHeader(&tar.Header{Name: "empty", Mode: 0o644, Typeflag: tar.TypeReg}); err != nil {
		panic(err)
	}
	if err := tw.Close(); err != nil {
		panic(err)
	}
	return b.String()
}()

// processByToken finds, in the journal, the process of sandbox sbID whose
// argv holds tok.
func (e *faultEnv) processByToken(t *testing.T, sbID, tok string) lifecycle.Process {
	t.Helper()
	h, err := e.rt.History(t.Context(), sbID)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range h {
		if ev.Kind != "process" {
			continue
		}
		p, err := e.rt.ReplayProcess(t.Context(), ev.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range p.Spec.Argv {
			if a == tok {
				return p
			}
		}
	}
	t.Fatalf("no process of sandbox %s has %s in its argv", sbID, tok)
	return lifecycle.Process{}
}

// inSandbox reports whether a process whose command line holds substr runs
// in the sandbox's workload (ps, through a direct exec).
func (e *faultEnv) inSandbox(t *testing.T, sbID, substr string) bool {
	t.Helper()
	st, err := e.rt.ReplaySandbox(t.Context(), sbID, 0)
	if err != nil || st.Created == nil {
		t.Fatalf("sandbox %s: %v", sbID, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), faultWait)
	defer cancel()
	ex, err := e.cli.ContainerExecCreate(ctx, st.Created.Workload, container.ExecOptions{Cmd: []string{"ps", "-o", "pid,args"}, AttachStdout: true, AttachStderr: true})
	if err != nil {
		t.Fatalf("ps in sandbox %s: %v", sbID, err)
	}
	hj, err := e.cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		t.Fatalf("ps in sandbox %s: %v", sbID, err)
	}
	defer hj.Close()
	var out, errb strings.Builder
	_, _ = framing.Copy(&out, &errb, hj.Reader)
	t.Logf("ps in sandbox %s:\n%s", sbID, out.String())
	return strings.Contains(out.String(), substr)
}

// exitCodeMatchesDaemon compares the exit code journaled for the process
// whose argv holds tok with the one the daemon's exec_die event carried
// (the process's real exit status). Docker 20.10 also marks an exec whose
// attach connection dropped as ended with code 126 once its streams end,
// racing the real exit: dockerio/doc.go lists this trap (the "phantom
// 126"); the journal must hold the real code.
func (e *faultEnv) exitCodeMatchesDaemon(t *testing.T, sbID, tok string, res spec.Result) {
	t.Helper()
	pr := e.processByToken(t, sbID, tok)
	st, err := e.rt.ReplaySandbox(t.Context(), sbID, 0)
	if err != nil || st.Created == nil {
		t.Fatalf("sandbox %s: %v", sbID, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f := filters.NewArgs(filters.Arg("type", "container"), filters.Arg("container", st.Created.Workload), filters.Arg("event", "exec_die"))
	msgs, errs := e.cli.Events(ctx, events.ListOptions{Filters: f, Since: pr.Reserved.Add(-time.Second).Format(time.RFC3339Nano), Until: time.Now().Add(time.Second).Format(time.RFC3339Nano)})
	for {
		select {
		case m := <-msgs:
			if m.Actor.Attributes["execID"] != pr.ExecID {
				continue
			}
			code := m.Actor.Attributes["exitCode"]
			ins, ierr := e.cli.ContainerExecInspect(ctx, pr.ExecID)
			t.Logf("process %s: journaled exit code %d; the daemon's exec_die event says %s; its inspect says running=%v code %d (%v)", pr.ID, res.ExitCode, code, ins.Running, ins.ExitCode, ierr)
			if code == "127" && ierr == nil && ins.ExitCode == 126 {
				// The dropped attach's cleanup ran first: the event's 127
				// is the daemon's "no such exec", and no code is known.
				if res.ExitCode != -1 {
					t.Errorf("process %s: journaled exit code %d, but the daemon knows none (exec_die 127 after its phantom 126): want none journaled", pr.ID, res.ExitCode)
				}
				return
			}
			if code != fmt.Sprint(res.ExitCode) {
				t.Errorf("BUG: process %s (reason %s) is journaled with exit code %d, but the daemon's exec_die event for its exec %s says it exited %s, and the exec's inspect says %d: "+
					"after its attach connection dropped, Docker 20.10 set the exec's exit code to 126 (the phantom 126 that dockerio/doc.go lists), and the process actor took the inspect's code over the exec_die event's",
					pr.ID, res.Reason, res.ExitCode, pr.ExecID, code, ins.ExitCode)
			}
			return
		case err := <-errs:
			// The process has ended: its exec_die must be in the log.
			t.Errorf("process %s: no exec_die event of exec %s from the daemon (%v); journaled exit code %d: nothing to compare it with", pr.ID, pr.ExecID, err, res.ExitCode)
			return
		}
	}
}
