// Package process holds the process actor and its stream actors.
//
// A process actor runs one command in a sandbox and follows the write-ahead
// rule: process reserved is journaled before the process is started, started
// {group} and exited {code, reason, byte counts} right after they are
// observed, before anyone is told. Slow calls run in goroutines that post
// their result back; the mailbox never blocks.
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
// The output stream actor owns the read loop: it pulls the next frame from
// the Docker attachment only once the previous one has been taken by the
// consumer's pipe, whose capacity is the high-water mark. A consumer that
// stops reading stops the socket reads, the kernel buffer fills, Docker
// stops reading the process's pipe and the process blocks. Every piped
// stream must be read: stdout and stderr share one connection.
//
// The read loop also records each chunk it takes (recorder/), before the
// consumer's pipe and without buffering, and closes (syncs) the recording
// before it reports the output's end: the exit is journaled after that, so
// an exit in the journal implies its output on disk. A recorder failure is
// logged, never the process's.
//
// Exit reasons: exited (ran to completion), signaled, output_limit (frame
// limit or quota: the group is killed at once), timeout and cancelled (TERM,
// then KILL after the grace), sandbox_stopped, lost (the daemon forgot the
// exec), failed (with the error's code). A stream_failure also tells the
// parent sandbox, which fails closed.
package process
