package stockade_test

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/inspect"
	"github.com/stockade/stockade/spec"
)

// TestInspectorsAgree: the embedded runtime (its methods and its Host
// adapter), inspect.New on its journal, and inspect.Open of the file once
// the runtime closed give the same answers to every host.Inspector call
// for the same journal.
func TestInspectorsAgree(t *testing.T) {
	f := newFake(t)
	f.Script = script(dockerio.FakeFrame{Stream: framing.Stdout, Data: []byte("hi")})
	path := filepath.Join(t.TempDir(), "journal.db")
	rt := openFake(t, f, path)
	ctx := t.Context()
	gone := mustCreate(t, rt, stockade.SandboxSpec{Image: fakeImage})
	kept := mustCreate(t, rt, stockade.SandboxSpec{Image: fakeImage, Lifetime: spec.Kept})
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

	want := answers(ctx, t, rt, ids)
	for _, must := range []string{"process.exited", "sandbox.removed", `"Phase": "exited"`, "not_found", "live", "export"} {
		if !strings.Contains(want, must) {
			t.Fatalf("the runtime's answers lack %q:\n%s", must, want)
		}
	}
	for name, in := range map[string]host.Inspector{
		"Runtime.Host":               rt.Host(),
		"inspect.New of its journal": inspect.New(stockade.JournalOf(rt)),
	} {
		if got := answers(ctx, t, in, ids); got != want {
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
	if got := answers(ctx, t, r, ids); got != want {
		t.Errorf("the offline reader answers\n%s\nthe runtime answered\n%s", got, want)
	}
}

// answers asks in every Inspector question about the sandboxes ids (their
// histories, and every sandbox and process state at each of their
// sequences) and about the whole journal, and returns the answers as JSON.
func answers(ctx context.Context, t *testing.T, in host.Inspector, ids []string) string {
	t.Helper()
	type answer struct {
		Q   string `json:"q"`
		A   any    `json:"a,omitempty"`
		Err string `json:"err,omitempty"`
	}
	var out []answer
	add := func(q string, a any, err error) {
		e := ""
		if err != nil {
			a = nil // on an error only the error counts
			e = err.Error()
		}
		out = append(out, answer{q, a, e})
	}
	for _, id := range ids {
		h, err := in.History(ctx, id)
		add("history "+id, h, err)
		for _, e := range h {
			q := "replay " + e.Kind + " " + e.ID + " at " + strconv.FormatUint(e.Seq, 10)
			if e.Kind == "process" {
				st, err := in.ReplayProcess(ctx, e.ID, e.Seq)
				add(q, st, err)
				continue
			}
			st, err := in.ReplaySandbox(ctx, e.ID, e.Seq)
			add(q, st, err)
		}
		st, err := in.ReplaySandbox(ctx, id, 0)
		add("replay sandbox "+id+" at its end", st, err)
	}
	live, err := in.Live(ctx)
	add("live", live, err)
	add("verify", nil, in.Verify(ctx))
	var exp bytes.Buffer
	err = in.Export(ctx, &exp)
	add("export", exp.String(), err)
	b, err := json.MarshalIndent(out, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
