package main

import (
	"sync"

	"github.com/stockade/stockade/egress"
)

// ring keeps the last len(buf) decisions, numbered from 1. Adding never
// blocks: a control client that reads slowly loses the oldest decisions,
// the connections being served never wait for it.
type ring struct {
	mu   sync.Mutex
	buf  []egress.Decision
	next uint64        // the seq the next decision gets
	wake chan struct{} // closed at the next add; made only when someone waits
}

func newRing(size int) *ring {
	return &ring{buf: make([]egress.Decision, size), next: 1}
}

// add numbers d, keeps it and wakes the waiting readers.
func (r *ring) add(d egress.Decision) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	d.Seq = r.next
	r.buf[(d.Seq-1)%uint64(len(r.buf))] = d
	r.next++
	if r.wake != nil {
		close(r.wake)
		r.wake = nil
	}
	return d.Seq
}

// bounds returns the oldest seq kept (next when none is) and the next seq.
func (r *ring) bounds() (oldest, next uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.oldest(), r.next
}

func (r *ring) oldest() uint64 {
	if n := uint64(len(r.buf)); r.next > n {
		return r.next - n
	}
	return 1
}

// after appends to dst up to limit decisions with a seq greater than seq,
// oldest first (from the oldest kept when seq is older). When there is
// none it returns a channel closed at the next add.
func (r *ring) after(seq uint64, dst []egress.Decision, limit int) ([]egress.Decision, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if seq >= r.next-1 {
		if r.wake == nil {
			r.wake = make(chan struct{})
		}
		return dst, r.wake
	}
	for s := max(seq+1, r.oldest()); s < r.next && len(dst) < limit; s++ {
		dst = append(dst, r.buf[(s-1)%uint64(len(r.buf))])
	}
	return dst, nil
}
