package inspect

import (
	"context"
	"encoding/json"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// followBuffer is how many committed events a follower may lag behind
// before it is dropped (ErrLagged) rather than hold up the journal.
const followBuffer = 4096

// Follow calls fn with a sandbox's history (its events and its processes',
// in time order), then with each of their events as it is committed, until
// ctx ends (nil) or fn or the journal fails. With sandboxID "" it follows
// every entity's new events (a tail) and gives no past. Nothing is missed
// between the past and the live events, and nothing is given twice: it
// subscribes first, reads the past, then takes the subscription,
// de-duplicating by stream and sequence. A follower that falls more than
// followBuffer events behind ends with a journal error (ErrLagged). Only
// the events appended through this process's handle of the journal are
// followed: a Reader opened on a file (Open) sees no new ones. A journal
// closed under it ends the follow with journal.ErrClosed.
func (r *Reader) Follow(ctx context.Context, sandboxID string, fn func(host.HistoryEvent) error) error {
	sub, err := r.j.Subscribe(followBuffer)
	if err != nil {
		return err
	}
	defer sub.Close()
	seen := map[journal.Key]uint64{}
	procs := map[string]bool{} // the followed sandbox's processes
	if sandboxID != "" {
		past, err := r.History(ctx, sandboxID)
		if err != nil {
			return err
		}
		for _, e := range past {
			k := journal.Key{Kind: journal.Kind(e.Kind), ID: e.ID}
			seen[k] = max(seen[k], e.Seq)
			if k.Kind == journal.KindProcess {
				procs[e.ID] = true
			}
			if err := fn(e); err != nil {
				return err
			}
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-sub.C:
			if !ok {
				if err := sub.Err(); err != nil {
					return err
				}
				return spec.Errorf(spec.CodeCancelled, "inspect", "the journal closed (its runtime closed)")
			}
			if e.Seq <= seen[e.Key] || !belongs(e, sandboxID, procs) {
				continue
			}
			seen[e.Key] = e.Seq
			if err := fn(HistoryEvent(e)); err != nil {
				return err
			}
		}
	}
}

// belongs: the event is of the followed sandbox or one of its processes (a
// process is known as its sandbox's from its reserved event on).
func belongs(e journal.Event, sandboxID string, procs map[string]bool) bool {
	switch {
	case sandboxID == "":
		return true
	case e.Key.Kind == journal.KindSandbox:
		return e.Key.ID == sandboxID
	case e.Key.Kind != journal.KindProcess:
		return false
	case procs[e.Key.ID]:
		return true
	case e.Type == (lifecycle.ProcessReserved{}).Type():
		var r lifecycle.ProcessReserved
		if json.Unmarshal(e.Payload, &r) == nil && r.Sandbox == sandboxID {
			procs[e.Key.ID] = true
			return true
		}
	}
	return false
}
