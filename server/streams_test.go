package server_test

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	stockade "github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/server"
	"github.com/stockade/stockade/spec"
)

// settle waits until n stops changing (the same value over several
// looks), or exceeds limit, and returns it. The caller asserts on the
// value, never on the time it took.
func settle(n func() int64, limit int64) int64 {
	last, same := n(), 0
	for same < 20 && last <= limit {
		time.Sleep(25 * time.Millisecond)
		if v := n(); v == last {
			same++
		} else {
			last, same = v, 0
		}
	}
	return last
}

// TestBackpressure: a client that does not read stops the reads from the
// process: what the runtime has read stays within the windows and buffers
// between the process and the client (a few MiB), far below what the
// process has to say; once the client reads, everything arrives.
func TestBackpressure(t *testing.T) {
	fx := serve(t)
	ctx := ctxFor(t)
	const frame, frames = 256 << 10, 256 // 64 MiB
	data := bytes.Repeat([]byte{'x'}, frame)
	fx.fake.Script = func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun {
		run := dockerio.FakeRun{}
		for range frames {
			run.Frames = append(run.Frames, dockerio.FakeFrame{Stream: framing.Stdout, Data: data})
		}
		return run
	}
	sb, err := fx.c.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage})
	if err != nil {
		t.Fatal(err)
	}
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"yes"}, Stderr: spec.Discard, OutputQuota: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	// Bound: the client's stream window (1 MiB) and its one chunk in hand,
	// the server's write quota and one chunk per stream, the runtime's
	// pipe (64 KiB) and one decoded chunk. 4 MiB leaves room for gRPC's
	// own framing, and is a sixteenth of the output.
	const bound = 4 << 20
	if read := settle(fx.engine.read.Load, bound); read > bound {
		t.Fatalf("the runtime read %d bytes of the process's output while the client read none: over the bound of %d", read, bound)
	}
	t.Logf("read from the process while the client read nothing: %d bytes", fx.engine.read.Load())
	n, err := io.Copy(io.Discard, p.Stdout())
	if err != nil || n != frame*frames {
		t.Fatalf("read %d bytes (%v), want %d", n, err, frame*frames)
	}
	if res, err := p.Wait(ctx); err != nil || res.Reason != "exited" || res.StdoutBytes != frame*frames {
		t.Fatalf("result %+v %v", res, err)
	}
}

// TestDisconnectDetaches: a client that goes away from its attached
// processes without a word detaches them: an untied one runs on (to its
// own exit, its output recorded), one tied to its caller (StopWithCaller)
// is stopped with reason cancelled, and a detached one runs on.
func TestDisconnectDetaches(t *testing.T) {
	fx := serve(t)
	ctx := ctxFor(t)
	hold := make(chan struct{})
	fx.fake.Script = func(_ dockerio.Sandbox, req dockerio.ExecRequest) dockerio.FakeRun {
		if req.Spec.Argv[0] == "quick" {
			return dockerio.FakeRun{}
		}
		return dockerio.FakeRun{Hold: hold, After: []dockerio.FakeFrame{{Stream: framing.Stdout, Data: []byte("after its client left\n")}}}
	}
	sb, err := fx.c.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage})
	if err != nil {
		t.Fatal(err)
	}
	gone := dial(t, fx.socket)
	gsb, err := gone.Sandbox(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	attached, err := gsb.Start(ctx, spec.Process{Argv: []string{"sleep"}})
	if err != nil {
		t.Fatal(err)
	}
	tied, err := gsb.Start(ctx, spec.Process{Argv: []string{"sleep"}, StopWithCaller: true})
	if err != nil {
		t.Fatal(err)
	}
	detached, err := gsb.(interface {
		StartDetached(context.Context, spec.Process) (string, error)
	}).StartDetached(ctx, spec.Process{Argv: []string{"sleep"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := gone.Close(); err != nil {
		t.Fatal(err)
	}

	res, err := fx.c.Wait(ctx, tied.ID())
	if res.Reason != string(lifecycle.ReasonCancelled) || !spec.IsCode(err, spec.CodeCancelled) {
		t.Fatalf("a tied process after its client left: %+v %v, want cancelled", res, err)
	}
	// Later work through the server is served, and the untied and the
	// detached process still run meanwhile.
	q, err := sb.Start(ctx, spec.Process{Argv: []string{"quick"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, res, err := collect(t, ctx, q); err != nil || res.Reason != "exited" {
		t.Fatalf("quick: %+v %v", res, err)
	}
	for _, id := range []string{attached.ID(), detached} {
		st, err := fx.c.ReplayProcess(ctx, id, 0)
		if err != nil || st.Phase != lifecycle.PhaseStarted {
			t.Fatalf("%s after its client left: %s %v, want started", id, st.Phase, err)
		}
	}
	close(hold)
	res, err = fx.c.Wait(ctx, attached.ID())
	if err != nil || res.Reason != "exited" || res.ExitCode != 0 {
		t.Fatalf("the untied process once released: %+v %v, want exited 0", res, err)
	}
	var out strings.Builder
	if _, err := fx.rt.Logs(ctx, attached.ID(), func(c stockade.OutputChunk) error { out.Write(c.Data); return nil }); err != nil || out.String() != "after its client left\n" {
		t.Fatalf("its recording: %q %v, want what it wrote after its client left", out.String(), err)
	}
	if res, err := fx.c.Wait(ctx, detached); err != nil || res.Reason != "exited" {
		t.Fatalf("the detached process once released: %+v %v", res, err)
	}
}

// TestClosedOutput: closing an output stream unread detaches from the
// process, which runs to its exit; tied to its caller, it is stopped
// (cancelled). The same as embedded.
func TestClosedOutput(t *testing.T) {
	for _, tied := range []bool{false, true} {
		fx := serve(t)
		ctx := ctxFor(t)
		hold := make(chan struct{})
		fx.fake.Script = func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun {
			return dockerio.FakeRun{Hold: hold, Frames: []dockerio.FakeFrame{{Stream: framing.Stdout, Data: []byte("unread")}}}
		}
		sb, err := fx.c.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage})
		if err != nil {
			t.Fatal(err)
		}
		p, err := sb.Start(ctx, spec.Process{Argv: []string{"x"}, Stderr: spec.Discard, StopWithCaller: tied})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Stdout().Close(); err != nil {
			t.Fatal(err)
		}
		if !tied {
			close(hold)
		}
		res, err := p.Wait(ctx)
		switch {
		case tied && (res.Reason != string(lifecycle.ReasonCancelled) || !spec.IsCode(err, spec.CodeCancelled)):
			t.Fatalf("tied: got %+v %v, want cancelled", res, err)
		case !tied && (err != nil || res.Reason != "exited"):
			t.Fatalf("untied: got %+v %v, want exited", res, err)
		}
		if tied {
			close(hold)
		}
	}
}

// TestSignalAndStop: Signal and Stop reach an attached process by handle.
func TestSignalAndStop(t *testing.T) {
	fx := serve(t)
	ctx := ctxFor(t)
	hold := make(chan struct{})
	defer close(hold)
	fx.fake.Script = func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun { return dockerio.FakeRun{Hold: hold} }
	sb, err := fx.c.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		end  func(host.Process) error
		code int
	}{
		{"signal", func(p host.Process) error { return p.Signal(ctx, 9) }, 137},
		{"stop", func(p host.Process) error { return p.Stop(ctx) }, 143},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := sb.Start(ctx, spec.Process{Argv: []string{"sleep"}})
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.end(p); err != nil {
				t.Fatal(err)
			}
			_, _, res, _ := collect(t, ctx, p)
			if res.ExitCode != tc.code {
				t.Fatalf("got %+v, want exit code %d", res, tc.code)
			}
		})
	}
}

// TestDisconnectRemovesOneShot: a one-shot sandbox whose attached client
// went away (stockade run, killed) has lost its caller: once its process
// has ended (it runs on to its own end), it is removed.
func TestDisconnectRemovesOneShot(t *testing.T) {
	fx := serve(t)
	ctx := ctxFor(t)
	hold := make(chan struct{})
	fx.fake.Script = func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun {
		return dockerio.FakeRun{Hold: hold}
	}
	gone := dial(t, fx.socket)
	sb, err := gone.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage, Lifetime: spec.OneShot})
	if err != nil {
		t.Fatal(err)
	}
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"sleep"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := gone.Close(); err != nil {
		t.Fatal(err)
	}
	// The process runs on until it ends on its own; then its one-shot
	// sandbox goes.
	if st, err := fx.c.ReplayProcess(ctx, p.ID(), 0); err != nil || st.Phase != lifecycle.PhaseStarted {
		t.Fatalf("the process after its client left: %s %v, want started", st.Phase, err)
	}
	close(hold)
	if res, _ := fx.c.Wait(ctx, p.ID()); res.Reason != "exited" {
		t.Fatalf("the process after its client left: %+v, want exited", res)
	}
	testutil.Eventually(t, "the one-shot sandbox of a vanished client removed", func() bool {
		_, err := fx.c.Sandbox(ctx, sb.ID())
		return spec.IsCode(err, spec.CodeNotFound)
	})
	hist, err := fx.c.History(ctx, sb.ID())
	if err != nil || hist[len(hist)-1].Type != "sandbox.removed" {
		t.Fatalf("history ends %v, %v; want sandbox.removed", hist[len(hist)-1].Type, err)
	}
}

// TestShortCallsBesideManyStreams: a client with as many attached
// processes as the server's stream limit still gets its short calls
// through (the long-lived streams have their own connection), so it can
// stop what it runs.
func TestShortCallsBesideManyStreams(t *testing.T) {
	fx := serve(t)
	ctx := ctxFor(t)
	hold := make(chan struct{})
	defer close(hold)
	fx.fake.Script = func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun {
		return dockerio.FakeRun{Hold: hold}
	}
	sb, err := fx.c.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage, Policy: spec.Policy{Pids: 4096}})
	if err != nil {
		t.Fatal(err)
	}
	var procs []host.Process
	for range server.MaxStreams {
		p, err := sb.Start(ctx, spec.Process{Argv: []string{"hold"}, Stdout: spec.Discard, Stderr: spec.Discard})
		if err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
	}
	// Every stream of the long connection is taken; a short call is not.
	if _, err := fx.c.Sandboxes(ctx); err != nil {
		t.Fatalf("a listing beside %d streams: %v", len(procs), err)
	}
	if err := fx.c.StopProcess(ctx, procs[0].ID()); err != nil {
		t.Fatalf("a stop beside %d streams: %v", len(procs), err)
	}
	if res, _ := procs[0].Wait(ctx); res.Reason != string(lifecycle.ReasonSignaled) {
		t.Fatalf("the stopped process: %+v", res)
	}
}

// TestDisconnectEndsInput: a process reading its stdin whose client goes
// away sees the end of its input (as from a pipe whose writer died) and
// ends on its own, so its one-shot sandbox goes too; it is not left
// waiting for input nobody can send.
func TestDisconnectEndsInput(t *testing.T) {
	fx := serve(t)
	ctx := ctxFor(t)
	fx.fake.Script = func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun {
		return dockerio.FakeRun{EchoStdin: true}
	}
	gone := dial(t, fx.socket)
	sb, err := gone.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage, Lifetime: spec.OneShot})
	if err != nil {
		t.Fatal(err)
	}
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"cat"}, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := gone.Close(); err != nil {
		t.Fatal(err)
	}
	if res, err := fx.c.Wait(ctx, p.ID()); err != nil || res.Reason != "exited" {
		t.Fatalf("a process reading the stdin of a vanished client: %+v %v, want exited at the end of its input", res, err)
	}
	testutil.Eventually(t, "the one-shot sandbox of a vanished client removed", func() bool {
		_, err := fx.c.Sandbox(ctx, sb.ID())
		return spec.IsCode(err, spec.CodeNotFound)
	})
}
