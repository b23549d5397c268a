package stockade_test

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/inspect"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

const fakeImage = "sha256:0000000000000000000000000000000000000000000000000000000000000001"

// newExecFake is testutil.NewFake without a warden: every process is an exec. For
// the exec transport's own tests (what Docker's exec API does to a
// process: lost attaches, phantom exit codes, inspects, the readback
// before each start, the order of one multiplexed stream).
func newExecFake(t testing.TB) *dockerio.Fake {
	f := testutil.NewFake(t)
	f.NoWarden = true
	return f
}

func script(frames ...dockerio.FakeFrame) func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun {
	return func(_ dockerio.Sandbox, req dockerio.ExecRequest) dockerio.FakeRun {
		return dockerio.FakeRun{Frames: frames}
	}
}

func run(t testing.TB, sb *stockade.Sandbox, p spec.Process) (string, string, spec.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	proc, err := sb.Start(ctx, p)
	if err != nil {
		return "", "", spec.Result{}, err
	}
	var out, errOut strings.Builder
	var wg sync.WaitGroup
	if r := proc.Stderr(); r != nil {
		wg.Add(1)
		// A read error shows as missing output, which the caller checks.
		go func() { defer wg.Done(); _, _ = io.Copy(&errOut, r) }()
	}
	if r := proc.Stdout(); r != nil {
		_, _ = io.Copy(&out, r)
	}
	wg.Wait()
	res, err := proc.Wait(ctx)
	return out.String(), errOut.String(), res, err
}

func TestFakeRunAndHistory(t *testing.T) {
	f := testutil.NewFake(t)
	f.Script = func(_ dockerio.Sandbox, req dockerio.ExecRequest) dockerio.FakeRun {
		return dockerio.FakeRun{ExitCode: 3, Frames: []dockerio.FakeFrame{
			{Stream: framing.Stdout, Data: []byte("out ")}, {Stream: framing.Stderr, Data: []byte("err")}, {Stream: framing.Stdout, Data: []byte("more")}}}
	}
	rt := testutil.OpenFake(t, f, "")
	ctx := context.Background()
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
	out, errOut, res, err := run(t, sb, spec.Process{Argv: []string{"x"}})
	if err != nil || out != "out more" || errOut != "err" || res.ExitCode != 3 || res.Reason != "exited" || res.StdoutBytes != 8 || res.StderrBytes != 3 {
		t.Fatalf("got %q %q %+v %v", out, errOut, res, err)
	}
	if err := sb.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	want := "sandbox.reserved sandbox.created sandbox.started sandbox.warden_started process.reserved process.started process.exited sandbox.stopping sandbox.usage_sampled sandbox.exited sandbox.removing sandbox.removed"
	if got := strings.Join(historyTypes(t, rt, sb.ID(), ""), " "); got != want {
		t.Fatalf("history\n got %s\nwant %s", got, want)
	}
}

// TestFakeMailboxNotBlocked: while a create is in flight (the Docker call
// held), the sandbox actor still answers: the runtime lists it.
func TestFakeMailboxNotBlocked(t *testing.T) {
	f := testutil.NewFake(t)
	release := make(chan struct{})
	var once sync.Once
	entered := make(chan struct{})
	f.Fault = func(op string) error {
		if op == "CreateSandbox" {
			once.Do(func() { close(entered) })
			<-release
		}
		return nil
	}
	rt := testutil.OpenFake(t, f, "")
	done := make(chan error, 1)
	go func() {
		_, err := rt.CreateSandbox(context.Background(), spec.Sandbox{Image: fakeImage})
		done <- err
	}()
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := rt.Sandboxes(ctx)
	if err != nil || len(list) != 1 || list[0].Phase != lifecycle.PhaseReserved {
		t.Fatalf("while creating: %+v %v, want one reserved sandbox answered", list, err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestFakeCreateFailureLeavesNothing: a failed create is journaled exited
// (failed), rolled back through a journaled removal, and only then is the
// caller told, with the typed error: nothing is left behind by then.
func TestFakeCreateFailureLeavesNothing(t *testing.T) {
	f := testutil.NewFake(t)
	boom := spec.Errorf(spec.CodeUnsupported, "test", "readback differs at HostConfig.Memory")
	f.Fault = func(op string) error {
		if op == "StartSandbox" {
			return boom
		}
		return nil
	}
	rt := testutil.OpenFake(t, f, "")
	ctx := context.Background()
	_, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage})
	if !errors.Is(err, boom) {
		t.Fatalf("got %v, want the unsupported error", err)
	}
	owned, _ := f.ListOwned(ctx, rt.Owner())
	list, _ := rt.Sandboxes(ctx)
	if len(owned) != 0 || len(list) != 0 {
		t.Fatalf("the caller was told before the rollback: left %+v, listed %+v", owned, list)
	}
	var id string
	j := stockade.JournalOf(rt)
	if err := j.Streams(func(k journal.Key) error {
		if k.Kind == journal.KindSandbox {
			id = k.ID
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := "sandbox.reserved sandbox.created sandbox.exited sandbox.removing sandbox.removed"
	if got := strings.Join(historyTypes(t, rt, id, ""), " "); got != want {
		t.Fatalf("history\n got %s\nwant %s", got, want)
	}
}

func TestFakeInvalidInput(t *testing.T) {
	rt := testutil.OpenFake(t, testutil.NewFake(t), "")
	ctx := context.Background()
	bad := spec.DefaultPolicy()
	bad.Pids = -1 // zero would mean the default
	for _, s := range []spec.Sandbox{
		{},
		{Image: fakeImage, Policy: bad},
		{Image: fakeImage, Lifetime: "forever"},
		{Image: fakeImage, TTL: -time.Second},
	} {
		if _, err := rt.CreateSandbox(ctx, s); !spec.IsCode(err, spec.CodeInvalidArgument) {
			t.Errorf("%+v: %v, want invalid_argument", s, err)
		}
	}
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
	for _, p := range []spec.Process{{}, {Argv: []string{""}}, {Argv: []string{"x"}, Env: []string{"NOEQUALS"}}, {Argv: []string{"x"}, Timeout: -1}} {
		if _, err := sb.Start(ctx, p); !spec.IsCode(err, spec.CodeInvalidArgument) {
			t.Errorf("%+v: %v, want invalid_argument", p, err)
		}
	}
}

// TestFakeStreamFailureFailsClosed: a daemon error on stream 3 fails the
// whole sandbox closed.
func TestFakeStreamFailureFailsClosed(t *testing.T) {
	f := newExecFake(t)
	f.Script = script(dockerio.FakeFrame{Stream: framing.Systemerr, Data: []byte("daemon says no")})
	rt := testutil.OpenFake(t, f, "")
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
	_, _, res, err := run(t, sb, spec.Process{Argv: []string{"x"}})
	var de *framing.DaemonError
	if !spec.IsCode(err, spec.CodeStreamFailure) || !errors.As(err, &de) || res.Reason != "failed" {
		t.Fatalf("got %+v %v, want a stream failure carrying the daemon's message", res, err)
	}
	var st lifecycle.Sandbox
	testutil.Eventually(t, "the sandbox to fail closed (exited)", func() bool {
		st, _ = sb.State(context.Background())
		return st.Phase == lifecycle.PhaseExited
	})
	if st.Exit.Error != spec.CodeStreamFailure {
		t.Fatalf("sandbox exited with %+v, want stream_failure", st.Exit)
	}
}

// panicking wraps the Fake so an attachment's read panics: a bug in the
// read loop must fail that process only, never its sandbox or the runtime.
type panicking struct{ *dockerio.Fake }

type panicAttachment struct{ dockerio.Attachment }

func (panicAttachment) Next() (framing.StreamID, []byte, error) { panic("read loop bug") }

func (p panicking) AttachExec(ctx context.Context, sb dockerio.Sandbox, id string, req dockerio.ExecRequest) (dockerio.Attachment, error) {
	a, err := p.Fake.AttachExec(ctx, sb, id, req)
	if err != nil || req.Spec.Argv[0] != "panic" {
		return a, err
	}
	return panicAttachment{a}, nil
}

func TestFakePanicFailsOnlyTheProcess(t *testing.T) {
	f := newExecFake(t)
	path := filepath.Join(t.TempDir(), "j.db")
	rt, err := stockade.Open(context.Background(), stockade.Options{Journal: path, Engine: panicking{f}, StopGrace: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rt.Close() }() // teardown
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
	_, _, res, err := run(t, sb, spec.Process{Argv: []string{"panic"}})
	if res.Reason != "failed" || err == nil {
		t.Fatalf("panicking process: %+v %v, want failed", res, err)
	}
	if _, _, res, err := run(t, sb, spec.Process{Argv: []string{"ok"}}); err != nil || res.Reason != "exited" {
		t.Fatalf("the sandbox no longer runs processes: %+v %v", res, err)
	}
}

func TestFakeJournalFailureReportsNothingDone(t *testing.T) {
	f := testutil.NewFake(t)
	rt := testutil.OpenFake(t, f, "")
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
	// Closing the journal under the runtime makes every append fail.
	j := stockade.JournalOf(rt)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := sb.Start(context.Background(), spec.Process{Argv: []string{"x"}})
	if !spec.IsCode(err, spec.CodeJournal) {
		t.Fatalf("start with a broken journal: %v, want a journal error", err)
	}
	if err := sb.Stop(context.Background()); !spec.IsCode(err, spec.CodeJournal) {
		t.Fatalf("stop with a broken journal: %v, want a journal error", err)
	}
}

func TestFakeHistoryNotFound(t *testing.T) {
	rt := testutil.OpenFake(t, testutil.NewFake(t), "")
	if _, err := rt.History(t.Context(), "nosuchsandbox"); !spec.IsCode(err, spec.CodeNotFound) {
		t.Fatalf("got %v", err)
	}
}

// TestFakeVerifyGatesTheStart: the check before launch (the seed's
// assertActive) runs beside the exec create, but nothing starts unless it
// passes; a sandbox that is no longer what was made fails closed.
func TestFakeVerifyGatesTheStart(t *testing.T) {
	f := newExecFake(t)
	var attached atomic.Int32
	var tampered atomic.Bool
	f.Fault = func(op string) error {
		switch {
		case op == "AttachExec":
			attached.Add(1)
		case op == "VerifySandbox" && tampered.Load():
			return spec.Errorf(spec.CodeUnsupported, "test", "HostConfig.Memory differs")
		}
		return nil
	}
	rt := testutil.OpenFake(t, f, "")
	ctx := context.Background()
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
	if _, _, _, err := run(t, sb, spec.Process{Argv: []string{"ok"}}); err != nil || attached.Load() != 1 {
		t.Fatalf("a verified start: %v, %d attaches", err, attached.Load())
	}
	tampered.Store(true)
	_, err := sb.Start(ctx, spec.Process{Argv: []string{"x"}})
	if !spec.IsCode(err, spec.CodeUnsupported) {
		t.Fatalf("start on a tampered sandbox: %v, want unsupported", err)
	}
	if attached.Load() != 1 {
		t.Fatal("a process was attached (started) although the check failed")
	}
	testutil.Eventually(t, "the sandbox to fail closed", func() bool {
		s, _ := stockade.FoldSandbox(rt, sb.ID())
		return s.Phase == lifecycle.PhaseExited && s.Exit.Error == spec.CodeUnsupported
	})
}

// TestIdentityMismatch: a journal bound to one daemon refuses another, and
// an Owner that is not the journal's is refused, both before anything is
// touched.
func TestIdentityMismatch(t *testing.T) {
	f := testutil.NewFake(t)
	path := filepath.Join(t.TempDir(), "j.db")
	rt := testutil.OpenFake(t, f, path)
	owner := rt.Owner()
	if _, err := rt.CreateSandbox(context.Background(), spec.Sandbox{Image: fakeImage, Lifetime: spec.OneShot}); err != nil {
		t.Fatal(err)
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	var touched atomic.Int32
	other := testutil.NewFake(t)
	other.DaemonID = "another-daemon"
	other.Fault = func(op string) error {
		if op != "Preflight" {
			touched.Add(1)
		}
		return nil
	}
	_, err := stockade.Open(context.Background(), stockade.Options{Journal: path, Engine: other})
	if !spec.IsCode(err, spec.CodeIdentityMismatch) || touched.Load() != 0 {
		t.Fatalf("another daemon: %v (%d calls beyond preflight), want identity_mismatch and nothing touched", err, touched.Load())
	}
	_, err = stockade.Open(context.Background(), stockade.Options{Journal: path, Engine: f, Owner: "not" + owner})
	if !spec.IsCode(err, spec.CodeIdentityMismatch) {
		t.Fatalf("another owner: %v, want identity_mismatch", err)
	}
	// The right pair still opens, and recovery removes the one-shot sandbox.
	rt = testutil.OpenFake(t, f, path, func(o *stockade.Options) { o.Owner = owner })
	if n := len(mustRecovery(t, rt).Sandboxes); n != 1 {
		t.Fatalf("recovered %d sandboxes, want 1", n)
	}
}

// TestShutdown: Shutdown stops kept sandboxes (exited, resources kept) and
// removes one-shot ones; Close would have left both running.
func TestShutdown(t *testing.T) {
	f := testutil.NewFake(t)
	path := filepath.Join(t.TempDir(), "j.db")
	ctx := context.Background()
	rt, err := stockade.Open(ctx, stockade.Options{Journal: path, Engine: f, StopGrace: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	kept := mustCreate(t, rt, spec.Sandbox{Image: fakeImage, Lifetime: spec.Kept})
	once := mustCreate(t, rt, spec.Sandbox{Image: fakeImage, Lifetime: spec.OneShot})
	if err := rt.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	j, err := journal.Open(path, journal.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = j.Close() }() // only read
	k, _ := inspect.New(j).ReplaySandbox(t.Context(), kept.ID(), 0)
	o, _ := inspect.New(j).ReplaySandbox(t.Context(), once.ID(), 0)
	if k.Phase != lifecycle.PhaseExited || o.Phase != lifecycle.PhaseRemoved {
		t.Fatalf("after Shutdown: kept %s, one-shot %s; want exited, removed", k.Phase, o.Phase)
	}
}

// TestFakeExecFailureFromWrapper: exit 127 with the wrapper's "not found" is
// exec_failed (dockerio.ExecFailure reads the first output bytes); a plain
// exit 127 is an ordinary exit.
func TestFakeExecFailureFromWrapper(t *testing.T) {
	f := newExecFake(t)
	f.Script = func(_ dockerio.Sandbox, req dockerio.ExecRequest) dockerio.FakeRun {
		if req.Spec.Argv[0] == "missing" {
			return dockerio.FakeRun{ExitCode: 127, Frames: []dockerio.FakeFrame{{Stream: framing.Stderr, Data: []byte("stockade-exec: exec: line 4: missing: not found\n")}}}
		}
		return dockerio.FakeRun{ExitCode: 127, Frames: []dockerio.FakeFrame{{Stream: framing.Stdout, Data: []byte("done\n")}}}
	}
	rt := testutil.OpenFake(t, f, "")
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
	if _, _, res, err := run(t, sb, spec.Process{Argv: []string{"missing"}}); !spec.IsCode(err, spec.CodeExecFailed) || res.Reason != "failed" {
		t.Fatalf("missing command: %+v %v, want exec_failed", res, err)
	}
	if _, _, res, err := run(t, sb, spec.Process{Argv: []string{"exits127"}}); err != nil || res.Reason != "exited" || res.ExitCode != 127 {
		t.Fatalf("plain 127: %+v %v, want an ordinary exit", res, err)
	}
}

// historyTypes lists the types of a sandbox's history, in order; kind, if
// set, keeps only that kind's events.
func historyTypes(t testing.TB, rt *stockade.Runtime, id string, kind journal.Kind) []string {
	t.Helper()
	hist, err := rt.History(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range hist {
		if kind == "" || e.Kind == string(kind) {
			types = append(types, e.Type)
		}
	}
	return types
}

// mustCreate makes a sandbox or fails the test.
func mustCreate(t testing.TB, rt *stockade.Runtime, s spec.Sandbox) *stockade.Sandbox {
	t.Helper()
	sb, err := rt.CreateSandbox(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

// mustRecovery returns the report of the recovery rt's Open ran, or fails
// the test.
func mustRecovery(t testing.TB, rt *stockade.Runtime) stockade.RecoveryReport {
	t.Helper()
	rep, err := rt.Recovery(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// mustStart starts a process or fails the test.
func mustStart(t testing.TB, sb *stockade.Sandbox, p spec.Process) *stockade.Process {
	t.Helper()
	proc, err := sb.Start(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return proc
}
