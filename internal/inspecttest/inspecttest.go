// Package inspecttest asks a host.Inspector every question it answers
// about a journal and returns the answers in one comparable form, so tests
// can check that the embedded runtime, the client and the offline reader
// (inspect) agree call for call.
package inspecttest

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/stockade/stockade/host"
)

// Answers asks in every Inspector question about the sandboxes ids (their
// histories, and every sandbox and process state at each of their
// sequences) and about the whole journal, and returns the answers as JSON.
// errKey is what of an error is compared (its text, or only its code when
// the text may differ across the wire). No live entities, as nil or as an
// empty list, is one answer.
func Answers(ctx context.Context, tb testing.TB, in host.Inspector, ids []string, errKey func(error) string) string {
	tb.Helper()
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
			e = errKey(err)
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
		live = nil
	}
	add("live", live, err)
	add("verify", nil, in.Verify(ctx))
	var exp bytes.Buffer
	err = in.Export(ctx, &exp)
	add("export", exp.String(), err)
	b, err := json.MarshalIndent(out, "", " ")
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}
