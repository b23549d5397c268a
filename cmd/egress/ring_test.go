package main

import (
	"math"
	"testing"

	"github.com/stockade/stockade/egress"
)

func TestRing(t *testing.T) {
	r := newRing(4)
	if o, n := r.bounds(); o != 1 || n != 1 {
		t.Fatalf("empty ring bounds %d, %d", o, n)
	}
	_, wake := r.after(0, nil, 10)
	if wake == nil {
		t.Fatal("no wake channel on an empty ring")
	}
	for range 6 {
		r.add(egress.Decision{Verdict: "deny"})
	}
	select {
	case <-wake:
	default:
		t.Fatal("add did not wake the waiter")
	}
	if o, n := r.bounds(); o != 3 || n != 7 {
		t.Fatalf("bounds %d, %d; want 3, 7", o, n)
	}
	cases := []struct {
		after uint64
		limit int
		want  []uint64 // nil: wait
	}{
		{0, 10, []uint64{3, 4, 5, 6}}, // from the oldest kept
		{2, 10, []uint64{3, 4, 5, 6}},
		{4, 10, []uint64{5, 6}},
		{3, 2, []uint64{4, 5}},
		{6, 10, nil},
		{100, 10, nil},            // beyond next: wait for seqs past it
		{math.MaxUint64, 10, nil}, // no overflow to "everything"
	}
	for _, tc := range cases {
		got, wake := r.after(tc.after, nil, tc.limit)
		var seqs []uint64
		for _, d := range got {
			seqs = append(seqs, d.Seq)
		}
		if len(seqs) != len(tc.want) || (tc.want == nil) != (wake != nil) {
			t.Errorf("after(%d) = %v (wait %v); want %v", tc.after, seqs, wake != nil, tc.want)
			continue
		}
		for i := range seqs {
			if seqs[i] != tc.want[i] {
				t.Errorf("after(%d) = %v; want %v", tc.after, seqs, tc.want)
				break
			}
		}
	}
}
