package sandbox

import "github.com/asynkron/protoactor-go/actor"

// part is one concern of a sandbox actor (doc.go lists them), in the
// shape of a hook of Nomad's allocation runner: it owns its state, takes
// its own messages (handle), and is called by the core at named points of
// the lifecycle (its hooks: each part's file says which, and what it adds
// to the core). The core offers a message to the parts in turn, in the
// order of sandboxActor.parts, once the lifecycle has not taken it; no two
// parts take the same message.
//
// Unlike Nomad's hooks, found by interface and run in a list's order, the
// hooks are called by name where they fall: the order of the journal's
// writes is the write-ahead rule's, and reads in one place.
//
// A part runs on the actor's mailbox, with the core's state: it reads the
// core's fields and calls its methods, as the process actor's transports
// do; what a part needs of another part it asks through a small method of
// the owner, never its fields. Its slow work runs in goroutines that post
// their results back to the actor.
type part interface {
	// handle takes msg if it is this part's, and reports whether it was.
	handle(ctx actor.Context, msg any) bool
}
