package journal

import (
	"context"
	"errors"
	"testing"

	"github.com/stockade/stockade/spec"
)

// TestSequencedAppend: a Sequenced record is stored once however often it is
// retried, and refused when its stream is elsewhere.
func TestSequencedAppend(t *testing.T) {
	ctx := context.Background()
	seq := func(r Record, after uint64) Record { r.Sequenced, r.After = true, after; return r }
	for _, tc := range []struct {
		name    string
		prior   []Record // appended unconditionally first
		rec     Record
		wantSeq uint64
		wantErr error // nil: success
		wantLen int   // events in the stream afterwards
	}{
		{"new stream", nil, seq(rec(sb("a"), "t", 1), 0), 1, nil, 1},
		{"next event", []Record{rec(sb("a"), "t", 1)}, seq(rec(sb("a"), "u", 2), 1), 2, nil, 2},
		{"retry of a landed append", []Record{rec(sb("a"), "t", 1), rec(sb("a"), "u", 2)}, seq(rec(sb("a"), "u", 2), 1), 2, nil, 2},
		{"retry of a landed terminal append", []Record{rec(sb("a"), "t", 1), {Key: sb("a"), Type: "end", Terminal: true}}, seq(Record{Key: sb("a"), Type: "end", Terminal: true}, 1), 2, nil, 2},
		{"other event at the next seq", []Record{rec(sb("a"), "t", 1), rec(sb("a"), "u", 2)}, seq(rec(sb("a"), "u", 3), 1), 0, ErrSequence, 2},
		{"stream moved further", []Record{rec(sb("a"), "t", 1), rec(sb("a"), "u", 2), rec(sb("a"), "v", 3)}, seq(rec(sb("a"), "u", 2), 1), 0, ErrSequence, 3},
		{"stream behind", []Record{rec(sb("a"), "t", 1)}, seq(rec(sb("a"), "u", 2), 2), 0, ErrSequence, 1},
		{"new stream expected, one exists", []Record{rec(sb("a"), "t", 1)}, seq(rec(sb("a"), "x", 1), 0), 0, ErrSequence, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := open(t, tempPath(t), Options{Now: newClock().Now})
			for _, r := range tc.prior {
				mustAppend(t, j, r)
			}
			evs, err := j.Append(ctx, tc.rec)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !spec.IsCode(err, spec.CodeConflict) {
					t.Fatalf("Append: %v, want %v (conflict)", err, tc.wantErr)
				}
			} else if err != nil || len(evs) != 1 || evs[0].Seq != tc.wantSeq || evs[0].Type != tc.rec.Type {
				t.Fatalf("Append: %+v %v, want seq %d", evs, err, tc.wantSeq)
			}
			n := 0
			if err := j.Read(tc.rec.Key, 0, 0, func(Event) error { n++; return nil }); err != nil {
				t.Fatal(err)
			}
			if n != tc.wantLen {
				t.Fatalf("stream has %d events, want %d", n, tc.wantLen)
			}
			if err := j.Verify(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSequencedRetryInOneBatch: two identical Sequenced appends racing into
// the committer store one event; both callers see it.
func TestSequencedRetryInOneBatch(t *testing.T) {
	j := open(t, tempPath(t), Options{})
	r := rec(sb("a"), "t", 1)
	r.Sequenced = true
	evs, err := j.Append(context.Background(), r, r)
	if err != nil || len(evs) != 2 || evs[0].Seq != 1 || evs[1].Seq != 1 {
		t.Fatalf("%+v %v", evs, err)
	}
	n := 0
	if err := j.Read(sb("a"), 0, 0, func(Event) error { n++; return nil }); err != nil || n != 1 {
		t.Fatalf("%d events, %v", n, err)
	}
}
