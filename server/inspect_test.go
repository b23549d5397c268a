package server_test

import (
	"io"
	"strings"
	"testing"

	"github.com/stockade/stockade/internal/inspecttest"

	"github.com/stockade/stockade/spec"
)

// TestInspectorsAgreeServed: the client gives the same answers to every
// host.Inspector call as the runtime it is served by (which answers as
// inspect does: the root's TestInspectorsAgree).
func TestInspectorsAgreeServed(t *testing.T) {
	fx := serve(t)
	ctx := ctxFor(t)
	var ids []string
	for i, lifetime := range []spec.Lifetime{spec.OneShot, spec.Kept} {
		sb, err := fx.c.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage, Lifetime: lifetime})
		if err != nil {
			t.Fatal(err)
		}
		p, err := sb.Start(ctx, spec.Process{Argv: []string{"x"}, Stderr: spec.Discard})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, p.Stdout()); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			err = sb.Remove(ctx)
		} else {
			err = sb.Stop(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID())
	}
	ids = append(ids, "nosuch")
	want := inspecttest.Answers(ctx, t, fx.rt, ids, errKey)
	for _, must := range []string{"process.exited", "sandbox.removed", `"Phase": "exited"`, "not_found", "export"} {
		if !strings.Contains(want, must) {
			t.Fatalf("the runtime's answers lack %q:\n%s", must, want)
		}
	}
	if got := inspecttest.Answers(ctx, t, fx.c, ids, errKey); got != want {
		t.Errorf("the client answers\n%s\nthe runtime answers\n%s", got, want)
	}
}

// errKey is what of an error the comparison takes.
func errKey(err error) string { return string(spec.CodeOf(err)) }
