package journal

import (
	"errors"
	"sync"
)

// ErrLagged is the cause Subscription.Err reports when a subscriber fell
// more than its buffer behind the commits: its channel was closed rather
// than let it slow the committer (or grow without bound). Code journal.
var ErrLagged = errors.New("journal: subscriber fell behind")

// Subscription receives every event committed after Subscribe returned, in
// commit order. Together with a read of the past taken after Subscribe (and
// events de-duplicated by Key and Seq), a follower misses nothing: the
// events of a commit that lands between the subscription and the read show
// up on both sides.
type Subscription struct {
	// C carries the events; it is closed by Close, by the journal's Close,
	// or when the subscriber lags (Err says which). The events' Payload is
	// shared: do not modify it.
	C <-chan Event

	j    *Journal
	c    chan Event
	once sync.Once
	err  error // set before c is closed
}

// Subscribe returns a subscription whose channel holds up to buffer events
// (at least 1) not yet received.
func (j *Journal) Subscribe(buffer int) (*Subscription, error) {
	if err := j.usable("journal.subscribe", true); err != nil {
		return nil, err
	}
	c := make(chan Event, max(buffer, 1))
	s := &Subscription{C: c, j: j, c: c}
	j.subMu.Lock()
	defer j.subMu.Unlock()
	if j.closed.Load() {
		return nil, errJournal("journal.subscribe", ErrClosed, "%s", j.path)
	}
	j.subs = append(j.subs, s)
	return s, nil
}

// Err is nil while the subscription runs and after Close; ErrLagged (code
// journal) if it was closed because the subscriber fell behind, ErrClosed
// if the journal closed.
func (s *Subscription) Err() error {
	s.j.subMu.Lock()
	defer s.j.subMu.Unlock()
	return s.err
}

// Close ends the subscription and closes C. Safe to call more than once.
func (s *Subscription) Close() {
	s.j.subMu.Lock()
	defer s.j.subMu.Unlock()
	s.j.dropLocked(s, nil)
}

// dropLocked removes s and closes its channel with err. subMu is held.
func (j *Journal) dropLocked(s *Subscription, err error) {
	s.once.Do(func() {
		s.err = err
		close(s.c)
		for i, x := range j.subs {
			if x == s {
				j.subs = append(j.subs[:i], j.subs[i+1:]...)
				break
			}
		}
	})
}

// publish hands a commit's events to every subscriber, never blocking: a
// subscriber without room is dropped (ErrLagged).
func (j *Journal) publish(batch []*request) {
	j.subMu.Lock()
	defer j.subMu.Unlock()
	if len(j.subs) == 0 {
		return
	}
	for _, r := range batch {
		if r.err != nil {
			continue
		}
		for i, ev := range r.events {
			if r.stored[i] { // published when it was first stored
				continue
			}
			for _, s := range append([]*Subscription(nil), j.subs...) {
				select {
				case s.c <- ev:
				default:
					j.dropLocked(s, errJournal("journal.subscribe", ErrLagged, "a subscriber of %s fell more than %d events behind", j.path, cap(s.c)))
				}
			}
		}
	}
}

// closeSubs ends every subscription when the journal closes.
func (j *Journal) closeSubs() {
	j.subMu.Lock()
	defer j.subMu.Unlock()
	for len(j.subs) > 0 {
		j.dropLocked(j.subs[0], errJournal("journal.subscribe", ErrClosed, "%s", j.path))
	}
}
