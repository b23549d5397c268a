package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stockade/stockade/spec"
)

// model is the in-memory journal the random operations are checked against.
type model struct {
	streams map[Key]*modelStream
}

type modelStream struct {
	parent string
	events []Event
}

func (m *model) terminal(k Key) bool {
	s := m.streams[k]
	return s != nil && s.events[len(s.events)-1].Terminal
}

// append applies recs as one call, or returns the code and cause the journal
// must report, changing nothing.
func (m *model) append(recs []Record, now time.Time) ([]Event, spec.Code, error) {
	type st struct {
		exists, terminal bool
		parent           string
		n                uint64
	}
	local := map[Key]*st{}
	var evs []Event
	for _, r := range recs {
		s := local[r.Key]
		if s == nil {
			s = &st{}
			if ms := m.streams[r.Key]; ms != nil {
				*s = st{exists: true, terminal: m.terminal(r.Key), parent: ms.parent, n: uint64(len(ms.events))}
			}
			local[r.Key] = s
		}
		switch {
		case s.terminal:
			return nil, spec.CodeInvalidArgument, ErrTerminal
		case !s.exists && r.Key.Kind == KindProcess && r.Parent == "":
			return nil, spec.CodeInvalidArgument, nil
		case s.exists && r.Parent != "" && r.Parent != s.parent:
			return nil, spec.CodeInvalidArgument, nil
		}
		if !s.exists {
			s.exists, s.parent = true, r.Parent
		}
		s.n++
		s.terminal = r.Terminal
		evs = append(evs, Event{Key: r.Key, Seq: s.n, Type: r.Type, Version: EnvelopeVersion, Time: now, Payload: r.Payload, Terminal: r.Terminal})
	}
	for _, e := range evs {
		ms := m.streams[e.Key]
		if ms == nil {
			ms = &modelStream{parent: local[e.Key].parent}
			m.streams[e.Key] = ms
		}
		ms.events = append(ms.events, e)
	}
	return evs, "", nil
}

func (m *model) live() []LiveEntity {
	var out []LiveEntity
	for k, s := range m.streams {
		last := s.events[len(s.events)-1]
		if !last.Terminal {
			out = append(out, LiveEntity{Key: k, Parent: s.parent, LastSeq: last.Seq, Type: last.Type, Updated: last.Time})
		}
	}
	slices.SortFunc(out, func(a, b LiveEntity) int { return cmpKey(a.Key, b.Key) })
	return out
}

func (m *model) retain(cutoff time.Time) int {
	n := 0
	for k, s := range m.streams {
		if last := s.events[len(s.events)-1]; last.Terminal && !last.Time.After(cutoff) {
			delete(m.streams, k)
			n++
		}
	}
	return n
}

func cmpKey(a, b Key) int {
	if a.Kind != b.Kind {
		if a.Kind < b.Kind {
			return -1
		}
		return 1
	}
	if a.ID < b.ID {
		return -1
	}
	if a.ID > b.ID {
		return 1
	}
	return 0
}

func eventsEqual(a, b []Event) error {
	if len(a) != len(b) {
		return fmt.Errorf("%d events, model has %d", len(a), len(b))
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Key != y.Key || x.Seq != y.Seq || x.Type != y.Type || x.Version != y.Version || !x.Time.Equal(y.Time) ||
			x.Terminal != y.Terminal || string(x.Payload) != string(y.Payload) {
			return fmt.Errorf("event %d: got %+v, model %+v", i, x, y)
		}
	}
	return nil
}

// TestModel runs random operations (appends good and bad, reads, live and
// stream listings, retention, clock steps, close and reopen) against a journal
// and the model, and compares every result.
func TestModel(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	c := newClock()
	now := c.t
	clk := func() time.Time { return now }
	path := tempPath(t)
	j, err := Open(path, Options{Now: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := j.Close(); err != nil {
			t.Error(err)
		}
	}()
	m := &model{streams: map[Key]*modelStream{}}
	ctx := context.Background()
	randKey := func() Key {
		k := []Kind{KindSandbox, KindProcess, KindRuntime}[rng.IntN(3)]
		return Key{Kind: k, ID: fmt.Sprint("e", rng.IntN(8))}
	}
	ops := 400
	if testing.Short() {
		ops = 100
	}
	counts := map[string]int{}
	for op := 0; op < ops; op++ {
		switch x := rng.IntN(100); {
		case x < 55: // append
			n := 1 + rng.IntN(3)
			var recs []Record
			for range n {
				k := randKey()
				r := Record{Key: k, Type: fmt.Sprint("t", rng.IntN(4)), Terminal: rng.IntN(6) == 0}
				if rng.IntN(3) > 0 {
					r.Payload = json.RawMessage(fmt.Sprintf(`{"op":%d}`, op))
				}
				if k.Kind == KindProcess {
					switch y := rng.IntN(10); {
					case y < 6:
						r.Parent = "sb" + k.ID // the right parent
					case y < 9:
						if m.streams[k] == nil {
							r.Parent = "sb" + k.ID
						}
					default:
						r.Parent = "wrong"
					}
				}
				recs = append(recs, r)
			}
			want, code, cause := m.append(recs, now)
			got, err := j.Append(ctx, recs...)
			if code != "" {
				counts["append refused"]++
				if spec.CodeOf(err) != code || cause != nil && !errors.Is(err, cause) {
					t.Fatalf("op %d: Append(%+v) = %v, model says %s %v", op, recs, err, code, cause)
				}
				continue
			}
			counts["append"]++
			if err != nil {
				t.Fatalf("op %d: Append: %v", op, err)
			}
			if err := eventsEqual(got, want); err != nil {
				t.Fatalf("op %d: Append: %v", op, err)
			}
		case x < 70: // read a range
			counts["read"]++
			k := randKey()
			from, to := uint64(rng.IntN(5)), uint64(rng.IntN(8))
			var got []Event
			err := j.Read(k, from, to, func(e Event) error { got = append(got, e); return nil })
			ms := m.streams[k]
			switch {
			case to != 0 && from > to:
				if spec.CodeOf(err) != spec.CodeInvalidArgument {
					t.Fatalf("op %d: Read(%s,%d,%d): %v", op, k, from, to, err)
				}
			case ms == nil:
				if spec.CodeOf(err) != spec.CodeNotFound {
					t.Fatalf("op %d: Read(%s) of a missing stream: %v", op, k, err)
				}
			default:
				if err != nil {
					t.Fatalf("op %d: Read: %v", op, err)
				}
				var want []Event
				for _, e := range ms.events {
					if e.Seq >= max(from, 1) && (to == 0 || e.Seq <= to) {
						want = append(want, e)
					}
				}
				if err := eventsEqual(got, want); err != nil {
					t.Fatalf("op %d: Read(%s,%d,%d): %v", op, k, from, to, err)
				}
			}
		case x < 78: // live and streams
			counts["live"]++
			var got []LiveEntity
			if err := j.Live(func(e LiveEntity) error { got = append(got, e); return nil }); err != nil {
				t.Fatal(err)
			}
			want := m.live()
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("op %d: Live\n got %v\nwant %v", op, got, want)
			}
			var keys []Key
			if err := j.Streams(func(k Key) error { keys = append(keys, k); return nil }); err != nil {
				t.Error(err)
			}
			var wantKeys []Key
			for k := range m.streams {
				wantKeys = append(wantKeys, k)
			}
			slices.SortFunc(wantKeys, cmpKey)
			if fmt.Sprint(keys) != fmt.Sprint(wantKeys) {
				t.Fatalf("op %d: Streams %v, model %v", op, keys, wantKeys)
			}
		case x < 88: // the clock moves
			now = now.Add(time.Duration(rng.IntN(60)) * time.Minute)
		case x < 93: // retention
			counts["retain"]++
			age := time.Duration(rng.IntN(120)) * time.Minute
			want := m.retain(now.Add(-age))
			got, err := j.Retain(ctx, age)
			if err != nil || got != want {
				t.Fatalf("op %d: Retain(%s) = %d %v, model %d", op, age, got, err, want)
			}
		default: // crash-free restart
			counts["reopen"]++
			owner := j.Owner()
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			if j, err = Open(path, Options{Now: clk, Owner: owner}); err != nil {
				t.Fatal(err)
			}
		}
		if op%50 == 0 {
			if err := j.Verify(); err != nil {
				t.Fatalf("op %d: %v", op, err)
			}
		}
	}
	if err := j.Verify(); err != nil {
		t.Fatal(err)
	}
	t.Logf("operations: %v; %d streams at the end", counts, len(m.streams))
}
