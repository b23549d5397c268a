package journal

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stockade/stockade/spec"
)

// TestSubscribeFollowsWithoutGaps: a follower that subscribes, then reads
// the past, then takes the subscription (de-duplicating by key and seq)
// sees every event of every stream exactly once, in per-stream order, while
// appenders keep committing throughout.
func TestSubscribeFollowsWithoutGaps(t *testing.T) {
	j := open(t, tempPath(t), Options{})
	ctx := context.Background()
	const streams, perStream = 8, 50
	var wg sync.WaitGroup
	start := func(from, to int) {
		for s := range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := from; i < to; i++ {
					if _, err := j.Append(ctx, rec(sb(fmt.Sprintf("s%d", s)), "t", i)); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	start(0, perStream/2)
	sub, err := j.Subscribe(streams * perStream)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	start(perStream/2, perStream) // racing the read of the past below
	seen := map[Key]uint64{}
	take := func(e Event) {
		if e.Seq <= seen[e.Key] {
			return // read in the past and received live: once
		}
		if e.Seq != seen[e.Key]+1 {
			t.Fatalf("%s: seq %d after %d: a gap", e.Key, e.Seq, seen[e.Key])
		}
		seen[e.Key] = e.Seq
	}
	err = j.Streams(func(k Key) error {
		return j.Read(k, 0, 0, func(e Event) error { take(e); return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for total := func() (n uint64) {
		for _, s := range seen {
			n += s
		}
		return
	}; total() < streams*perStream; {
		e, ok := <-sub.C
		if !ok {
			t.Fatalf("subscription ended: %v", sub.Err())
		}
		take(e)
	}
	if sub.Err() != nil {
		t.Fatal(sub.Err())
	}
}

// TestSubscribeLaggingAndClose: a subscriber that does not keep up is
// dropped with ErrLagged (the committer never waits for it); Close and the
// journal's Close end a subscription; a read-only journal has nothing to
// subscribe to.
func TestSubscribeLaggingAndClose(t *testing.T) {
	path := tempPath(t)
	j := open(t, path, Options{})
	ctx := context.Background()
	slow, err := j.Subscribe(2)
	if err != nil {
		t.Fatal(err)
	}
	closed, _ := j.Subscribe(10)
	closed.Close()
	closed.Close()
	if _, ok := <-closed.C; ok || closed.Err() != nil {
		t.Fatalf("a closed subscription: %v", closed.Err())
	}
	for i := range 5 {
		mustAppend(t, j, rec(sb("a"), "t", i))
	}
	n := 0
	for range slow.C {
		n++
	}
	if n != 2 || !errors.Is(slow.Err(), ErrLagged) || !spec.IsCode(slow.Err(), spec.CodeJournal) {
		t.Fatalf("received %d, err %v: want 2 and ErrLagged", n, slow.Err())
	}
	live, _ := j.Subscribe(10)
	if _, err := j.Append(ctx, rec(sb("a"), "t", 9)); err != nil {
		t.Fatal(err)
	}
	if e := <-live.C; e.Seq != 6 {
		t.Fatalf("live event seq %d, want 6", e.Seq)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-live.C; ok || !errors.Is(live.Err(), ErrClosed) {
		t.Fatalf("after the journal closed: %v", live.Err())
	}
	ro := open(t, path, Options{ReadOnly: true})
	if _, err := ro.Subscribe(1); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("subscribe to a read-only journal: %v", err)
	}
}
