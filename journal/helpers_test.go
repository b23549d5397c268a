package journal

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stockade/stockade/spec"
)

// clock is a settable Options.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Microsecond) // strictly increasing
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func tempPath(t testing.TB) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "state", "journal.db")
}

// open opens a journal at path and closes it at cleanup.
func open(t testing.TB, path string, opts Options) *Journal {
	t.Helper()
	j, err := Open(path, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { _ = j.Close() })
	return j
}

func sb(id string) Key { return Key{Kind: KindSandbox, ID: id} }
func pr(id string) Key { return Key{Kind: KindProcess, ID: id} }

func rec(k Key, typ string, payload any) Record {
	b, err := json.Marshal(payload)
	if err != nil {
		panic(err)
	}
	r := Record{Key: k, Type: typ, Payload: b}
	if k.Kind == KindProcess {
		r.Parent = "sb1"
	}
	return r
}

func mustAppend(t testing.TB, j *Journal, recs ...Record) []Event {
	t.Helper()
	evs, err := j.Append(context.Background(), recs...)
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	return evs
}

func readAll(t testing.TB, j *Journal, k Key) []Event {
	t.Helper()
	var out []Event
	if err := j.Read(k, 0, 0, func(e Event) error { out = append(out, e); return nil }); err != nil {
		t.Fatalf("Read(%s): %v", k, err)
	}
	return out
}

func liveAll(t testing.TB, j *Journal) []LiveEntity {
	t.Helper()
	var out []LiveEntity
	if err := j.Live(func(e LiveEntity) error { out = append(out, e); return nil }); err != nil {
		t.Fatalf("Live: %v", err)
	}
	return out
}

// wantCode fails unless err has code c and, if cause is non-nil, wraps it.
func wantCode(t testing.TB, err error, c spec.Code, cause error) {
	t.Helper()
	if err == nil {
		t.Fatalf("got nil error, want code %s", c)
	}
	if got := spec.CodeOf(err); got != c {
		t.Fatalf("got code %q (%v), want %q", got, err, c)
	}
	if cause != nil && !errors.Is(err, cause) {
		t.Fatalf("error %v does not wrap %v", err, cause)
	}
}
