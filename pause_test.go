package stockade_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// handleOf names a sandbox's resources as the Fake keys them.
func handleOf(t *testing.T, rt *stockade.Runtime, id string) dockerio.Sandbox {
	t.Helper()
	h, err := stockade.HandleOf(rt, id)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func countTypes(t *testing.T, rt *stockade.Runtime, id string) map[string]int {
	t.Helper()
	n := map[string]int{}
	for _, typ := range historyTypes(t, rt, id, "") {
		n[typ]++
	}
	return n
}

// TestFakeConcurrentConsistentGets: two consistent copies open at once share
// one journaled freeze; the workload thaws only when the last is closed, and
// a process asked meanwhile starts after the thaw.
func TestFakeConcurrentConsistentGets(t *testing.T) {
	f := testutil.NewFake(t)
	rt := testutil.OpenFake(t, f, "")
	ctx := context.Background()
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
	h := handleOf(t, rt, sb.ID())
	first, live, err := sb.Get(ctx, "work", true)
	if err != nil || live {
		t.Fatalf("first copy: live %v, %v", live, err)
	}
	second, live, err := sb.Get(ctx, "work", true)
	if err != nil || live {
		t.Fatalf("second copy: live %v, %v", live, err)
	}
	if !f.Paused(h) {
		t.Fatal("the workload is not paused during consistent copies")
	}
	started := make(chan error, 1)
	go func() {
		_, _, _, err := run(t, sb, spec.Process{Argv: []string{"true"}})
		started <- err
	}()
	_, _ = io.Copy(io.Discard, first) // a drain: the pause is what is checked
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if !f.Paused(h) {
		t.Fatal("the first close thawed the workload under the second copy")
	}
	select {
	case err := <-started:
		t.Fatalf("a process ran in a paused workload: %v", err)
	default:
	}
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-started; err != nil {
		t.Fatalf("the held process: %v", err)
	}
	testutil.Eventually(t, "the thaw journaled", func() bool { return countTypes(t, rt, sb.ID())["sandbox.unpaused"] == 1 })
	if f.Paused(h) {
		t.Fatal("still paused after every copy closed")
	}
	if n := countTypes(t, rt, sb.ID()); n["sandbox.pausing"] != 1 {
		t.Fatalf("%d pausing intents journaled, want 1", n["sandbox.pausing"])
	}
}

// TestFakeRecoveryThawsAPausedSandbox: a runtime that dies during a
// consistent copy leaves the workload paused and the journal saying so;
// recovery thaws it, journals the thaw, and the sandbox runs processes.
func TestFakeRecoveryThawsAPausedSandbox(t *testing.T) {
	f := testutil.NewFake(t)
	path := filepath.Join(t.TempDir(), "j.db")
	rt := testutil.OpenFake(t, f, path)
	ctx := context.Background()
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage, Lifetime: spec.Kept})
	h := handleOf(t, rt, sb.ID())
	if _, _, err := sb.Get(ctx, "work", true); err != nil {
		t.Fatal(err)
	}
	// the copy is never closed: as if the runtime died
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	if !f.Paused(h) {
		t.Fatal("the workload did not stay paused")
	}
	rt = testutil.OpenFake(t, f, path)
	testutil.Eventually(t, "the thaw", func() bool {
		st, err := stockade.FoldSandbox(rt, sb.ID())
		return err == nil && !st.Paused
	})
	if f.Paused(h) {
		t.Fatal("recovery left the workload paused")
	}
	again, err := rt.Sandbox(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, res, err := run(t, again, spec.Process{Argv: []string{"true"}}); err != nil || res.Reason != string(lifecycle.ReasonExited) {
		t.Fatalf("process after the thaw: %+v %v", res, err)
	}
}

// gatedFake blocks the Engine call named op until its gate is opened, and
// says when a call has entered it.
func gatedFake(t *testing.T, op string) (f *dockerio.Fake, entered <-chan struct{}, open func()) {
	f = testutil.NewFake(t)
	gate, in := make(chan struct{}), make(chan struct{}, 16)
	var once sync.Once
	f.Fault = func(name string) error {
		if name == op {
			in <- struct{}{}
			<-gate
		}
		return nil
	}
	open = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(open)
	return f, in, open
}

// TestFakeCopyQueuedDuringTheThawOfAStoppedSandbox: a consistent copy asked
// while the last freeze thaws, of a sandbox stopped meanwhile, is served
// unfrozen; no pause is journaled on the stopped sandbox, which can then be
// removed.
func TestFakeCopyQueuedDuringTheThawOfAStoppedSandbox(t *testing.T) {
	f, thawing, thaw := gatedFake(t, "UnpauseSandbox")
	rt := testutil.OpenFake(t, f, "")
	ctx := context.Background()
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage, Lifetime: spec.Kept})
	first, _, err := sb.Get(ctx, "work", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	<-thawing
	type got struct {
		live bool
		err  error
	}
	second := make(chan got, 1)
	go func() {
		rc, live, err := sb.Get(ctx, "work", true)
		if rc != nil {
			_ = rc.Close() // err is what is checked
		}
		second <- got{live, err}
	}()
	stopped := make(chan error, 1)
	go func() { stopped <- sb.Stop(ctx) }()
	testutil.Eventually(t, "the stop", func() bool {
		st, err := stockade.FoldSandbox(rt, sb.ID())
		return err == nil && st.Phase == lifecycle.PhaseExited
	})
	thaw()
	if g := <-second; g.err != nil || g.live {
		t.Fatalf("the queued copy: live %v, %v", g.live, g.err)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if err := sb.Remove(ctx); err != nil {
		t.Fatalf("remove after: %v", err)
	}
	if n := countTypes(t, rt, sb.ID()); n["sandbox.pausing"] != 1 {
		t.Fatalf("%d pausing intents journaled, want 1", n["sandbox.pausing"])
	}
}

// TestFakeFreezeWaitsForAStartingProcess: a consistent copy asked while a
// process is starting waits for it to start (Docker refuses to start an
// exec in a paused workload); both succeed.
func TestFakeFreezeWaitsForAStartingProcess(t *testing.T) {
	f, verifying, release := gatedFake(t, "VerifySandbox")
	f.NoWarden = true // a start through the warden reads nothing back
	rt := testutil.OpenFake(t, f, "")
	ctx := context.Background()
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
	h := handleOf(t, rt, sb.ID())
	ran := make(chan error, 1)
	go func() {
		_, _, _, err := run(t, sb, spec.Process{Argv: []string{"true"}})
		ran <- err
	}()
	<-verifying
	copied := make(chan error, 1)
	go func() {
		rc, _, err := sb.Get(ctx, "work", true)
		if rc != nil {
			_ = rc.Close() // err is what is checked
		}
		copied <- err
	}()
	// Give a freeze that would not wait its chance to happen (the check
	// below can only pass wrongly, never fail wrongly, if this is short).
	time.Sleep(100 * time.Millisecond)
	if f.Paused(h) {
		t.Fatal("frozen while a process was starting")
	}
	release()
	if err := <-ran; err != nil {
		t.Fatalf("the starting process: %v", err)
	}
	if err := <-copied; err != nil {
		t.Fatalf("the copy: %v", err)
	}
}

// TestFakeSignalsWaitOutAFreeze: a process whose timeout fires while its
// workload is frozen is still stopped: the signals Docker refuses during
// the freeze are sent once it thaws.
func TestFakeSignalsWaitOutAFreeze(t *testing.T) {
	f := testutil.NewFake(t)
	f.Script = func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun {
		return dockerio.FakeRun{Hold: make(chan struct{})}
	}
	rt := testutil.OpenFake(t, f, "")
	ctx := context.Background()
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
	p := mustStart(t, sb, spec.Process{Argv: []string{"x"}, Stdout: spec.Discard, Stderr: spec.Discard, Timeout: 100 * time.Millisecond})
	rc, _, err := sb.Get(ctx, "work", true)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the timeout's stopping intent", func() bool {
		st, err := stockade.FoldProcess(rt, p.ID())
		return err == nil && st.Phase == lifecycle.PhaseStopping
	})
	if err := rc.Close(); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if res, err := p.Wait(wctx); res.Reason != string(lifecycle.ReasonTimeout) {
		t.Fatalf("%+v %v, want timeout", res, err)
	}
}

// pausedReader reports, at its first read, whether the workload is paused:
// a put's archive is read while it is extracted.
type pausedReader struct {
	r      io.Reader
	paused func() bool
	once   sync.Once
	saw    bool
}

func (p *pausedReader) Read(b []byte) (int, error) {
	p.once.Do(func() { p.saw = p.paused() })
	return p.r.Read(b)
}

// TestFakePutFreezes: a put into a running workload extracts with it
// frozen (the freeze journaled as a consistent copy's) and thaws after;
// into a stopped one, it freezes nothing.
func TestFakePutFreezes(t *testing.T) {
	f := testutil.NewFake(t)
	rt := testutil.OpenFake(t, f, "")
	ctx := context.Background()
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
	h := handleOf(t, rt, sb.ID())
	body := &pausedReader{r: bytes.NewReader(tarOf(t, "a.txt", "hello")), paused: func() bool { return f.Paused(h) }}
	if err := sb.Put(ctx, "work", body); err != nil {
		t.Fatal(err)
	}
	if !body.saw {
		t.Fatal("the put's archive was read with the workload running: a process could swap a directory for a link under it")
	}
	testutil.Eventually(t, "the thaw journaled", func() bool { return countTypes(t, rt, sb.ID())["sandbox.unpaused"] == 1 })
	if f.Paused(h) {
		t.Fatal("still paused after the put")
	}
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	body = &pausedReader{r: bytes.NewReader(tarOf(t, "b.txt", "again")), paused: func() bool { return f.Paused(h) }}
	if err := sb.Put(ctx, "work", body); err != nil {
		t.Fatal(err)
	}
	if body.saw || countTypes(t, rt, sb.ID())["sandbox.pausing"] != 1 {
		t.Fatal("a put into a stopped workload froze it")
	}
}

// tarOf is an archive of one file.
func tarOf(t *testing.T, name, body string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte(body)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
