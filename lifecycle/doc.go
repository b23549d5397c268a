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
// a pause for a consistent copy and its unpause, recovered) are events that
// change a state's fields but not its phase. A recovery that decides what
// the last one decided, on the same sight, records nothing (Repeats).
//
// The folds stay strict; inspect's replay skips only an event
// that repeats the one before it exactly and that the fold refuses: a fact
// journaled twice by a retried append, which journals written before
// appends were sequenced can hold.
//
// This package imports neither the journal nor the actor system: Encode and
// Decode turn events into the (type, JSON payload) pairs the journal stores.
package lifecycle
