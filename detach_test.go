package stockade_test

import (
	"bytes"
	"context"
	"io"
	goruntime "runtime"
	"syscall"
	"testing"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/spec"
)

// TestFakeCallerGoesProcessRunsOn: by default a process outlives its
// caller. A consumer that closes its stdout after the first chunk, and a
// caller whose Start context ends before Start returns, detach: each
// process runs to its own exit (exited 0, not cancelled), and its whole
// output, the part nobody read included, is in its recording.
func TestFakeCallerGoesProcessRunsOn(t *testing.T) {
	f := testutil.NewFake(t)
	release := make(chan struct{})
	spawning := make(chan struct{}, 1)
	frames := make([]dockerio.FakeFrame, 32)
	for i := range frames {
		frames[i] = dockerio.FakeFrame{Stream: framing.Stdout, Data: bytes.Repeat([]byte{'a' + byte(i%26)}, 16<<10)}
	}
	f.Script = func(_ dockerio.Sandbox, req dockerio.ExecRequest) dockerio.FakeRun {
		switch req.Spec.Argv[0] {
		case "late":
			spawning <- struct{}{}
			<-release
		case "held":
			return dockerio.FakeRun{Frames: frames[:1], Hold: release, After: frames[1:]}
		}
		return dockerio.FakeRun{Frames: frames}
	}
	path := t.TempDir() + "/journal.db"
	rt := testutil.OpenFake(t, f, path)
	ctx := context.Background()
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})

	// A consumer that reads one chunk, then closes its stream.
	p := mustStart(t, sb, spec.Process{Argv: []string{"held"}, Stderr: spec.Discard})
	if _, err := io.ReadFull(p.Stdout(), make([]byte, 16<<10)); err != nil {
		t.Fatal(err)
	}
	if err := p.Stdout().Close(); err != nil {
		t.Fatal(err)
	}

	// A caller that gives up while the start is under way.
	sctx, cancel := context.WithCancel(ctx)
	started := make(chan error, 1)
	go func() {
		_, err := sb.Start(sctx, spec.Process{Argv: []string{"late"}, Stderr: spec.Discard})
		started <- err
	}()
	<-spawning
	cancel()
	if err := <-started; !spec.IsCode(err, spec.CodeCancelled) {
		t.Fatalf("the start given up: %v, want cancelled", err)
	}
	close(release)

	want := 0
	for _, fr := range frames {
		want += len(fr.Data)
	}
	res, err := p.Wait(ctx)
	if err != nil || res.Reason != "exited" || res.ExitCode != 0 || res.StdoutBytes != int64(want) {
		t.Fatalf("the process whose consumer left: %+v %v, want exited 0 with %d bytes", res, err, want)
	}
	var got bytes.Buffer
	sum, err := stockade.ReadOutput(path, p.ID(), func(c stockade.OutputChunk) error { got.Write(c.Data); return nil })
	if err != nil || !sum.Complete {
		t.Fatalf("its recording: %+v %v, want complete", sum, err)
	}
	var all bytes.Buffer
	for _, fr := range frames {
		all.Write(fr.Data)
	}
	// 512 KiB is within the default recording's bounds (64 KiB of head,
	// 1 MiB of tail): it holds every byte, the unread ones included.
	if !bytes.Equal(got.Bytes(), all.Bytes()) {
		t.Fatalf("its recording holds %d bytes, want the %d the process wrote", got.Len(), all.Len())
	}

	// The given-up start's process ran too: found in the sandbox's
	// history, it ends exited, not cancelled.
	hist, err := rt.History(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	var lateID string
	for _, e := range hist {
		if e.Kind == "process" && e.ID != p.ID() {
			lateID = e.ID
		}
	}
	if lateID == "" {
		t.Fatal("the given-up start left no process in the history")
	}
	testutil.Eventually(t, "the given-up start's process ended", func() bool {
		st, err := stockade.FoldProcess(rt, lateID)
		return err == nil && st.Exit != nil
	})
	st, _ := stockade.FoldProcess(rt, lateID)
	if st.Exit.Reason != "exited" {
		t.Fatalf("the given-up start's process ended %s, want exited (it runs on without its caller)", st.Exit.Reason)
	}
}

// TestFakeFoundProcessHoldsNothing: finding a process this runtime does
// not run (its sandbox out of service), and signalling it, hold nothing
// once answered: a client asking again and again costs no goroutine and
// no journal subscription (only Done, once called, keeps one follower).
func TestFakeFoundProcessHoldsNothing(t *testing.T) {
	f := testutil.NewFake(t)
	hold := make(chan struct{})
	defer close(hold)
	f.Script = func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun { return dockerio.FakeRun{Hold: hold} }
	rt := testutil.OpenFake(t, f, "")
	ctx := context.Background()
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage, Lifetime: spec.Kept})
	p := mustStart(t, sb, spec.Process{Argv: []string{"held"}, Stdout: spec.Discard, Stderr: spec.Discard})
	stockade.BreakSandboxActor(sb)
	testutil.Eventually(t, "the sandbox taken out of service", func() bool {
		_, err := rt.Sandbox(ctx, sb.ID())
		return spec.IsCode(err, spec.CodeUnreconciled)
	})
	h := rt.Host()
	ask := func() {
		found, err := h.Process(ctx, p.ID())
		if err != nil {
			t.Fatalf("Process of a process whose sandbox is out of service: %v", err)
		}
		if err := found.Signal(ctx, syscall.SIGTERM); err == nil {
			t.Fatal("a signal reached a process its runtime does not run")
		}
		wctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := found.Wait(wctx); !spec.IsCode(err, spec.CodeCancelled) {
			t.Fatalf("Wait under an ended context: %v, want cancelled", err)
		}
	}
	ask() // the first call's lazy set-up is not counted
	before := goruntime.NumGoroutine()
	for range 200 {
		ask()
	}
	if after := goruntime.NumGoroutine(); after > before+20 {
		t.Fatalf("200 finds of a process not run here left %d goroutines behind (%d before)", after-before, before)
	}
}
