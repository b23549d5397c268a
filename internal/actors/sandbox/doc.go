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
package sandbox
