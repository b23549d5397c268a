package dockerio

import (
	"bytes"
	"context"
	"errors"
	"io"
	"syscall"
	"testing"

	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/spec"
)

func TestDockerioFake(t *testing.T) {
	p, _ := LookupProfile(DefaultProfile)
	f := NewFake(p)
	f.Script = func(sb Sandbox, req ExecRequest) FakeRun {
		switch req.Spec.Argv[0] {
		case "echo":
			return FakeRun{Frames: []FakeFrame{{framing.Stdout, []byte("hi\n")}, {framing.Stderr, []byte("e\n")}}, ExitCode: 3}
		case "cat":
			return FakeRun{EchoStdin: true}
		case "sleep":
			return FakeRun{Hold: make(chan struct{})}
		}
		return FakeRun{StartFailure: "not found"}
	}
	ctx := context.Background()
	s := spec.Sandbox{Image: fixtureImage, Policy: spec.DefaultPolicy(), Lifetime: spec.OneShot}
	sb, err := f.CreateSandbox(ctx, SandboxRequest{Owner: "o", ID: "s", Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.StartSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	run := func(argv string, stdin []byte) (string, ExecState, error) {
		req := ExecRequest{ProcessID: "p" + argv, Spec: spec.Process{Argv: []string{argv}, Stdin: stdin != nil, Stdout: spec.Pipe, Stderr: spec.Pipe}}
		id, err := f.CreateExec(ctx, sb, req)
		if err != nil {
			return "", ExecState{}, err
		}
		att, err := f.AttachExec(ctx, sb, id, req)
		if err != nil {
			return "", ExecState{}, err
		}
		defer att.Close()
		if stdin != nil {
			go func() { att.Stdin().Write(stdin); att.CloseStdin() }()
		}
		var out bytes.Buffer
		for {
			sid, p, err := att.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return "", ExecState{}, err
			}
			out.WriteString(sid.String() + ":" + string(p))
		}
		st, err := WaitExec(ctx, f, id)
		return out.String(), st, err
	}
	if out, st, err := run("echo", nil); err != nil || st.ExitCode != 3 || out == "" {
		t.Fatalf("echo: %q %+v %v", out, st, err)
	}
	if out, _, err := run("cat", []byte("abc")); err != nil || !bytes.Contains([]byte(out), []byte("abc")) {
		t.Fatalf("cat: %q %v", out, err)
	}
	if _, _, err := run("nope", nil); !spec.IsCode(err, spec.CodeExecFailed) {
		t.Fatalf("start failure: %v", err)
	}
	req := ExecRequest{ProcessID: "sleeper", Spec: spec.Process{Argv: []string{"sleep"}, Stdout: spec.Pipe, Stderr: spec.Pipe}}
	id, _ := f.CreateExec(ctx, sb, req)
	att, err := f.AttachExec(ctx, sb, id, req)
	if err != nil {
		t.Fatal(err)
	}
	if g, err := f.ReadGroup(ctx, sb, "sleeper"); err != nil || g != att.Group() {
		t.Fatalf("group %d %v", g, err)
	}
	if err := f.SignalGroup(ctx, sb, att.Group(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if _, _, err := att.Next(); err != io.EOF {
		t.Fatalf("after TERM: %v", err)
	}
	if st, _ := WaitExec(ctx, f, id); st.ExitCode != 143 {
		t.Fatalf("exit %d", st.ExitCode)
	}
	boom := errors.New("boom")
	f.Fault = func(op string) error {
		if op == "StartSandbox" {
			return spec.Wrap(spec.CodeEngine, "fake", boom, "injected")
		}
		return nil
	}
	if err := f.StartSandbox(ctx, sb); !errors.Is(err, boom) {
		t.Fatalf("fault: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := f.ListOwned(cctx, "o"); !spec.IsCode(err, spec.CodeCancelled) {
		t.Fatalf("cancelled ctx: %v", err)
	}
	if owned, err := f.ListOwned(ctx, "o"); err != nil || len(owned) != 1 || len(owned[0].Resources) != 3 {
		t.Fatalf("owned %+v %v", owned, err)
	}
	if err := f.RemoveSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
}
