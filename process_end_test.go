package stockade_test

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/actors"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// TestFakeOOMReason: a process the OOM killer ends (a SIGKILL nobody of ours
// sent, the sandbox's OOM kill count risen since it started) ends oom; one
// killed by its caller's SIGKILL ends signaled though the count rose too.
func TestFakeOOMReason(t *testing.T) {
	f := testutil.NewFake(t)
	f.Script = func(_ dockerio.Sandbox, req dockerio.ExecRequest) dockerio.FakeRun {
		if req.Spec.Argv[0] == "hog" {
			return dockerio.FakeRun{OOM: true, Frames: []dockerio.FakeFrame{{Stream: framing.Stdout, Data: []byte("eating")}}}
		}
		return dockerio.FakeRun{Hold: make(chan struct{})}
	}
	rt := testutil.OpenFake(t, f, "")
	ctx := context.Background()
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
	// Started before the OOM kill: its own SIGKILL is no OOM kill.
	held := mustStart(t, sb, spec.Process{Argv: []string{"hold"}, Stdout: spec.Discard, Stderr: spec.Discard})
	out, _, res, err := run(t, sb, spec.Process{Argv: []string{"hog"}})
	if err != nil || out != "eating" || res.Reason != string(lifecycle.ReasonOOM) || res.ExitCode != 137 {
		t.Fatalf("hog: %q %+v %v, want oom with 137", out, res, err)
	}
	if err := held.Signal(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if res, err := held.Wait(ctx); err != nil || res.Reason != string(lifecycle.ReasonSignaled) || res.ExitCode != 137 {
		t.Fatalf("killed by its caller: %+v %v, want signaled", res, err)
	}
}

// TestFakeDaemonTroubleIsNotLost: while the daemon fails every inspect of an
// exec for longer than any fixed retry budget, the process is not declared
// lost: once the daemon answers, its real exit is journaled.
func TestFakeDaemonTroubleIsNotLost(t *testing.T) {
	f := newExecFake(t)
	release := make(chan struct{})
	f.Script = func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun {
		return dockerio.FakeRun{ExitCode: 4, Hold: release}
	}
	var failures atomic.Int32
	f.Fault = func(op string) error {
		if op == "InspectExec" && failures.Load() < 6 {
			failures.Add(1)
			return spec.Errorf(spec.CodeEngine, "test", "the daemon timed out")
		}
		return nil
	}
	rt := testutil.OpenFake(t, f, "")
	ctx := context.Background()
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
	p := mustStart(t, sb, spec.Process{Argv: []string{"x"}, Stdout: spec.Discard, Stderr: spec.Discard})
	close(release)
	res, err := p.Wait(ctx)
	if err != nil || res.Reason != string(lifecycle.ReasonExited) || res.ExitCode != 4 {
		t.Fatalf("%+v %v, want exited 4", res, err)
	}
	if failures.Load() < 6 {
		t.Fatalf("only %d inspects failed: the test did not test", failures.Load())
	}
}

// TestFakeKillHasItsIntent: a process whose stopping intent cannot be
// journaled is not signalled (nothing is killed that the journal does not
// say is being stopped); the stop fails with the journal's error.
func TestFakeKillHasItsIntent(t *testing.T) {
	f, signals := holdingFake(t)
	defer stockade.WrapJournal(func(j actorsJournal) actorsJournal {
		return &refusingJournal{actorsJournal: j, typ: lifecycle.ProcessStopping{}.Type()}
	})()
	rt := testutil.OpenFake(t, f, "")
	ctx := context.Background()
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
	p := mustStart(t, sb, spec.Process{Argv: []string{"x"}, Stdout: spec.Discard, Stderr: spec.Discard})
	if err := p.Stop(ctx); !spec.IsCode(err, spec.CodeJournal) {
		t.Fatalf("stop: %v, want the journal's error", err)
	}
	if n := signals.Load(); n != 0 {
		t.Fatalf("%d signals sent without a journaled intent", n)
	}
	st, err := stockade.FoldProcess(rt, p.ID())
	if err != nil || st.Phase != lifecycle.PhaseStarted {
		t.Fatalf("process left %s %v, want started (for recovery)", st.Phase, err)
	}
}

// refusingJournal fails every append of type typ.
type refusingJournal struct {
	actorsJournal
	typ string
}

func (r *refusingJournal) Append(ctx context.Context, recs ...journal.Record) ([]journal.Event, error) {
	if recs[0].Type == r.typ {
		return nil, spec.Errorf(spec.CodeJournal, "journal.append", "the disk is full")
	}
	return r.actorsJournal.Append(ctx, recs...)
}

type actorsJournal = actors.Journal

// stdinPanics wraps the Fake so a process with stdin makes its process
// actor panic right after its start is journaled (a bug of ours).
type stdinPanics struct{ *dockerio.Fake }

type stdinPanicAttachment struct{ dockerio.Attachment }

func (stdinPanicAttachment) Stdin() io.Writer { panic("process actor bug") }

func (p stdinPanics) AttachExec(ctx context.Context, sb dockerio.Sandbox, id string, req dockerio.ExecRequest) (dockerio.Attachment, error) {
	a, err := p.Fake.AttachExec(ctx, sb, id, req)
	if err != nil || !req.Spec.Stdin {
		return a, err
	}
	return stdinPanicAttachment{a}, nil
}

// TestFakeFailedProcessActorKilledAfterIntent: the sandbox settles a process
// whose actor panicked once it ran: its stopping intent is journaled before
// its group is killed, then its end.
func TestFakeFailedProcessActorKilledAfterIntent(t *testing.T) {
	f, killed := holdingFake(t)
	f.NoWarden = true // the exec transport: AttachExec panics
	rt, err := stockade.Open(context.Background(), stockade.Options{Journal: filepath.Join(t.TempDir(), "j.db"), Engine: stdinPanics{f}, StopGrace: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rt.Close() }() // teardown
	ctx := context.Background()
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := sb.Start(sctx, spec.Process{Argv: []string{"x"}, Stdin: true}); err == nil {
		t.Fatal("a process whose actor failed started")
	}
	var types []string
	testutil.Eventually(t, "the failed process settled", func() bool {
		types = historyTypes(t, rt, sb.ID(), journal.KindProcess)
		return len(types) > 0 && types[len(types)-1] == "process.exited" && killed.Load() > 0
	})
	if got, want := strings.Join(types, " "), "process.reserved process.exec_created process.started process.stopping process.exited"; got != want {
		t.Fatalf("process history\n got %s\nwant %s", got, want)
	}
}

// holdingFake runs every process until it is signalled, and counts the
// signals sent.
func holdingFake(t *testing.T) (*dockerio.Fake, *atomic.Int32) {
	f := testutil.NewFake(t)
	f.Script = func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun {
		return dockerio.FakeRun{Hold: make(chan struct{})}
	}
	var signals atomic.Int32
	f.Fault = func(op string) error {
		if op == "SignalGroup" {
			signals.Add(1)
		}
		return nil
	}
	return f, &signals
}

// TestFakeForgottenExecTakesItsDieCode: an exec the daemon forgot by the
// time it is inspected (its container exited; or minutes passed) ends with
// the code its exec_die event carried, not lost.
func TestFakeForgottenExecTakesItsDieCode(t *testing.T) {
	f := testutil.NewFake(t)
	release := make(chan struct{})
	f.Script = func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun {
		return dockerio.FakeRun{ExitCode: 4, Hold: release}
	}
	var forget atomic.Value // exec id
	f.Fault = func(op string) error {
		if id, ok := forget.Load().(string); ok && op == "InspectExec" {
			f.ForgetExec(id)
		}
		return nil
	}
	rt := testutil.OpenFake(t, f, "")
	ctx := context.Background()
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
	p := mustStart(t, sb, spec.Process{Argv: []string{"x"}, Stdout: spec.Discard, Stderr: spec.Discard})
	st, err := stockade.FoldProcess(rt, p.ID())
	if err != nil {
		t.Fatal(err)
	}
	forget.Store(st.ExecID)
	close(release)
	if res, err := p.Wait(ctx); err != nil || res.Reason != string(lifecycle.ReasonExited) || res.ExitCode != 4 {
		t.Fatalf("%+v %v, want exited 4 from the exec_die event", res, err)
	}
}

// TestFakeAttachLostIsKilled: an attach cut after the daemon started the
// exec (no marker read) leaves a process that runs with nobody reading its
// output and no journaled group. The actor reads its group back, journals
// it started and the stop, and kills it: Start fails typed instead of
// waiting for a process that may never end, and nothing keeps running.
func TestFakeAttachLostIsKilled(t *testing.T) {
	f := newExecFake(t)
	hold := make(chan struct{}) // never closed: only a signal ends it
	f.Script = func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun {
		return dockerio.FakeRun{AttachLost: true, Hold: hold}
	}
	rt := testutil.OpenFake(t, f, "")
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := sb.Start(ctx, spec.Process{Argv: []string{"sleep", "300"}})
	if ctx.Err() != nil {
		t.Fatalf("Start blocked on a process nobody can read: %v", err)
	}
	if !spec.IsCode(err, spec.CodeEngine) {
		t.Fatalf("Start: %v, want the attach's engine error", err)
	}
	h, err := rt.History(t.Context(), sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	var pid string
	for _, ev := range h {
		if ev.Kind == "process" {
			types = append(types, ev.Type)
			pid = ev.ID
		}
	}
	got := strings.Join(types, " ")
	for _, want := range []string{"process.started", "process.stopping", "process.exited"} {
		if !strings.Contains(got, want) {
			t.Errorf("the process's history %q lacks %s", got, want)
		}
	}
	p, err := rt.ReplayProcess(t.Context(), pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	if p.Phase != lifecycle.PhaseExited || p.Exit == nil || p.Exit.ExitCode == nil || *p.Exit.ExitCode != 137 || p.Exit.Reason != lifecycle.ReasonFailed {
		t.Fatalf("journaled %+v, want exited failed with 137 (killed)", p.Exit)
	}
}

// TestFakePhantom126IsNotJournaled: after a lost attach Docker 20.10
// inspects the exec as ended with 126 while it runs on, and the exec_die
// of its real end says 127. Neither is journaled: the process is found
// running (its group read back), stopped and killed, and it ends with no
// exit code, since nobody knows the real one.
func TestFakePhantom126IsNotJournaled(t *testing.T) {
	f := newExecFake(t)
	hold := make(chan struct{})
	f.Script = func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun {
		return dockerio.FakeRun{AttachLost: true, Phantom126: true, Hold: hold}
	}
	rt := testutil.OpenFake(t, f, "")
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := sb.Start(ctx, spec.Process{Argv: []string{"sleep", "300"}}); ctx.Err() != nil || !spec.IsCode(err, spec.CodeEngine) {
		t.Fatalf("Start: %v, want the attach's engine error in time", err)
	}
	p := onlyProcess(t, rt, sb.ID())
	if p.Phase != lifecycle.PhaseExited || p.Group <= 1 || p.Stopping != lifecycle.ReasonFailed || p.Exit == nil || p.Exit.ExitCode != nil || p.Exit.Reason != lifecycle.ReasonFailed {
		t.Fatalf("journaled %+v (exit %+v), want started with its group, stopped, exited failed with no code", p, p.Exit)
	}
}

// TestFakeAttachLostGroupUnreadable: a process that runs unattached and
// whose group cannot be read back (the daemon fails, or the workload
// removed the record) cannot be signalled: its sandbox is failed closed,
// and the sandbox's stop ends it.
func TestFakeAttachLostGroupUnreadable(t *testing.T) {
	f := newExecFake(t)
	hold := make(chan struct{})
	f.Script = func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun {
		return dockerio.FakeRun{AttachLost: true, Hold: hold}
	}
	var reads atomic.Int32
	f.Fault = func(op string) error {
		if op == "ReadGroup" {
			reads.Add(1)
			return spec.Errorf(spec.CodeEngine, "test", "the daemon cannot run the read")
		}
		return nil
	}
	rt := testutil.OpenFake(t, f, "")
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := sb.Start(ctx, spec.Process{Argv: []string{"sleep", "300"}}); ctx.Err() != nil || err == nil {
		t.Fatalf("Start: %v, want an error in time", err)
	}
	if n := reads.Load(); n < 5 {
		t.Fatalf("the group was read %d times before the sandbox was failed closed, want 5", n)
	}
	st, err := sb.State(ctx)
	if err != nil || st.Stopping != lifecycle.ReasonFailed {
		t.Fatalf("the sandbox: %+v %v, want it stopped as failed", st, err)
	}
	if p := onlyProcess(t, rt, sb.ID()); p.Phase != lifecycle.PhaseExited {
		t.Fatalf("the process is %s, want exited with its sandbox", p.Phase)
	}
}

// onlyProcess replays the one process of sandbox id from the journal.
func onlyProcess(t *testing.T, rt *stockade.Runtime, id string) lifecycle.Process {
	t.Helper()
	h, err := rt.History(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	pid := ""
	for _, ev := range h {
		if ev.Kind == "process" {
			if pid != "" && ev.ID != pid {
				t.Fatalf("sandbox %s has more than one process", id)
			}
			pid = ev.ID
		}
	}
	p, err := rt.ReplayProcess(t.Context(), pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestFakePhantom126AfterARestart: a runtime that closed (or died) dropped
// its attachments, and Docker 20.10 inspects each exec it left running as
// ended with 126. The next runtime doubts it: it finds the group alive,
// re-adopts the process (journaled adopted, not exited), and when the
// process really ends, with exec_die saying 127, journals no exit code.
func TestFakePhantom126AfterARestart(t *testing.T) {
	f := newExecFake(t)
	hold := make(chan struct{})
	f.Script = func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun {
		return dockerio.FakeRun{Phantom126: true, Hold: hold}
	}
	path := filepath.Join(t.TempDir(), "journal.db")
	rt1 := testutil.OpenFake(t, f, path)
	sb := mustCreate(t, rt1, spec.Sandbox{Image: fakeImage, Lifetime: spec.Kept})
	p := mustStart(t, sb, spec.Process{Argv: []string{"sleep", "300"}, Stdout: spec.Discard, Stderr: spec.Discard})
	id := p.ID()
	if err := rt1.Close(); err != nil {
		t.Fatal(err)
	}

	rt2 := testutil.OpenFake(t, f, path)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	testutil.Eventually(t, "the process re-adopted", func() bool {
		st, err := rt2.ReplayProcess(t.Context(), id, 0)
		if err != nil {
			t.Fatal(err)
		}
		if st.Terminal() {
			t.Fatalf("the process is journaled %s (exit %+v) while it runs: the phantom 126 was believed", st.Phase, st.Exit)
		}
		return st.Adopted
	})
	adopted, err := rt2.Process(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	close(hold)
	res, err := adopted.Wait(ctx)
	if err != nil || res.Reason != string(lifecycle.ReasonExited) || res.ExitCode != -1 {
		t.Fatalf("after its real end: %+v %v, want exited with no code (exec_die said 127 after a phantom 126)", res, err)
	}
	if st, _ := rt2.ReplayProcess(t.Context(), id, 0); st.Exit == nil || st.Exit.ExitCode != nil {
		t.Fatalf("journaled exit %+v, want no code", st.Exit)
	}
}

// TestWorkloadDeathNoticed: a workload that dies under a live runtime (a die
// event) is recorded exited with Docker's code; its processes end with
// sandbox_stopped and admission closes.
func TestWorkloadDeathNoticed(t *testing.T) {
	f := testutil.NewFake(t)
	f.Script = func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun {
		return dockerio.FakeRun{Hold: make(chan struct{})}
	}
	rt := testutil.OpenFake(t, f, "")
	ctx := context.Background()
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
	p := mustStart(t, sb, spec.Process{Argv: []string{"x"}, Stdout: spec.Discard, Stderr: spec.Discard})
	st, _ := sb.State(ctx)
	f.SetExited(dockerio.Sandbox{Owner: rt.Owner(), ID: sb.ID(), Workload: st.Created.Workload}, dockerio.ContainerExit{ExitCode: 137, OOMKilled: true})
	res, _ := p.Wait(ctx)
	if res.Reason != string(lifecycle.ReasonSandboxStopped) {
		t.Fatalf("process ended %+v, want sandbox_stopped", res)
	}
	testutil.Eventually(t, "the sandbox to be recorded exited", func() bool {
		s, err := stockade.FoldSandbox(rt, sb.ID())
		return err == nil && s.Phase == lifecycle.PhaseExited
	})
	s, _ := stockade.FoldSandbox(rt, sb.ID())
	if s.Exit.Reason != lifecycle.ReasonOOM || s.Exit.ExitCode == nil || *s.Exit.ExitCode != 137 || !s.Exit.OOM {
		t.Fatalf("exit %+v, want oom 137 as Docker reported", s.Exit)
	}
	if _, err := sb.Start(ctx, spec.Process{Argv: []string{"x"}}); !spec.IsCode(err, spec.CodeAdmissionClosed) {
		t.Fatalf("start after death: %v, want admission_closed", err)
	}
}

// TestFakeLookupsAsProcessesEnd: a process looked up by id just as it ends
// is answered (its live handle, or its journaled self), never left waiting:
// a request forwarded to a process actor that had already stopped used to
// go unanswered until the caller's deadline. And a sandbox looked up right
// after its Remove returned is not found.
func TestFakeLookupsAsProcessesEnd(t *testing.T) {
	f := testutil.NewFake(t)
	rt := testutil.OpenFake(t, f, "")
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
	for i := range 60 {
		p := mustStart(t, sb, spec.Process{Argv: []string{"true"}, Stdout: spec.Discard, Stderr: spec.Discard})
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			found, err := rt.Host().Process(ctx, p.ID())
			cancel()
			if err != nil {
				t.Fatalf("lookup %d of process %s: %v", i, p.ID(), err)
			}
			select {
			case <-found.Done():
			default:
				continue
			}
			break
		}
	}
	for i := range 20 {
		gone := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
		if err := gone.Remove(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := rt.Sandbox(context.Background(), gone.ID()); !spec.IsCode(err, spec.CodeNotFound) {
			t.Fatalf("lookup %d of sandbox %s right after its Remove: %v, want not_found", i, gone.ID(), err)
		}
	}
}
