package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/stockade/stockade/host"
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
		sb, err := fx.c.CreateSandbox(ctx, host.SandboxSpec{Image: fakeImage, Lifetime: lifetime})
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
	want := answers(ctx, t, fx.rt, ids)
	for _, must := range []string{"process.exited", "sandbox.removed", `"Phase": "exited"`, "not_found", "export"} {
		if !strings.Contains(want, must) {
			t.Fatalf("the runtime's answers lack %q:\n%s", must, want)
		}
	}
	if got := answers(ctx, t, fx.c, ids); got != want {
		t.Errorf("the client answers\n%s\nthe runtime answers\n%s", got, want)
	}
}

// answers asks in every Inspector question about the sandboxes ids (their
// histories, and every sandbox and process state at each of their
// sequences) and about the whole journal, and returns the answers as JSON.
// An error is compared by its code: its text may differ across the wire.
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
			e = string(spec.CodeOf(err))
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
	if len(live) == 0 {
		live = nil // none, whether as nil or as an empty list
	}
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
