package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	stockadev1 "github.com/stockade/stockade/api/stockade/v1"
	"github.com/stockade/stockade/client"
	"github.com/stockade/stockade/spec"
)

// Sizes the fake server treats specially.
const (
	rowsUnanswered = 998 // never answered: the result (or the call's end) settles it
	rowsBreak      = 997 // the call fails
)

// fakeProcs is a Processes server that records an exec's start, stdin and
// resizes. It answers a resize with a zero dimension invalid_argument and
// any other at once, but for the sizes above; close_stdin ends the process
// (its stdin echoed as stdout, then an exit 0).
type fakeProcs struct {
	stockadev1.UnimplementedProcessesServer
	mu      sync.Mutex
	start   *stockadev1.ExecStart
	stdin   bytes.Buffer
	resizes []*stockadev1.Resize
	// pending is told of each resize left unanswered.
	pending chan uint64
}

func (f *fakeProcs) Exec(stream stockadev1.Processes_ExecServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.start = first.GetStart()
	f.mu.Unlock()
	if err := stream.Send(&stockadev1.ExecResponse{Msg: &stockadev1.ExecResponse_Started{Started: &stockadev1.ExecStarted{ProcessId: "p1"}}}); err != nil {
		return err
	}
	for {
		m, err := stream.Recv()
		if err != nil {
			return nil
		}
		switch x := m.Msg.(type) {
		case *stockadev1.ExecRequest_Stdin:
			f.mu.Lock()
			f.stdin.Write(x.Stdin)
			f.mu.Unlock()
		case *stockadev1.ExecRequest_Resize:
			f.mu.Lock()
			f.resizes = append(f.resizes, x.Resize)
			f.mu.Unlock()
			ans := &stockadev1.Resized{Seq: x.Resize.Seq}
			switch {
			case x.Resize.Rows == rowsUnanswered:
				f.pending <- x.Resize.Seq
				continue
			case x.Resize.Rows == rowsBreak:
				return status.Error(codes.Internal, "the fake breaks the call")
			case x.Resize.Rows == 0 || x.Resize.Cols == 0:
				ans.Error = &stockadev1.Error{Code: string(spec.CodeInvalidArgument), Op: "process", Msg: "terminal size: both must be positive"}
			}
			if err := stream.Send(&stockadev1.ExecResponse{Msg: &stockadev1.ExecResponse_Resized{Resized: ans}}); err != nil {
				return err
			}
		case *stockadev1.ExecRequest_CloseStdin:
			f.mu.Lock()
			echo := append([]byte(nil), f.stdin.Bytes()...)
			f.mu.Unlock()
			for len(echo) > 0 {
				n := min(len(echo), 32<<10)
				if err := stream.Send(&stockadev1.ExecResponse{Msg: &stockadev1.ExecResponse_Output{Output: &stockadev1.Output{Stream: stockadev1.Stream_STREAM_STDOUT, Data: echo[:n]}}}); err != nil {
					return err
				}
				echo = echo[n:]
			}
			return stream.Send(&stockadev1.ExecResponse{Msg: &stockadev1.ExecResponse_Result{Result: &stockadev1.Result{ExitCode: 0, Reason: "exited"}}})
		}
	}
}

// fakeSandboxes knows every sandbox.
type fakeSandboxes struct {
	stockadev1.UnimplementedSandboxesServer
}

func (fakeSandboxes) Inspect(context.Context, *stockadev1.InspectSandboxRequest) (*stockadev1.InspectSandboxResponse, error) {
	return &stockadev1.InspectSandboxResponse{State: &stockadev1.SandboxState{}}, nil
}

// serveFake serves f on a unix socket and returns a client of it.
func serveFake(t *testing.T, f *fakeProcs) *client.Client {
	t.Helper()
	dir, err := os.MkdirTemp("", "ctty")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) }) // teardown
	sock := filepath.Join(dir, "s.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	stockadev1.RegisterProcessesServer(srv, f)
	stockadev1.RegisterSandboxesServer(srv, fakeSandboxes{})
	go func() { _ = srv.Serve(lis) }() // ends with Stop, at cleanup
	t.Cleanup(srv.Stop)
	c, err := client.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() }) // teardown
	return c
}

func ctxFor(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestResizeOnExecStream: the start carries tty, rows and cols; Resize
// goes out on the exec stream, each call getting its own answer, while
// another goroutine writes stdin (the race detector watches the sends);
// the server's typed error comes back as its code; a caller that gives up
// is cancelled; a resize left unanswered when the result comes is done
// (the process ended), and so is one after the end.
func TestResizeOnExecStream(t *testing.T) {
	f := &fakeProcs{pending: make(chan uint64, 1)}
	c := serveFake(t, f)
	ctx := ctxFor(t)
	sb, err := c.Sandbox(ctx, "sb1")
	if err != nil {
		t.Fatal(err)
	}
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"sh"}, Stdin: true, TTY: true, Rows: 24, Cols: 80})
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	st := f.start
	f.mu.Unlock()
	if !st.Tty || st.Rows != 24 || st.Cols != 80 || !st.Stdin {
		t.Fatalf("start tty=%v rows=%d cols=%d stdin=%v; want true, 24, 80, true", st.Tty, st.Rows, st.Cols, st.Stdin)
	}
	out := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(p.Stdout())
		out <- b
	}()
	go func() { _, _ = io.Copy(io.Discard, p.Stderr()) }()

	// Stdin, some writes longer than a message, against resizes.
	var want bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := range 64 {
			b := bytes.Repeat([]byte{byte('a' + i%26)}, 1000+i*1500)
			want.Write(b)
			if _, err := p.Stdin().Write(b); err != nil {
				t.Errorf("stdin: %v", err)
				return
			}
		}
	}()
	const resizes = 100
	go func() {
		defer wg.Done()
		for i := range resizes {
			if err := p.Resize(ctx, uint16(i+1), uint16(i+2)); err != nil {
				t.Errorf("resize %d: %v", i, err)
			}
		}
	}()
	wg.Wait()

	if err := p.Resize(ctx, 0, 80); !spec.IsCode(err, spec.CodeInvalidArgument) {
		t.Errorf("resize 0x80: %v, want invalid_argument", err)
	}
	// The answer's fate when the caller gives up: cancelled, and the late
	// answer (here: none, then the result) is dropped.
	short, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Resize(short, rowsUnanswered, 80) }()
	<-f.pending
	cancel()
	if err := <-done; !spec.IsCode(err, spec.CodeCancelled) {
		t.Errorf("a resize whose caller gave up: %v, want cancelled", err)
	}
	// One left waiting when the result comes: done.
	go func() { done <- p.Resize(ctx, rowsUnanswered, 81) }()
	<-f.pending
	if err := p.Stdin().Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("a resize waiting at the end: %v, want nil", err)
	}
	if got := <-out; !bytes.Equal(got, want.Bytes()) {
		t.Errorf("stdout: %d bytes, want stdin's %d, in order", len(got), want.Len())
	}
	if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 {
		t.Fatalf("result %+v %v", res, err)
	}
	if err := p.Resize(ctx, 30, 100); err != nil {
		t.Errorf("resize after the end: %v, want nil", err)
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.resizes) != resizes+3 {
		t.Fatalf("the server got %d resizes, want %d", len(f.resizes), resizes+3)
	}
	seqs := map[uint64]bool{}
	for i, r := range f.resizes {
		if seqs[r.Seq] {
			t.Errorf("seq %d sent twice", r.Seq)
		}
		seqs[r.Seq] = true
		if i < resizes && (r.Rows != uint32(i+1) || r.Cols != uint32(i+2)) {
			t.Errorf("resize %d: %dx%d, want %dx%d", i, r.Rows, r.Cols, i+1, i+2)
		}
	}
}

// TestResizeStreamBroken: a resize waiting when the call fails gets an
// error, not a hang and not a false success.
func TestResizeStreamBroken(t *testing.T) {
	f := &fakeProcs{pending: make(chan uint64, 1)}
	c := serveFake(t, f)
	ctx := ctxFor(t)
	sb, err := c.Sandbox(ctx, "sb1")
	if err != nil {
		t.Fatal(err)
	}
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"sh"}, TTY: true})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, p.Stdout()) }()
	go func() { _, _ = io.Copy(io.Discard, p.Stderr()) }()
	err = p.Resize(ctx, rowsBreak, 80)
	var se *spec.Error
	if err == nil || !errors.As(err, &se) {
		t.Fatalf("a resize on a broken call: %v, want a typed error", err)
	}
	<-p.Done()
	if err := p.Resize(ctx, 24, 80); err != nil {
		t.Errorf("resize after the end: %v, want nil", err)
	}
}
