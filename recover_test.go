package stockade_test

// Recovery: what Open does with what an earlier runtime left in the
// journal (and in Docker) — the recovery table's rows on the Fake, the
// deadlines it re-arms, the streams it cannot fold, the sandboxes it
// cannot observe, and the restarts that change nothing. The same against
// the real daemon is test/recovery; the crash drill is test/drill.

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/internal/journaltest"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// TestDeadlinesSurviveRestart: a TTL and a process timeout are absolute in
// the journal, so a recovered runtime enforces what remains of them.
func TestDeadlinesSurviveRestart(t *testing.T) {
	f := testutil.NewFake(t)
	f.Script = func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun {
		return dockerio.FakeRun{Hold: make(chan struct{})} // runs until signalled
	}
	path := filepath.Join(t.TempDir(), "j.db")
	rt := testutil.OpenFake(t, f, path)
	// The deadlines must fall after the restart for the test to mean
	// anything; it checks that they did rather than assuming it.
	const within = 3 * time.Second
	begin := time.Now()
	withTTL := mustCreate(t, rt, spec.Sandbox{Image: fakeImage, Lifetime: spec.Kept, TTL: within})
	long := mustCreate(t, rt, spec.Sandbox{Image: fakeImage, Lifetime: spec.Kept})
	p := mustStart(t, long, spec.Process{Argv: []string{"sleep"}, Timeout: within, Stderr: spec.Discard})
	go func() { _, _ = io.Copy(io.Discard, p.Stdout()) }()
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}

	rt = testutil.OpenFake(t, f, path)
	if time.Since(begin) >= within {
		t.Fatalf("the restart took %v, past the deadlines under test; nothing was shown", time.Since(begin))
	}
	if s, _ := stockade.FoldSandbox(rt, withTTL.ID()); !s.Adopted || s.Phase != lifecycle.PhaseStarted {
		t.Fatalf("before its TTL the sandbox is %s (adopted %v), want re-adopted", s.Phase, s.Adopted)
	}
	testutil.Eventually(t, "the TTL to stop the re-adopted sandbox", func() bool {
		s, err := stockade.FoldSandbox(rt, withTTL.ID())
		return err == nil && s.Phase == lifecycle.PhaseExited && s.Exit.Reason == lifecycle.ReasonTimeout
	})
	testutil.Eventually(t, "the timeout to stop the re-adopted process", func() bool {
		pr, err := stockade.FoldProcess(rt, p.ID())
		return err == nil && pr.Phase == lifecycle.PhaseExited && pr.Exit.Reason == lifecycle.ReasonTimeout && pr.Adopted
	})
}

// TestRecoveryProcessRows covers process rows of the recovery table with the
// fake engine: an exec the daemon forgot ends lost, with no invented code; a
// running exec is re-adopted detached and its exit code recorded when it
// ends. (The row "created, attached, started not journaled" — group read
// back — is drilled against the real daemon: failpoint process.attached.)
func TestRecoveryProcessRows(t *testing.T) {
	f := newExecFake(t)
	hold := make(chan struct{})
	f.Script = func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun {
		return dockerio.FakeRun{Hold: hold}
	}
	path := filepath.Join(t.TempDir(), "j.db")
	rt := testutil.OpenFake(t, f, path)
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage, Lifetime: spec.Kept})
	forgotten := mustStart(t, sb, spec.Process{Argv: []string{"a"}, Stdout: spec.Discard, Stderr: spec.Discard})
	kept := mustStart(t, sb, spec.Process{Argv: []string{"b"}, Stdout: spec.Discard, Stderr: spec.Discard})
	fp, _ := stockade.FoldProcess(rt, forgotten.ID())
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	f.ForgetExec(fp.ExecID) // as the daemon does after a restart

	rt = testutil.OpenFake(t, f, path)
	testutil.Eventually(t, "recovery to settle the processes", func() bool {
		a, _ := stockade.FoldProcess(rt, forgotten.ID())
		b, _ := stockade.FoldProcess(rt, kept.ID())
		return a.Phase == lifecycle.PhaseExited && b.Adopted
	})
	a, _ := stockade.FoldProcess(rt, forgotten.ID())
	if a.Exit.Reason != lifecycle.ReasonLost || a.Exit.ExitCode != nil {
		t.Fatalf("forgotten exec ended %+v, want lost with no invented code", a.Exit)
	}
	b, _ := stockade.FoldProcess(rt, kept.ID())
	if !b.Detached || b.Phase != lifecycle.PhaseStarted {
		t.Fatalf("running exec: %+v, want re-adopted detached", b)
	}
	close(hold) // it ends: its exit code is recorded
	testutil.Eventually(t, "the detached exit", func() bool {
		b, _ := stockade.FoldProcess(rt, kept.ID())
		return b.Phase == lifecycle.PhaseExited && b.Exit.ExitCode != nil && *b.Exit.ExitCode == 0
	})
}

// TestRecoveryNeverStartedExec: an exec journaled as created whose attach
// never happened reads as not running with exit code 0 — recovery records
// it lost, never exit 0.
func TestRecoveryNeverStartedExec(t *testing.T) {
	f := newExecFake(t)
	release := make(chan struct{})
	var blocking atomic.Bool
	blocking.Store(true)
	attaching := make(chan struct{}, 1)
	f.Fault = func(op string) error {
		if op == "AttachExec" && blocking.Load() {
			attaching <- struct{}{}
			<-release // the "crash" comes before the attach
		}
		return nil
	}
	defer close(release)
	path := filepath.Join(t.TempDir(), "j.db")
	rt := testutil.OpenFake(t, f, path)
	ctx := context.Background()
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage, Lifetime: spec.Kept})
	sctx, cancel := context.WithCancel(ctx)
	go func() { _, _ = sb.Start(sctx, spec.Process{Argv: []string{"x"}}) }() // cancelled: the journal is checked after
	<-attaching
	cancel()
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	blocking.Store(false)

	rt = testutil.OpenFake(t, f, path)
	h, err := rt.History(t.Context(), sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	var pid string
	for _, e := range h {
		if e.Type == "process.exec_created" {
			pid = e.ID
		}
	}
	if pid == "" {
		t.Fatal("no process was journaled as exec created")
	}
	testutil.Eventually(t, "the never-started process to be settled", func() bool {
		p, _ := stockade.FoldProcess(rt, pid)
		return p.Phase == lifecycle.PhaseExited
	})
	p, _ := stockade.FoldProcess(rt, pid)
	if p.Exit.Reason != lifecycle.ReasonLost || p.Exit.ExitCode != nil || len(p.Recovered) != 1 {
		t.Fatalf("never-started exec ended %+v (decisions %+v), want lost with no code and its decision journaled", p.Exit, p.Recovered)
	}
}

// TestUnobservableSandboxIsUnreconciled: a sandbox recovery cannot observe
// (the daemon fails the inspect) is listed and refused with unreconciled —
// never guessed at, never dropped — while the others recover.
func TestUnobservableSandboxIsUnreconciled(t *testing.T) {
	f := testutil.NewFake(t)
	path := filepath.Join(t.TempDir(), "j.db")
	rt := testutil.OpenFake(t, f, path)
	ctx := context.Background()
	a := mustCreate(t, rt, spec.Sandbox{Image: fakeImage, Lifetime: spec.Kept})
	if _, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage, Lifetime: spec.Kept}); err != nil {
		t.Fatal(err)
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	var failed atomic.Bool
	f.Fault = func(op string) error {
		if op == "InspectSandbox" && failed.CompareAndSwap(false, true) {
			return spec.Errorf(spec.CodeEngine, "test", "the daemon timed out")
		}
		return nil
	}
	rt = testutil.OpenFake(t, f, path)
	var un, ok int
	for _, s := range mustRecovery(t, rt).Sandboxes {
		switch s.Decision {
		case stockade.Unreconciled:
			un++
			if _, err := rt.Sandbox(ctx, s.ID); !spec.IsCode(err, spec.CodeUnreconciled) {
				t.Fatalf("Sandbox(%s): %v, want unreconciled", s.ID, err)
			}
		case "re-adopt":
			ok++
		}
	}
	list, _ := rt.Sandboxes(ctx)
	if un != 1 || ok != 1 || len(list) != 2 {
		t.Fatalf("unreconciled %d, re-adopted %d, listed %d: want 1, 1, 2", un, ok, len(list))
	}
	// A later Open reconciles it.
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	rt = testutil.OpenFake(t, f, path)
	if sb, err := rt.Sandbox(ctx, a.ID()); err != nil || sb == nil {
		t.Fatalf("after a clean reopen: %v", err)
	}
}

// TestOpenToleratesUnfoldableStreams: a kept sandbox whose stream does not
// fold, and one whose process's stream does not, are listed unreconciled
// with the fold error and refused; the healthy sandbox recovers and runs.
func TestOpenToleratesUnfoldableStreams(t *testing.T) {
	f := testutil.NewFake(t)
	f.Script = script()
	path := filepath.Join(t.TempDir(), "j.db")
	rt := testutil.OpenFake(t, f, path)
	ctx := context.Background()
	var ids []string
	for range 3 {
		sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage, Lifetime: spec.Kept})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID())
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// ids[0]: a created fact after started; ids[1]: a process whose stream
	// starts without its reservation.
	journaltest.Append(t, j, journal.Key{Kind: journal.KindSandbox, ID: ids[0]}, lifecycle.SandboxCreated{Workload: "w"})
	pk := journal.Key{Kind: journal.KindProcess, ID: "p-broken"}
	typ, payload, _ := lifecycle.Encode(lifecycle.ProcessStarted{Group: 7})
	if _, err := j.Append(ctx, journal.Record{Key: pk, Parent: ids[1], Type: typ, Payload: payload}); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	rt = testutil.OpenFake(t, f, path)
	lines := map[string]stockade.RecoveredSandbox{}
	for _, s := range mustRecovery(t, rt).Sandboxes {
		lines[s.ID] = s
	}
	for _, id := range ids[:2] {
		l := lines[id]
		if l.Decision != stockade.Unreconciled || !strings.Contains(l.Error, "illegal transition") {
			t.Errorf("sandbox %s: %+v, want unreconciled with the fold error", id, l)
		}
		if _, err := rt.Sandbox(ctx, id); !spec.IsCode(err, spec.CodeUnreconciled) {
			t.Errorf("Sandbox(%s): %v, want unreconciled", id, err)
		}
	}
	if l := lines[ids[2]]; l.Decision != "re-adopt" {
		t.Fatalf("healthy sandbox: %+v", l)
	}
	list, err := rt.Sandboxes(ctx)
	if err != nil || len(list) != 3 {
		t.Fatalf("listed %d: %v", len(list), err)
	}
	sb, err := rt.Sandbox(ctx, ids[2])
	if err != nil {
		t.Fatal(err)
	}
	if _, _, res, err := run(t, sb, spec.Process{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("healthy sandbox's process: %+v %v", res, err)
	}
}

// TestRestartsRecordOnlyChanges: reopening over the same kept sandbox (and
// its running process) re-adopts both but journals nothing new after the
// first recovery: no stream grows with every restart.
func TestRestartsRecordOnlyChanges(t *testing.T) {
	f := testutil.NewFake(t)
	f.Script = func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun {
		return dockerio.FakeRun{Hold: make(chan struct{})}
	}
	path := filepath.Join(t.TempDir(), "j.db")
	rt := testutil.OpenFake(t, f, path)
	ctx := context.Background()
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage, Lifetime: spec.Kept})
	if _, err := sb.Start(ctx, spec.Process{Argv: []string{"x"}, Stdout: spec.Discard, Stderr: spec.Discard}); err != nil {
		t.Fatal(err)
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	counts := func() (sandbox, all int) {
		j := stockade.JournalOf(rt)
		err := j.Streams(func(k journal.Key) error {
			return j.Read(k, 0, 0, func(e journal.Event) error {
				all++
				if k.Kind == journal.KindSandbox {
					sandbox++
				}
				return nil
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		return sandbox, all
	}
	rt = testutil.OpenFake(t, f, path)
	if l := mustRecovery(t, rt).Sandboxes; len(l) != 1 || l[0].Decision != "re-adopt" {
		t.Fatalf("first recovery: %+v", l)
	}
	s1, a1 := counts()
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		rt = testutil.OpenFake(t, f, path)
		if l := mustRecovery(t, rt).Sandboxes; len(l) != 1 || l[0].Decision != "re-adopt" {
			t.Fatalf("recovery: %+v", l)
		}
		if s, a := counts(); s != s1 || a != a1 {
			t.Fatalf("a restart that changed nothing journaled: sandbox stream %d → %d events, journal %d → %d", s1, s, a1, a)
		}
		if err := rt.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
