// Package lifecycle holds stockade's pure state machines: the sandbox and
// process lifecycles as folds over their journaled events.
//
// Each entity's state is fold(events): ApplySandbox and ApplyProcess take a
// state and one event and return the next state, with no I/O and no clock.
// The live actors and every replay or debugging tool use the same folds, so a
// replayed journal gives exactly the state the runtime had. An illegal
// transition is an error (code journal when replaying; the actors never
// journal one), never a silent skip.
//
// Sandbox edges:
//
//	reserved → started | exited
//	started  → stopping | exited
//	stopping → exited
//	exited   → removing → removed        (removed is terminal)
//
// Process edges:
//
//	reserved → started | exited
//	started  → stopping | exited
//	stopping → exited                    (exited is terminal)
//
// Facts in between (resources created, exec created, stdin closed, quota hit,
// recovered) are events that change a state's fields but not its phase.
//
// This package imports neither the journal nor the actor system: Encode and
// Decode turn events into the (type, JSON payload) pairs the journal stores.
package lifecycle
