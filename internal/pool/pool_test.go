package pool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/spec"
)

// fakeMaker makes numbered members; claimErr, when set, is every claim's
// answer.
type fakeMaker struct {
	mu       sync.Mutex
	made     int
	removed  map[int]bool
	pooled   map[int]string
	claimErr error
	makeErr  error
}

func (m *fakeMaker) Make(ctx context.Context, name string, s spec.Sandbox) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.makeErr != nil {
		return 0, m.makeErr
	}
	m.made++
	return m.made, nil
}

func (m *fakeMaker) Claim(ctx context.Context, n int, c Claim) (error, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.claimErr, nil
}

func (m *fakeMaker) Remove(ctx context.Context, n int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.removed[n] = true
	return nil
}

func (m *fakeMaker) Pooled(n int, name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pooled[n] = name
}

func (m *fakeMaker) ID(n int) string { return fmt.Sprint(n) }

func (m *fakeMaker) removedCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.removed)
}

func newTestPools(t *testing.T, m *fakeMaker, size int) (*Pools[int], spec.Sandbox) {
	t.Helper()
	full := Sandbox(spec.Sandbox{Image: "sha256:" + fmt.Sprintf("%064d", 1)})
	ps := New[int](m, slog.New(slog.NewTextHandler(io.Discard, nil)), 1, false)
	ps.Add("p", full.Image, size, full)
	ps.Open(nil)
	t.Cleanup(func() { ps.Close(true) })
	return ps, full
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestPoolsFillClaimAndRefill: the pools fill to their size, a claim by the
// pool's key takes the oldest ready member and counts warm, the pool
// refills, a claim by another key finds none (a cold create follows).
func TestPoolsFillClaimAndRefill(t *testing.T) {
	m := &fakeMaker{removed: map[int]bool{}, pooled: map[int]string{}}
	ps, full := newTestPools(t, m, 2)
	eventually(t, "the pool to fill", func() bool { return ps.Info()[0].Ready == 2 })
	got, from, err := ps.Claim(context.Background(), full, true)
	if err != nil || got != 1 || from != "p" {
		t.Fatalf("claim: %d %q %v, want member 1 of p", got, from, err)
	}
	ps.Counted(from)
	eventually(t, "the refill", func() bool { return ps.Info()[0].Ready == 2 })
	other := full
	other.Policy.MemoryBytes *= 2
	if got, _, err := ps.Claim(context.Background(), other, true); err != nil || got != 0 {
		t.Fatalf("claim by another key: %d %v, want none", got, err)
	}
	if info := ps.Info()[0]; info.Warm != 1 || info.Cold != 0 {
		t.Fatalf("counts %+v: want 1 warm, and no cold (the other key matches no pool)", info)
	}
}

// TestPoolsUnclaimableIsRemoved: a member whose claim fails is removed and
// the next is tried; a journal that refuses the claim fails it at once.
func TestPoolsUnclaimableIsRemoved(t *testing.T) {
	m := &fakeMaker{removed: map[int]bool{}, pooled: map[int]string{}, claimErr: spec.Errorf(spec.CodeConflict, "test", "not ready")}
	ps, full := newTestPools(t, m, 2)
	eventually(t, "the pool to fill", func() bool { return ps.Info()[0].Ready == 2 })
	if got, _, err := ps.Claim(context.Background(), full, true); err != nil || got != 0 {
		t.Fatalf("claim of unclaimable members: %d %v, want none (a cold create)", got, err)
	}
	eventually(t, "the unclaimable members removed", func() bool { return m.removedCount() >= 2 })

	m.mu.Lock()
	m.claimErr = spec.Errorf(spec.CodeJournal, "test", "journal refuses")
	m.mu.Unlock()
	eventually(t, "the pool to refill", func() bool { return ps.Info()[0].Ready >= 1 })
	if _, _, err := ps.Claim(context.Background(), full, true); !spec.IsCode(err, spec.CodeJournal) {
		t.Fatalf("claim refused by the journal: %v, want journal", err)
	}
}

// TestPoolsRefillBacksOff: a failed make is counted, its error kept, and
// the pool retries later.
func TestPoolsRefillBacksOff(t *testing.T) {
	m := &fakeMaker{removed: map[int]bool{}, pooled: map[int]string{}, makeErr: errors.New("no daemon")}
	ps, _ := newTestPools(t, m, 1)
	eventually(t, "a failed refill", func() bool { return ps.Info()[0].Failures >= 1 })
	if info := ps.Info()[0]; info.LastError != "no daemon" || info.Ready != 0 {
		t.Fatalf("info %+v", info)
	}
	m.mu.Lock()
	m.makeErr = nil
	m.mu.Unlock()
	eventually(t, "the retry after the back-off", func() bool { return ps.Info()[0].Ready == 1 })
}

// TestCheck: the pools' shape is judged before anything is touched.
func TestCheck(t *testing.T) {
	img := "sha256:" + fmt.Sprintf("%064d", 1)
	ok := host.PoolSpec{Name: "p", Size: 1, Sandbox: spec.Sandbox{Image: img}}
	for _, tc := range []struct {
		name    string
		ps      []host.PoolSpec
		refills int
		bad     bool
	}{
		{"ok", []host.PoolSpec{ok}, 0, false},
		{"negative refills", []host.PoolSpec{ok}, -1, true},
		{"bad name", []host.PoolSpec{{Name: "-x", Size: 1, Sandbox: ok.Sandbox}}, 0, true},
		{"twice", []host.PoolSpec{ok, ok}, 0, true},
		{"too big", []host.PoolSpec{{Name: "p", Size: MaxSize + 1, Sandbox: ok.Sandbox}}, 0, true},
		{"claimant's ttl", []host.PoolSpec{{Name: "p", Size: 1, Sandbox: spec.Sandbox{Image: img, TTL: time.Hour}}}, 0, true},
	} {
		if err := Check(tc.ps, tc.refills); (err != nil) != tc.bad || (err != nil && !spec.IsCode(err, spec.CodeInvalidArgument)) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}
