// Package sandbox holds the sandbox actor: one per sandbox, named
// sandbox-<id> under the runtime supervisor, parent of its process actors.
//
// It follows the write-ahead rule (reserved before any create, stopping
// before the stop, removing before the removal; created, started, exited and
// removed right after they are observed) and never blocks its mailbox: each
// Docker call runs in a goroutine that posts its result back, so the actor
// answers Inspect and Stop while a create is in flight.
//
// Admission closes at the stopping intent; the sandbox is exited only when
// its workload is stopped and every process is terminal: a sandbox never
// reports exited while one of its processes could still be running. Before
// each launch it asserts the sandbox is still active (the workload running,
// same identity and revision), so no process starts in a container that
// was replaced or stopped behind the runtime's back. A process
// whose stream cannot be trusted fails the whole sandbox closed.
//
// The actor is a small core and its parts, in the shape of Nomad's
// allocation runner and its hooks (parts.go). The core keeps the lifecycle:
//   - sandbox.go: the actor, its Receive (the lifecycle's messages in one
//     switch, then every other message offered to the parts), the journal
//     record, create and start, launch and its admission, stop, exited,
//     removal, the workload's death, the TTL;
//   - processes.go: its process actors (spawned, tracked, told of Docker's
//     events, their end awaited before the sandbox's);
//   - asks.go: the ledger of the asks it holds, each answered;
//   - messages.go: Params and the core's messages; decide.go: the recovery
//     table (pure).
//
// Each part owns one concern's state, handles that concern's messages, and
// is called by the core at named points; its file's opening comment says
// what it adds to the core:
//   - wardenPart (warden.go, warden_reattach.go): the warden's link, started
//     with the create, held for by launches, probed, lost, given up, and
//     reattached after a restart;
//   - egressPart (egress.go): an allowlist sandbox's proxy link, its rules
//     (SetEgress) and its decision log;
//   - copyPart (copies.go): Put and Get, and the freeze a consistent Get
//     holds (launches wait for the thaw);
//   - poolPart (pool.go): a pooled sandbox refuses work until a Claim hands
//     it out;
//   - rollbackPart (rollback.go): a rollback to a checkpoint, and one an
//     earlier runtime left unsettled;
//   - checkpointPart (checkpoint.go): a checkpoint journaled
//     (RecordCheckpoint);
//   - recoveryPart (recover.go): a recovering actor's decision, journaled
//     and carried out through the core's paths, and its settling.
package sandbox
