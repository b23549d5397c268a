// Package actors wires stockade's actor system: the runtime supervisor that
// parents every sandbox actor, what the actors share (their dependencies,
// the journaling step of the write-ahead rule, a clock), and the surfacing of
// supervisor and dead-letter events through the caller's logger.
//
// The sandbox actor lives in actors/sandbox and the process actor with its
// stream actors in actors/process. Only this package tree imports
// protoactor-go.
//
// Traps of protoactor-go this tree avoids, each guarded by a test
// (traps_test.go): no persistence.Mixin (its store cannot report a failed
// fsync; the journal is ours); no blocking Docker call in Receive (a goroutine
// posts the result back, tagged); no ReenterAfter; no SetReceiveTimeout (a
// time.AfterFunc posts a generation-tagged message instead); no PoisonFuture
// or StopFuture (hard-coded 10 s timeouts): actors are stopped with Stop and
// their end is awaited on a channel closed in their Stopped handler; no
// futures at all between the API and the actors (one waiter per future):
// requests carry a reply channel; no Bounded mailbox.
package actors
