package sandbox

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade/stockade/lifecycle"
)

// The checkpoint part: a checkpoint the runtime's store took of the
// workspace (a consistent copy, copies.go) is journaled once the store
// holds it; a pooled sandbox has none. Restoring one is the rollback
// part's (rollback.go).
//
// What it adds to the core: its message, RecordCheckpoint. It owns no
// state: the journal's fold holds the sandbox's checkpoints.

// RecordCheckpoint journals a checkpoint the store holds.
type RecordCheckpoint struct {
	Event lifecycle.Checkpointed
	Reply chan<- error
}

// checkpointPart journals the sandbox's checkpoints.
type checkpointPart struct{ a *sandboxActor }

// handle takes the checkpoint part's message.
func (k *checkpointPart) handle(_ actor.Context, msg any) bool {
	m, ok := msg.(RecordCheckpoint)
	if ok {
		k.record(m)
	}
	return ok
}

// record journals a checkpoint taken by the runtime.
func (k *checkpointPart) record(m RecordCheckpoint) {
	a := k.a
	if err := a.pool.pooledErr(); err != nil {
		m.Reply <- err
		return
	}
	m.Reply <- a.record(m.Event)
}
