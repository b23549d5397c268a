package sandbox

import (
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/stockade/stockade/internal/actors/process"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// What a sandbox actor is spawned with, and the messages of its core (the
// parts' own are in their files: SetEgress in egress.go, Claim in pool.go,
// Put and Get in copies.go, Rollback in rollback.go, RecordCheckpoint in
// checkpoint.go, Recover in recover.go).

// Params is what a sandbox actor is spawned with.
type Params struct {
	ID       string
	Spec     spec.Sandbox
	Deadline time.Time
	// Created receives the outcome of the create, exactly once.
	Created chan<- error
	// Gone, if set, is called when the actor has stopped (removed, or given
	// up because the journal failed): requests to it are no longer answered.
	Gone func()
	// Recover, if set, makes this a recovering actor: it takes over a
	// sandbox an earlier runtime left live instead of creating one.
	Recover *Recover
	// Pool, if set, makes the sandbox for this warm pool: once started it
	// admits no process until a Claim hands it to a caller.
	Pool string
	// Unready, if set, is called once when a pooled sandbox (made for a
	// pool, or recovered as one) can no longer be claimed: it stops, its
	// workload died, or its warden is lost.
	Unready func()
	// Span, if set, is the create's trace span: the Docker calls of the
	// create and start run under it (their readbacks are its children).
	Span trace.Span
	// Unanswered, if set, is called when the actor stops after its
	// sandbox was removed with asks still open (asks.go): each was then
	// answered with an internal error.
	Unanswered func(asks []string)
}

// Launch asks for a new process.
type Launch struct {
	ID    string
	Spec  spec.Process
	Reply chan<- process.Launch
}

// Stop asks the sandbox to stop (exited, resources kept). Reply gets the
// outcome once the sandbox is exited.
type Stop struct{ Reply chan<- error }

// Remove asks for every resource to be deleted (stopping first if needed).
type Remove struct{ Reply chan<- error }

// Inspect asks for a snapshot of the sandbox's state.
type Inspect struct{ Reply chan<- Snapshot }

// ExecDied carries Docker's exec_die event of this sandbox's workload to
// its processes; the one whose exec it is confirms its end.
type ExecDied = process.ExecDied

// EventsResumed tells the sandbox that the runtime's Docker event stream
// broke and was subscribed again: events may have been missed, so every
// process whose end is awaited inspects its exec again.
type EventsResumed struct{}

// WorkloadDied tells the sandbox that Docker reported its workload
// container dead (a die event): the sandbox checks, and if so records its
// exit (with Docker's code and OOM flag) once its processes have ended.
type WorkloadDied struct{ ExitCode int }

// Snapshot is the sandbox's folded state and its live processes.
type Snapshot struct {
	State     lifecycle.Sandbox
	Processes []string
}
