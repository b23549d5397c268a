package stockade_test

import (
	"github.com/stockade/stockade/internal/inspecttest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/inspect"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/spec"
)

// TestInspectorsAgree: the embedded runtime (its methods and its Host
// adapter), inspect.New on its journal, and inspect.Open of the file once
// the runtime closed give the same answers to every host.Inspector call
// for the same journal.
func TestInspectorsAgree(t *testing.T) {
	f := testutil.NewFake(t)
	f.Script = script(dockerio.FakeFrame{Stream: framing.Stdout, Data: []byte("hi")})
	path := filepath.Join(t.TempDir(), "journal.db")
	rt := testutil.OpenFake(t, f, path)
	ctx := t.Context()
	gone := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
	kept := mustCreate(t, rt, spec.Sandbox{Image: fakeImage, Lifetime: spec.Kept})
	for _, sb := range []*stockade.Sandbox{gone, kept} {
		if _, _, _, err := run(t, sb, spec.Process{Argv: []string{"x"}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := gone.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if err := kept.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	ids := []string{gone.ID(), kept.ID(), "nosuch"}

	want := inspecttest.Answers(ctx, t, rt, ids, errKey)
	for _, must := range []string{"process.exited", "sandbox.removed", `"Phase": "exited"`, "not_found", "live", "export"} {
		if !strings.Contains(want, must) {
			t.Fatalf("the runtime's answers lack %q:\n%s", must, want)
		}
	}
	for name, in := range map[string]host.Inspector{
		"Runtime.Host":               rt.Host(),
		"inspect.New of its journal": inspect.New(stockade.JournalOf(rt)),
	} {
		if got := inspecttest.Answers(ctx, t, in, ids, errKey); got != want {
			t.Errorf("%s answers\n%s\nthe runtime answers\n%s", name, got, want)
		}
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := inspect.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close() }() // only read
	if got := inspecttest.Answers(ctx, t, r, ids, errKey); got != want {
		t.Errorf("the offline reader answers\n%s\nthe runtime answered\n%s", got, want)
	}
}

// errKey is what of an error the comparison takes.
func errKey(err error) string { return err.Error() }
