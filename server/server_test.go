package server_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// collect reads a process's piped streams to their ends and waits.
func collect(t *testing.T, ctx context.Context, p host.Process) (string, string, spec.Result, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	var wg sync.WaitGroup
	if r := p.Stderr(); r != nil {
		wg.Add(1)
		// A read error shows as missing output, which the caller checks.
		go func() { defer wg.Done(); _, _ = io.Copy(&errOut, r) }()
	}
	if r := p.Stdout(); r != nil {
		_, _ = io.Copy(&out, r)
	}
	wg.Wait()
	res, err := p.Wait(ctx)
	return out.String(), errOut.String(), res, err
}

// TestSandboxCalls: create, list, inspect, history, replay, recovery,
// doctor, stop and remove, each through the server.
func TestSandboxCalls(t *testing.T) {
	fx := serve(t)
	ctx := ctxFor(t)
	var rt host.Runtime = fx.c
	sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage, Policy: spec.Policy{Pids: 99}})
	if err != nil {
		t.Fatal(err)
	}
	list, err := rt.Sandboxes(ctx)
	if err != nil || len(list) != 1 || list[0].ID != sb.ID() || list[0].Phase != lifecycle.PhaseStarted || list[0].Image != fakeImage {
		t.Fatalf("list: %+v %v", list, err)
	}
	again, err := rt.Sandbox(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	st, err := again.State(ctx)
	if err != nil || st.ID != sb.ID() || st.Phase != lifecycle.PhaseStarted || st.Spec.Policy.Pids != 99 {
		t.Fatalf("state: %+v %v", st, err)
	}
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := sb.State(ctx); err != nil || st.Phase != lifecycle.PhaseExited {
		t.Fatalf("after stop: %s %v", st.Phase, err)
	}
	if err := sb.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	hist, err := rt.History(ctx, sb.ID())
	if err != nil || len(hist) == 0 || hist[0].Type != "sandbox.reserved" || hist[len(hist)-1].Type != "sandbox.removed" || hist[0].Kind != "sandbox" {
		t.Fatalf("history: %+v %v", hist, err)
	}
	replayed, err := fx.c.ReplaySandbox(ctx, sb.ID(), 1)
	if err != nil || replayed.Phase != lifecycle.PhaseReserved {
		t.Fatalf("replay at 1: %+v %v", replayed, err)
	}
	if _, err := rt.Recovery(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err := fx.c.Doctor(ctx)
	if err != nil || rep.DaemonID != "fake" || rep.Profile != "linux-x64" {
		t.Fatalf("doctor: %+v %v", rep, err)
	}
	if list, err := rt.Sandboxes(ctx); err != nil || len(list) != 0 {
		t.Fatalf("list after remove: %+v %v", list, err)
	}
}

// TestExec: output of both streams, the exit code, stdin, and the byte
// counts, through one exec stream.
func TestExec(t *testing.T) {
	fx := serve(t)
	ctx := ctxFor(t)
	fx.fake.Script = func(_ dockerio.Sandbox, req dockerio.ExecRequest) dockerio.FakeRun {
		return dockerio.FakeRun{ExitCode: 3, EchoStdin: req.Spec.Stdin, Frames: []dockerio.FakeFrame{
			{Stream: framing.Stdout, Data: []byte("out ")}, {Stream: framing.Stderr, Data: []byte("err")}}}
	}
	sb, err := fx.c.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		p       spec.Process
		stdin   string
		out     string
		errOut  string
		outRead int64
	}{
		{"piped", spec.Process{Argv: []string{"x"}}, "", "out ", "err", 4},
		{"stdin echoed", spec.Process{Argv: []string{"cat"}, Stdin: true}, "hello\n", "out hello\n", "err", 10},
		{"stderr discarded", spec.Process{Argv: []string{"x"}, Stderr: spec.Discard}, "", "out ", "", 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := sb.Start(ctx, tc.p)
			if err != nil {
				t.Fatal(err)
			}
			if tc.p.Stdin {
				if _, err := io.WriteString(p.Stdin(), tc.stdin); err != nil {
					t.Fatal(err)
				}
				if err := p.Stdin().Close(); err != nil {
					t.Fatal(err)
				}
			} else if p.Stdin() != nil {
				t.Fatal("stdin handed out without being asked for")
			}
			if (p.Stderr() == nil) != (tc.p.Stderr == spec.Discard) {
				t.Fatalf("stderr is %v for mode %q", p.Stderr(), tc.p.Stderr)
			}
			out, errOut, res, err := collect(t, ctx, p)
			if err != nil || out != tc.out || errOut != tc.errOut || res.ExitCode != 3 || res.Reason != "exited" || res.StdoutBytes != tc.outRead {
				t.Fatalf("got %q %q %+v %v", out, errOut, res, err)
			}
			select {
			case <-p.Done():
			default:
				t.Fatal("Done not closed after Wait returned")
			}
		})
	}
}

// TestTypedErrors: a stockade error crosses the wire with its code, and
// errors.As finds a *spec.Error on the client side.
func TestTypedErrors(t *testing.T) {
	fx := serve(t)
	ctx := ctxFor(t)
	sb, err := fx.c.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage})
	if err != nil {
		t.Fatal(err)
	}
	fx.fake.Script = func(_ dockerio.Sandbox, req dockerio.ExecRequest) dockerio.FakeRun {
		if req.Spec.Argv[0] == "missing" {
			return dockerio.FakeRun{StartFailure: "exec: \"missing\": executable file not found"}
		}
		return dockerio.FakeRun{}
	}
	tests := []struct {
		name string
		call func() error
		want spec.Code
	}{
		{"unknown sandbox", func() error { _, err := fx.c.Sandbox(ctx, "nope"); return err }, spec.CodeNotFound},
		{"bad lifetime", func() error {
			_, err := fx.c.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage, Lifetime: "forever"})
			return err
		}, spec.CodeInvalidArgument},
		{"empty argv", func() error { _, err := sb.Start(ctx, spec.Process{}); return err }, spec.CodeInvalidArgument},
		{"exec failed", func() error {
			p, err := sb.Start(ctx, spec.Process{Argv: []string{"missing"}})
			if err != nil {
				return err
			}
			_, _, _, err = collect(t, ctx, p)
			return err
		}, spec.CodeExecFailed},
		{"put outside the workspace", func() error { return sb.Put(ctx, "../etc", strings.NewReader("")) }, spec.CodeInvalidArgument},
		{"wait for an unknown process", func() error { _, err := fx.c.Wait(ctx, "nope"); return err }, spec.CodeNotFound},
		{"signal an unknown process", func() error { return fx.c.Signal(ctx, "nope", syscall.SIGTERM) }, spec.CodeNotFound},
		{"detached with stdin", func() error {
			_, err := sb.(interface {
				StartDetached(context.Context, spec.Process) (string, error)
			}).StartDetached(ctx, spec.Process{Argv: []string{"x"}, Stdin: true})
			return err
		}, spec.CodeInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			var se *spec.Error
			if !errors.As(err, &se) || se.Code != tc.want || !spec.IsCode(err, tc.want) {
				t.Fatalf("got %v (%T), want a *spec.Error with code %s", err, err, tc.want)
			}
		})
	}
	// The server's text survives: the message says what was wrong.
	_, err = fx.c.Sandbox(ctx, "nope")
	if !strings.Contains(err.Error(), "no live sandbox nope") {
		t.Fatalf("message lost: %v", err)
	}
}

// TestFiles: a tar put into the workspace comes back out of Get.
func TestFiles(t *testing.T) {
	fx := serve(t)
	ctx := ctxFor(t)
	sb, err := fx.c.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage})
	if err != nil {
		t.Fatal(err)
	}
	var in bytes.Buffer
	tw := tar.NewWriter(&in)
	content := bytes.Repeat([]byte("0123456789"), 10_000) // several chunks
	if err := tw.WriteHeader(&tar.Header{Name: "big.txt", Mode: 0o644, Size: int64(len(content))}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(content); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sb.Put(ctx, "work", &in); err != nil {
		t.Fatal(err)
	}
	rc, live, err := sb.Get(ctx, "work/big.txt", false)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }() // only read
	tr := tar.NewReader(rc)
	var got []byte
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(h.Name, "big.txt") {
			got, _ = io.ReadAll(tr)
		}
	}
	if !bytes.Equal(got, content) || !live {
		t.Fatalf("got %d bytes (live %v), want %d (live: the workload runs)", len(got), live, len(content))
	}
}

// TestRecordCrossesTheWire: a process's Record bound travels with its
// start, so a host that switches to served keeps its recording choice.
func TestRecordCrossesTheWire(t *testing.T) {
	fx := serve(t)
	ctx := ctxFor(t)
	fx.fake.Script = func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun {
		return dockerio.FakeRun{Frames: []dockerio.FakeFrame{{Stream: framing.Stdout, Data: []byte("x")}}}
	}
	sb, err := fx.c.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage})
	if err != nil {
		t.Fatal(err)
	}
	journalPath := filepath.Join(filepath.Dir(fx.socket), "journal.db")
	for _, tc := range []struct {
		rec      spec.Record
		recorded bool
	}{{spec.Record{}, true}, {spec.Record{Off: true}, false}} {
		p, err := sb.Start(ctx, spec.Process{Argv: []string{"x"}, Record: tc.rec})
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, p.Stdout()) // a drain
		if _, err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		var got []byte
		_, err = stockade.ReadOutput(journalPath, p.ID(), func(ch stockade.OutputChunk) error { got = append(got, ch.Data...); return nil })
		if tc.recorded != (err == nil && string(got) == "x") {
			t.Fatalf("record %+v: recorded %q, %v", tc.rec, got, err)
		}
	}
}

// TestLogsThroughTheServer: a process's recorded output reaches a client
// that is not on the journal's machine (any gRPC host), in arrival order,
// with the recording's summary.
func TestLogsThroughTheServer(t *testing.T) {
	fx := serve(t, execsOnly)
	ctx := ctxFor(t)
	fx.fake.Script = func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun {
		return dockerio.FakeRun{Frames: []dockerio.FakeFrame{{Stream: framing.Stdout, Data: []byte("out ")}, {Stream: framing.Stderr, Data: []byte("err ")}, {Stream: framing.Stdout, Data: []byte("more")}}}
	}
	sb, err := fx.c.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage})
	if err != nil {
		t.Fatal(err)
	}
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"x"}, Stdout: spec.Discard, Stderr: spec.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	var got []string
	sum, err := fx.c.Logs(ctx, p.ID(), func(ch host.OutputChunk) error {
		got = append(got, ch.Stream+":"+string(ch.Data))
		return nil
	})
	if err != nil || strings.Join(got, "|") != "stdout:out |stderr:err |stdout:more" || !sum.Complete || sum.StdoutBytes != int64(len("out more")) {
		t.Fatalf("logs: %q %+v %v", got, sum, err)
	}
	if _, err := fx.c.Logs(ctx, "nosuchprocess", func(host.OutputChunk) error { return nil }); !spec.IsCode(err, spec.CodeNotFound) {
		t.Fatalf("logs of an unknown process: %v, want not_found", err)
	}
}
