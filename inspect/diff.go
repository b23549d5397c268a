package inspect

import (
	"context"
	"encoding/json"
	"maps"
	"reflect"
	"slices"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/spec"
)

// Change is one field that differs between two folded states.
type Change struct {
	// Field names it, nested fields as a.b.
	Field string `json:"field"`
	From  any    `json:"from"`
	To    any    `json:"to"`
}

// Diff folds a sandbox's stream (a process's with process set) to
// sequences a and b (0: its end) through in and lists what differs, field
// by field, sorted by name. It compares the states' JSON, so it sees what
// a replay shows.
func Diff(ctx context.Context, in host.Inspector, id string, process bool, a, b uint64) ([]Change, error) {
	return diffStates(func(at uint64) (any, error) {
		if process {
			return in.ReplayProcess(ctx, id, at)
		}
		return in.ReplaySandbox(ctx, id, at)
	}, a, b)
}

func diffStates(fold func(at uint64) (any, error), a, b uint64) ([]Change, error) {
	var states [2]map[string]any
	for i, at := range []uint64{a, b} {
		st, err := fold(at)
		if err != nil {
			return nil, err
		}
		raw, err := json.Marshal(st)
		if err != nil {
			return nil, spec.Wrap(spec.CodeInternal, "journal diff", err, "encoding the state")
		}
		if err := json.Unmarshal(raw, &states[i]); err != nil {
			return nil, spec.Wrap(spec.CodeInternal, "journal diff", err, "decoding the state")
		}
	}
	var out []Change
	diffValues("", states[0], states[1], &out)
	return out, nil
}

func diffValues(prefix string, a, b any, out *[]Change) {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if !aok || !bok {
		if !reflect.DeepEqual(a, b) {
			*out = append(*out, Change{Field: prefix, From: a, To: b})
		}
		return
	}
	keys := map[string]bool{}
	for k := range am {
		keys[k] = true
	}
	for k := range bm {
		keys[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		name := k
		if prefix != "" {
			name = prefix + "." + k
		}
		diffValues(name, am[k], bm[k], out)
	}
}
