// Package process holds the process actor and its stream actors.
//
// A process actor runs one command in a sandbox and follows the write-ahead
// rule: process reserved is journaled before the process is asked of the
// sandbox's warden (or, without a warden, before the Docker exec is
// created, and exec created {exec id} before the attach that starts it);
// started {pid, group} and exited {code, reason, byte counts} right after
// they are observed, before anyone is told. Slow calls run in goroutines
// that post their result back; the mailbox never blocks.
//
// The actor (process.go) owns the lifecycle: reserved → started → stopping →
// exited (or lost), stop, kill, deadline, freeze (freeze.go) and the
// recording's settling. How the process runs is its transport's
// (transport.go):
//   - exec (exec.go, doubts.go): a Docker exec through dockerio. Exec created
//     {exec id} is journaled before the attach that starts it; the end is
//     learned from the exec_die event and an inspect; a broken stream fails
//     the sandbox closed.
//   - warden (warden.go, warden_adopt.go): the sandbox's warden spawns the
//     process over its link (package warden); the end is the warden's reap
//     report; a lost link kills the group through Docker and the process
//     ends lost; the warden forgets a process once its exit is journaled.
//
// Two transports carry a process. The warden transport (every sandbox with
// a warden): the process is a child of the sandbox's warden, its stdout and
// stderr one channel of the warden link, its signals sent to its group by
// the warden; after a runtime restart it is re-adopted with its streams,
// resumed from the offset its recording holds. The exec transport (a
// sandbox without a warden: an Adapter given none, or the Fake with
// NoWarden): one Docker exec per
// process, its output decoded from the attach (framing/), its group signalled
// from a second exec, its end learned from exec_die events confirmed by
// inspect; it cannot be re-attached after a restart.
//
// The output stream actor owns the read loop: it takes the next chunk only
// once the previous one has been taken by the consumer's pipe, whose
// capacity is the high-water mark, and acknowledges output to the warden
// only once it is recorded and handed on. A consumer that stops reading
// stops that process (the warden's window fills and it stops reading the
// child's pipes; or, for an exec, the socket reads stop and Docker stops
// reading the pipe) and never another one. Every piped stream must be
// read: stdout and stderr share one channel.
//
// The read loop also records each chunk it takes (recorder/), before the
// consumer's pipe and without buffering, and syncs the recording before it
// reports the output's end: the exit is journaled after that, so an exit in
// the journal implies its output on disk; the recording's end record is
// written only after the exit is journaled. A process let go of without a
// journaled exit is suspended, for the next runtime to resume. A recorder
// failure is logged, never the process's.
//
// Exit reasons: exited (ran to completion), signaled, oom, output_limit
// (frame limit or quota: the group is killed at once), timeout and
// cancelled (TERM, then KILL after the grace), sandbox_stopped, lost (the
// warden or the daemon no longer knows the process; no code is invented),
// failed (with the error's code). A stream_failure of Docker's framing also
// tells the parent sandbox, which fails closed; a warden's violation ends
// only that warden.
package process
