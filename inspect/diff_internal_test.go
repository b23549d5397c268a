package inspect

import (
	"errors"
	"fmt"
	"testing"
)

func TestDiffValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b any
		want string
	}{
		{name: "equal", a: map[string]any{"x": 1.0}, b: map[string]any{"x": 1.0}, want: "[]"},
		{name: "a changed value", a: map[string]any{"x": 1.0}, b: map[string]any{"x": 2.0}, want: "[{x 1 2}]"},
		{name: "a field that appears", a: map[string]any{}, b: map[string]any{"x": "v"}, want: "[{x <nil> v}]"},
		{name: "a field that goes", a: map[string]any{"x": "v"}, b: map[string]any{}, want: "[{x v <nil>}]"},
		{name: "nested fields as a.b, sorted", a: map[string]any{"z": 1.0, "h": map[string]any{"w": "a", "e": "b"}},
			b: map[string]any{"z": 2.0, "h": map[string]any{"w": "c", "e": "b"}}, want: "[{h.w a c} {z 1 2}]"},
		{name: "a map against a value", a: map[string]any{"x": map[string]any{"y": 1.0}}, b: map[string]any{"x": 3.0}, want: "[{x map[y:1] 3}]"},
		{name: "lists compare whole", a: map[string]any{"l": []any{1.0, 2.0}}, b: map[string]any{"l": []any{1.0}}, want: "[{l [1 2] [1]}]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out []Change
			diffValues("", tc.a, tc.b, &out)
			if got := fmt.Sprint(out); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// TestDiffStatesFoldError: a fold that fails fails the diff with its error.
func TestDiffStatesFoldError(t *testing.T) {
	boom := errors.New("boom")
	_, err := diffStates(func(at uint64) (any, error) {
		if at == 2 {
			return nil, boom
		}
		return map[string]any{}, nil
	}, 1, 2)
	if !errors.Is(err, boom) {
		t.Fatalf("err %v, want the fold's", err)
	}
}
