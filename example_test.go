package stockade_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/stockade/stockade/profile"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/spec"
)

// exampleEngine is an in-memory engine so the examples run anywhere; a real
// program leaves Options.Engine nil and talks to the Docker daemon.
func exampleEngine() dockerio.Engine {
	p, _ := profile.Lookup("linux-x64")
	f := dockerio.NewFake(p)
	f.Script = func(_ dockerio.Sandbox, req dockerio.ExecRequest) dockerio.FakeRun {
		return dockerio.FakeRun{Frames: []dockerio.FakeFrame{{Stream: framing.Stdout, Data: []byte("hello from the sandbox\n")}}}
	}
	return f
}

func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "stockade-example")
	defer func() { _ = os.RemoveAll(dir) }() // a temporary directory
	rt, err := stockade.Open(ctx, stockade.Options{Journal: filepath.Join(dir, "journal.db"), Engine: exampleEngine()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() {
		// Close closes the journal: its error is worth knowing.
		if err := rt.Close(); err != nil {
			fmt.Println(err)
		}
	}()
	sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage, Lifetime: spec.OneShot})
	if err != nil {
		fmt.Println(err)
		return
	}
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"echo", "hello from the sandbox"}, Stderr: spec.Discard})
	if err != nil {
		fmt.Println(err)
		return
	}
	// Every piped stream must be read.
	if _, err := io.Copy(os.Stdout, p.Stdout()); err != nil {
		fmt.Println(err)
	}
	res, err := p.Wait(ctx)
	fmt.Println("exit", res.ExitCode, res.Reason, err)
	if err := sb.Remove(ctx); err != nil {
		fmt.Println(err)
	}
	h, _ := rt.History(ctx, sb.ID())
	for _, e := range h {
		if e.Kind == "sandbox" {
			fmt.Println(e.Type)
		}
	}
	// Output:
	// hello from the sandbox
	// exit 0 exited <nil>
	// sandbox.reserved
	// sandbox.created
	// sandbox.started
	// sandbox.warden_started
	// sandbox.stopping
	// sandbox.usage_sampled
	// sandbox.exited
	// sandbox.removing
	// sandbox.removed
}

func ExampleRuntime_Recovery() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "stockade-example")
	defer func() { _ = os.RemoveAll(dir) }() // a temporary directory
	path := filepath.Join(dir, "journal.db")
	engine := exampleEngine()
	rt, _ := stockade.Open(ctx, stockade.Options{Journal: path, Engine: engine})
	kept, _ := rt.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage, Lifetime: spec.Kept})
	if _, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage, Lifetime: spec.OneShot}); err != nil {
		fmt.Println(err)
		return
	}
	// As if the host process died: both sandboxes are left live.
	if err := rt.Close(); err != nil {
		fmt.Println(err)
		return
	}

	rt, _ = stockade.Open(ctx, stockade.Options{Journal: path, Engine: engine})
	defer func() {
		if err := rt.Close(); err != nil {
			fmt.Println(err)
		}
	}()
	report, err := rt.Recovery(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range report.Sandboxes {
		fmt.Println(s.ID == kept.ID(), s.From, "→", s.Decision, "→", s.Settled)
	}
	// Unordered output:
	// true started → re-adopt → started
	// false started → stop and remove → removed
}
