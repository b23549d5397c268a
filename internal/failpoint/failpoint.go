// Package failpoint holds stockade's crash-drill failpoints: named points at
// durability edges (after an intent is journaled, between a Docker call and
// its fact, mid-stream, during teardown and recovery) where an armed process
// kills itself with SIGKILL, as a power cut or an OOM kill would.
//
// They are compiled in and inert unless the environment variable
// STOCKADE_FAILPOINT names one when the process starts. An inert Hit costs a
// comparison of two strings.
package failpoint

import (
	"os"
	"syscall"
)

// Env is the variable that arms a failpoint.
const Env = "STOCKADE_FAILPOINT"

// The failpoints, in the order a sandbox's life reaches them.
const (
	SandboxReserved      = "sandbox.reserved"       // reserved journaled, nothing created
	SandboxCreateCall    = "sandbox.create-call"    // resources made, created not journaled
	SandboxCreated       = "sandbox.created"        // created journaled, started not (the workload may be starting)
	SandboxStartCall     = "sandbox.start-call"     // workload started, started not journaled
	WardenStarted        = "sandbox.warden-up"      // the warden's link up, its start not journaled
	ProcessReserved      = "process.reserved"       // process reserved journaled, no spawn request
	ProcessSpawnSent     = "process.spawn-sent"     // the spawn request sent to the warden, no answer
	ProcessExecCreated   = "process.exec-created"   // exec created journaled, not attached (a sandbox without a warden)
	ProcessAttached      = "process.attached"       // running (a warden's Started arrived: "spawn acked", or attached), started not journaled
	ProcessMidStream     = "process.mid-stream"     // output flowing: the first stdout chunk recorded, not acknowledged
	RecorderChunkWritten = "recorder.chunk-written" // a later chunk (not a process's first) recorded, not acknowledged
	ProcessStopping      = "process.stopping"       // process stopping journaled, group not signalled
	ProcessReapReported  = "process.reap-reported"  // the warden's reap report arrived, the exit not journaled
	RecorderEndRecord    = "recorder.end-record"    // a recording's end record written and synced, the exit not journaled
	ProcessForgetSent    = "process.forget-sent"    // the exit journaled and the warden told to forget the process
	SandboxStopping      = "sandbox.stopping"       // stopping journaled, workload not stopped
	SandboxStopCall      = "sandbox.stop-call"      // workload stopped, exited not journaled
	SandboxExited        = "sandbox.exited"         // exited journaled, removing not journaled
	SandboxRemoving      = "sandbox.removing"       // removing journaled, resources not removed
	SandboxRemoveCall    = "sandbox.remove-call"    // resources removed, removed not journaled
	RecoveryDecided      = "recovery.decided"       // a recovery decision journaled, not carried out
	RecoveryOrphan       = "recovery.orphan"        // an orphan removed, its removal not journaled
	RecoveryReattached   = "recovery.reattached"    // the warden reattached and listed, its processes not settled
	PoolFilled           = "pool.filled"            // a pooled sandbox started, its warden's start journaled, the pool not told
	PoolClaimed          = "pool.claimed"           // a claim journaled (the warden's new secret in it), the warden not told, the caller not answered
	PoolRekeyed          = "pool.rekeyed"           // the claim's secret rotated in the warden, the caller not answered
	CheckpointStored     = "checkpoint.stored"      // a checkpoint's manifest is in the store, the checkpoint not journaled
	RollbackIntent       = "rollback.intent"        // a rollback's intent journaled, its processes not yet stopped
	RollbackStaged       = "rollback.staged"        // the checkpoint written beside the workspace, not exchanged
	RollbackExchanged    = "rollback.exchanged"     // the workspace exchanged for the checkpoint, the fact not journaled
)

// All lists every failpoint, for drills.
var All = []string{
	SandboxReserved, SandboxCreateCall, SandboxCreated, SandboxStartCall, WardenStarted,
	ProcessReserved, ProcessSpawnSent, ProcessExecCreated, ProcessAttached, ProcessMidStream,
	RecorderChunkWritten, ProcessStopping, ProcessReapReported, RecorderEndRecord, ProcessForgetSent,
	SandboxStopping, SandboxStopCall, SandboxExited, SandboxRemoving, SandboxRemoveCall,
	RecoveryDecided, RecoveryOrphan, RecoveryReattached,
	PoolFilled, PoolClaimed, PoolRekeyed,
	CheckpointStored, RollbackIntent, RollbackStaged, RollbackExchanged,
}

var armed = os.Getenv(Env)

// Hit kills the process with SIGKILL if name is the armed failpoint.
func Hit(name string) {
	if armed == "" || armed != name {
		return
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGKILL); err != nil {
		// Never for a process signalling itself; without this it would
		// hang below instead of crashing.
		panic("failpoint " + name + ": SIGKILL: " + err.Error())
	}
	select {} // SIGKILL is not deliverable late, but never run on past it
}
