package server_test

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	stockadev1 "github.com/stockade/stockade/api/stockade/v1"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/spec"
)

// TestTTYSpecTravels: a process's tty, rows and cols go from the client
// through the server to the engine unchanged; the fake engine (a process
// run as a plain Docker exec, no warden) refuses a terminal with
// unsupported, and the refusal comes back typed, as it does embedded.
func TestTTYSpecTravels(t *testing.T) {
	fx := serve(t, execsOnly)
	ctx := ctxFor(t)
	for _, side := range sides(fx) {
		t.Run(side.name, func(t *testing.T) {
			sb, err := side.rt.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage})
			if err != nil {
				t.Fatal(err)
			}
			before := len(fx.engine.created())
			p, err := sb.Start(ctx, spec.Process{Argv: []string{"sh"}, Stdin: true, TTY: true, Rows: 24, Cols: 80})
			if !spec.IsCode(err, spec.CodeUnsupported) {
				t.Fatalf("a TTY start without a warden: %v, %v; want unsupported", p, err)
			}
			if !strings.Contains(err.Error(), "warden") {
				t.Errorf("the refusal does not say why: %v", err)
			}
			specs := fx.engine.created()[before:]
			if len(specs) != 1 {
				t.Fatalf("the engine was asked for %d processes, want 1", len(specs))
			}
			if got := specs[0]; !got.TTY || got.Rows != 24 || got.Cols != 80 || !got.Stdin {
				t.Errorf("the engine got tty=%v rows=%d cols=%d stdin=%v; want true, 24, 80, true", got.TTY, got.Rows, got.Cols, got.Stdin)
			}
			// A size without a terminal is refused before anything runs.
			if _, err := sb.Start(ctx, spec.Process{Argv: []string{"true"}, Rows: 24, Cols: 80}); !spec.IsCode(err, spec.CodeInvalidArgument) {
				t.Errorf("a size without tty: %v, want invalid_argument", err)
			}
		})
	}
}

// TestResizeNoTerminal: Resize on a running process without a terminal is
// invalid_argument across the wire, as embedded; the failed resize leaves
// the stream working (stdin written around it arrives in order), and a
// resize after the process's end is a no-op on both sides.
func TestResizeNoTerminal(t *testing.T) {
	fx := serve(t)
	ctx := ctxFor(t)
	fx.fake.Script = func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun {
		return dockerio.FakeRun{EchoStdin: true}
	}
	for _, side := range sides(fx) {
		t.Run(side.name, func(t *testing.T) {
			sb, err := side.rt.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage})
			if err != nil {
				t.Fatal(err)
			}
			p, err := sb.Start(ctx, spec.Process{Argv: []string{"cat"}, Stdin: true})
			if err != nil {
				t.Fatal(err)
			}
			out := make(chan string, 1)
			go func() {
				b, _ := io.ReadAll(p.Stdout())
				out <- string(b)
			}()
			go func() { _, _ = io.Copy(io.Discard, p.Stderr()) }()
			if _, err := p.Stdin().Write([]byte("a")); err != nil {
				t.Fatal(err)
			}
			err = p.Resize(ctx, 40, 120)
			if !spec.IsCode(err, spec.CodeInvalidArgument) {
				t.Fatalf("resize without a terminal: %v, want invalid_argument", err)
			}
			if !strings.Contains(err.Error(), "no terminal") {
				t.Errorf("the error does not say why: %v", err)
			}
			if _, err := p.Stdin().Write([]byte("b")); err != nil {
				t.Fatal(err)
			}
			if err := p.Stdin().Close(); err != nil {
				t.Fatal(err)
			}
			if got := <-out; got != "ab" {
				t.Errorf("stdout %q, want %q", got, "ab")
			}
			if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 {
				t.Fatalf("result %+v %v", res, err)
			}
			if err := p.Resize(ctx, 40, 120); err != nil {
				t.Errorf("resize after the end: %v, want nil (nothing to resize)", err)
			}
		})
	}
}

// TestResizeWire: on the raw Exec stream, each resize is answered with its
// seq; an out-of-range size is invalid_argument in the answer's error, and
// the call goes on to its result.
func TestResizeWire(t *testing.T) {
	fx := serve(t)
	ctx := ctxFor(t)
	fx.fake.Script = func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun {
		return dockerio.FakeRun{EchoStdin: true}
	}
	sb, err := fx.c.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("passthrough:///stockade", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", fx.socket)
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }() // teardown
	stream, err := stockadev1.NewProcessesClient(conn).Exec(ctx)
	if err != nil {
		t.Fatal(err)
	}
	send := func(m *stockadev1.ExecRequest) {
		t.Helper()
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	send(&stockadev1.ExecRequest{Msg: &stockadev1.ExecRequest_Start{Start: &stockadev1.ExecStart{SandboxId: sb.ID(), Argv: []string{"cat"}, Stdin: true}}})
	if m, err := stream.Recv(); err != nil || m.GetStarted() == nil {
		t.Fatalf("start: %v %v", m, err)
	}
	send(&stockadev1.ExecRequest{Msg: &stockadev1.ExecRequest_Resize{Resize: &stockadev1.Resize{Seq: 7, Rows: 70000, Cols: 80}}})
	send(&stockadev1.ExecRequest{Msg: &stockadev1.ExecRequest_Resize{Resize: &stockadev1.Resize{Seq: 8, Rows: 24, Cols: 80}}})
	send(&stockadev1.ExecRequest{Msg: &stockadev1.ExecRequest_CloseStdin{CloseStdin: true}})
	answers := map[uint64]*stockadev1.Error{}
	var result *stockadev1.Result
	for result == nil {
		m, err := stream.Recv()
		if err != nil {
			t.Fatalf("recv: %v", err)
		}
		switch x := m.Msg.(type) {
		case *stockadev1.ExecResponse_Resized:
			if x.Resized.Error == nil {
				t.Errorf("resize %d: no error", x.Resized.Seq)
			}
			answers[x.Resized.Seq] = x.Resized.Error
		case *stockadev1.ExecResponse_Result:
			result = x.Result
		}
	}
	if len(answers) != 2 || answers[7] == nil || answers[8] == nil {
		t.Fatalf("answers %v, want one for 7 and one for 8", answers)
	}
	if answers[7].Code != string(spec.CodeInvalidArgument) || !strings.Contains(answers[7].Msg, "65535") {
		t.Errorf("out-of-range size: %+v", answers[7])
	}
	if answers[8].Code != string(spec.CodeInvalidArgument) || !strings.Contains(answers[8].Msg, "no terminal") {
		t.Errorf("no terminal: %+v", answers[8])
	}
	if result.ExitCode != 0 {
		t.Errorf("result %+v", result)
	}
	// A start whose size does not fit is refused before anything runs.
	bad, err := stockadev1.NewProcessesClient(conn).Exec(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := bad.Send(&stockadev1.ExecRequest{Msg: &stockadev1.ExecRequest_Start{Start: &stockadev1.ExecStart{SandboxId: sb.ID(), Argv: []string{"sh"}, Tty: true, Rows: 24, Cols: 1 << 16}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := bad.Recv(); err == nil || !strings.Contains(err.Error(), "65535") {
		t.Errorf("a start with cols 65536: %v, want invalid_argument", err)
	}
}

// side is one way to the same runtime: through the server, or embedded.
type side struct {
	name string
	rt   host.Runtime
}

// sides are both ways to fx's runtime, for tests that must see the same.
func sides(fx *fixture) []side {
	return []side{{"served", fx.c}, {"embedded", fx.rt.Host()}}
}
