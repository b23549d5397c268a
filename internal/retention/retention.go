// Package retention deletes what a journal no longer needs: its terminal
// entities past an age, then the recordings and egress decisions beside it
// whose process or sandbox the journal no longer holds.
package retention

import (
	"context"
	"time"

	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/recorder"
)

// Apply deletes the terminal entities of the journal whose end is older
// than olderThan (journal.Journal.Retain), then every recording whose
// process no longer has a stream in the journal: a removed sandbox's
// recordings go with its events. The recordings are listed before the
// journal's streams, so a process started meanwhile (its stream is
// journaled before its recording is made) is never taken for a removed
// one. A removed sandbox's egress decisions go too. It returns how many
// entities were deleted.
func Apply(ctx context.Context, j *journal.Journal, rec *recorder.Store, olderThan time.Duration) (int, error) {
	n, err := j.Retain(ctx, olderThan)
	if err != nil {
		return n, err
	}
	ids, err := rec.IDs()
	if err != nil {
		return n, err
	}
	sandboxes, err := recorder.DecisionSandboxes(rec.Path())
	if err != nil {
		return n, err
	}
	live, liveSandbox := map[string]bool{}, map[string]bool{}
	err = j.Streams(func(k journal.Key) error {
		switch k.Kind {
		case journal.KindProcess:
			live[k.ID] = true
		case journal.KindSandbox:
			liveSandbox[k.ID] = true
		case journal.KindRuntime:
			// Runtime-wide facts: no recording or decisions are theirs.
		}
		return nil
	})
	if err != nil {
		return n, err
	}
	for _, id := range ids {
		if !live[id] {
			if err := rec.Remove(id); err != nil {
				return n, err
			}
		}
	}
	for _, id := range sandboxes {
		if !liveSandbox[id] {
			if err := recorder.RemoveDecisions(rec.Path(), id); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}
