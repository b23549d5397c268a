package stockade_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/spec"
)

// TestFakeAbandonedStartSparesNeighbours: a start tied to its caller
// (StopWithCaller) whose caller gives up
// while the warden is still spawning (its Started comes after the caller's
// context ended) leaves nothing behind and costs its neighbours nothing: a
// process streaming beside it on the same warden link gets all its output
// and its exit, the child nobody waits for is killed and forgotten, and the
// warden is never given up. (The Fake runs the real warden library: this
// is the production transport.)
func TestFakeAbandonedStartSparesNeighbours(t *testing.T) {
	f := testutil.NewFake(t)
	spawning, release := make(chan struct{}), make(chan struct{})
	chunk := bytes.Repeat([]byte("n"), 32<<10)
	neighbourDone := make(chan struct{})
	f.Script = func(_ dockerio.Sandbox, req dockerio.ExecRequest) dockerio.FakeRun {
		switch req.Spec.Argv[0] {
		case "neighbour":
			frames := make([]dockerio.FakeFrame, 64)
			for i := range frames {
				frames[i] = dockerio.FakeFrame{Stream: framing.Stdout, Data: chunk}
			}
			return dockerio.FakeRun{Frames: frames, Hold: neighbourDone}
		case "abandoned":
			// The warden's spawn of this child waits here: its caller
			// gives up meanwhile.
			close(spawning)
			<-release
			hold := make(chan struct{})
			return dockerio.FakeRun{Hold: hold}
		}
		return dockerio.FakeRun{}
	}
	rt := testutil.OpenFake(t, f, "")
	ctx := context.Background()
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
	neighbour := mustStart(t, sb, spec.Process{Argv: []string{"neighbour"}, Stderr: spec.Discard})
	read := make(chan int64, 1)
	go func() {
		n, _ := io.Copy(io.Discard, neighbour.Stdout())
		read <- n
	}()

	sctx, cancel := context.WithCancel(ctx)
	started := make(chan error, 1)
	go func() {
		_, err := sb.Start(sctx, spec.Process{Argv: []string{"abandoned"}, Stdout: spec.Discard, Stderr: spec.Discard, StopWithCaller: true})
		started <- err
	}()
	<-spawning
	cancel()
	if err := <-started; !errors.Is(err, context.Canceled) && !spec.IsCode(err, spec.CodeCancelled) {
		t.Fatalf("the abandoned start: %v, want cancelled", err)
	}
	close(release) // the warden's Started comes now, for a caller who left

	close(neighbourDone)
	res, err := neighbour.Wait(ctx)
	if err != nil || res.Reason != "exited" || res.ExitCode != 0 {
		t.Fatalf("the neighbour: %+v %v, want exited 0", res, err)
	}
	if n := <-read; n != int64(64*len(chunk)) || res.StdoutBytes != n {
		t.Fatalf("the neighbour's output: read %d, recorded %d, want %d", n, res.StdoutBytes, 64*len(chunk))
	}
	// The warden was never given up, and its link still serves.
	if types := historyTypes(t, rt, sb.ID(), journal.KindSandbox); slices.Contains(types, "sandbox.warden_lost") {
		t.Fatalf("the warden was given up: %v", types)
	}
	if _, _, res, err := run(t, sb, spec.Process{Argv: []string{"after"}}); err != nil || res.Reason != "exited" {
		t.Fatalf("a start after: %+v %v", res, err)
	}
	// The abandoned child does not run on unattended: the warden holds no
	// process of it once killed and reaped.
	deadline := time.Now().Add(30 * time.Second)
	for f.WardenProcesses(handleOf(t, rt, sb.ID())) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the warden still holds %d processes", f.WardenProcesses(handleOf(t, rt, sb.ID())))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFakeWardenGoneWhileClosed: a kept sandbox whose warden is gone while
// no runtime runs (retired by hand here; killed, in the field) is
// re-adopted, its reattach fails, and the first start after the reopen,
// asked before the runtime learned it, is answered on a new warden.
// (Issue 30's first defect, on the Fake: the start was held for the new
// warden and then dropped, and waited for ever.)
func TestFakeWardenGoneWhileClosed(t *testing.T) {
	f := testutil.NewFake(t)
	path := filepath.Join(t.TempDir(), "j.db")
	rt := testutil.OpenFake(t, f, path)
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage, Lifetime: spec.Kept})
	if _, _, res, err := run(t, sb, spec.Process{Argv: []string{"first"}}); err != nil || res.Reason != "exited" {
		t.Fatalf("first: %+v %v", res, err)
	}
	h := handleOf(t, rt, sb.ID())
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.RetireWarden(context.Background(), h, 0, ""); err != nil {
		t.Fatal(err)
	}

	rt = testutil.OpenFake(t, f, path)
	again, err := rt.Sandbox(context.Background(), sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := again.Start(ctx, spec.Process{Argv: []string{"second"}, Stdout: spec.Discard, Stderr: spec.Discard})
	if err != nil {
		t.Fatalf("the first start after the reopen: %v (want it answered)", err)
	}
	if res, err := p.Wait(ctx); err != nil || res.Reason != "exited" {
		t.Fatalf("second: %+v %v", res, err)
	}
	if types := historyTypes(t, rt, sb.ID(), journal.KindSandbox); !slices.Contains(types, "sandbox.warden_lost") || f.WardenCount(h) != 1 {
		t.Fatalf("history %v, %d wardens; want the old one journaled lost and one new", types, f.WardenCount(h))
	}
}
