// Package journal is stockade's durable event store: one bbolt file that holds
// an append-only event stream per entity (sandbox, process, runtime), an index
// of the entities that are still live, and the file's identity (owner id,
// Docker daemon id).
//
// It knows nothing of Docker or the actor system. Event types and payloads
// belong to the caller (package lifecycle defines them); the journal stores a
// type string and an opaque JSON payload per event.
//
// # Use
//
//	j, err := journal.Open(path, journal.Options{})        // lock, check, create
//	defer j.Close()
//	evs, err := j.Append(ctx, journal.Record{               // durable on return
//		Key: journal.Key{Kind: journal.KindSandbox, ID: id},
//		Type: "sandbox.reserved", Payload: spec})
//	err = j.Live(func(e journal.LiveEntity) error { ... })  // start-up: only what is live
//	err = j.Read(key, 1, 0, func(ev journal.Event) error { ... }) // replay
//
// # Guarantees
//
//   - Append returns only once its events are committed and fsynced (a bbolt
//     commit fdatasyncs the data pages and then the meta page; NoSync is never
//     set). Concurrent Append calls are coalesced by one committer goroutine
//     into a shared bbolt transaction (group commit); each caller waits for the
//     outcome of the transaction that holds its records.
//   - One Append call is atomic: all its records are stored, or none. A call
//     whose records are malformed, or that appends to a terminal stream, fails
//     alone and never joins (or is skipped inside) the shared transaction; a
//     failed commit fails every call in that transaction.
//   - Sequences start at 1 and grow by one per event in each stream; cursor
//     order is event order (big-endian keys).
//   - Subscribe delivers every event committed afterwards, in commit order,
//     without ever holding up the committer (a subscriber that falls more
//     than its buffer behind is dropped, ErrLagged). A follower subscribes,
//     then reads the past, then takes the subscription, de-duplicating by
//     key and sequence: nothing is missed (the live tail of a server).
//   - A caller that stops waiting (its context ended) cannot tell whether its
//     append landed. A Sequenced record (Record.After: the stream's last
//     sequence the caller knows) makes the retry safe: it is checked inside
//     the committing transaction, so the retry either stores the record, or
//     finds it already stored at After+1 and returns that event, or fails
//     with conflict (ErrSequence). The actors append Sequenced, so no
//     transition is ever journaled twice.
//   - The live index and the terminal index are written in the same
//     transaction as the events, so they always agree with the streams
//     (Verify checks it).
//   - Nothing is rewritten or dropped on read: a record that does not decode is
//     an error (code journal, cause ErrCorrupt or ErrUnknownVersion) that names
//     the stream and the sequence. bbolt is transactional, so there is no torn
//     tail: every bad record is corruption.
//   - A file with an unknown schema version, or that is not a stockade journal,
//     is refused before anything is written.
//   - The journal's directory is the opener's own: Open (writable or
//     read-only) refuses one that another uid owns, that group or others may
//     write in, or that is itself a symbolic link (invalid_argument, cause
//     ErrDirOwner, ErrDirWritable or ErrDirLink, naming the directory, its
//     owner and what to do). Its owner could otherwise replace the file with
//     a history that never happened. The check is made on the opened
//     directory (OpenDir), and the file is opened through it, so a directory
//     swapped in at the path after the check is not the one used.
//
// # Locking and read-only opens
//
// A writable Open takes bbolt's exclusive flock, waiting at most
// Options.LockTimeout (1 s by default; bbolt's "wait forever" is never used).
// If the lock is not obtained the error has code journal_locked and names the
// file and the holder's pid: on Linux from /proc/locks (the kernel's own record
// of the flock holder, so it cannot go stale), elsewhere from the sidecar file
// "<path>.pid" that a writer writes after it opens and removes on Close; a pid
// from that file is named only if the process is alive. The pid file is
// advisory only: a stale one never blocks an open.
//
// A read-only Open (Options.ReadOnly) takes a shared flock: many readers may
// open the file together, but not while a writer holds it (journal_locked
// again), so a reader never sees a file mid-write. To inspect the journal of a
// running runtime, ask that runtime for a consistent copy (CopyTo, a bbolt read
// transaction written out) and open the copy read-only.
//
// # Copies are never a second runtime
//
// A copy holds the original's owner id, which labels every Docker resource
// the original's runtime makes. A runtime on a copy would take the sandboxes
// the original made after the copy for orphans and remove them. So CopyTo and
// CopyFile mark every copy (meta keys copy_of and copied_at, below), and a
// writable Open of a marked file fails with identity_mismatch, cause ErrCopy,
// touching nothing; read-only opens (Read, Live, Export, Verify, CopyTo) work
// as on any journal. The journal copied from is never marked. A copy of a
// copy, and Compact of a copy, keep the first marker. Restore (the CLI's
// "stockade journal restore COPY DEST") writes a copy to a new file without
// the marker, for an operator who means to resume from a backup once the
// original will never run again.
//
// # File format (schema version 1)
//
// The bucket tree:
//
//	meta/                          identity and format
//	    schema    -> "1"           schema version, ASCII decimal
//	    owner     -> owner id      NewID: ms time + 96 random bits, base32 lowercase (29 chars)
//	    daemon    -> daemon id     Docker /info ID; absent until BindDaemon
//	    created   -> RFC 3339      creation time (informational)
//	    copy_of   -> path          only in a copy: absolute path of the journal copied
//	    copied_at -> RFC 3339      only in a copy: when it was copied (informational)
//	streams/                       one bucket per kind, one sub-bucket per entity
//	    sandbox/<id>/<seq> -> envelope
//	    process/<id>/<seq> -> envelope
//	    runtime/<id>/<seq> -> envelope
//	live/                          index of non-terminal entities
//	    <kind> "/" <id> -> live entry
//	terminal/                      retention index of terminal entities
//	    <ended> <kind> "/" <id> -> (empty)
//
// <seq> is a big-endian uint64 (8 bytes), from 1. <ended> is the time of the
// terminal event as big-endian int64 Unix nanoseconds (8 bytes), so a cursor
// walks terminal entities oldest first. Kinds are "sandbox", "process" and
// "runtime"; ids are 1 to 128 printable ASCII bytes without '/' or space.
//
// The envelope (version 1), all integers big-endian:
//
//	offset  size  field
//	0       2     envelope version (1)
//	2       1     flags: bit 0 = terminal (the event ends the entity); others 0
//	3       8     time, int64 Unix nanoseconds
//	11      1     n = length of the type (1..255)
//	12      n     type, printable ASCII
//	12+n    m     payload: JSON, or empty for none
//	12+n+m  4     CRC-32C (Castagnoli) of every preceding byte
//
// A decoder reads the version first and refuses any version it does not know
// (ErrUnknownVersion), then checks length and checksum (ErrCorrupt). The
// payload's JSON was validated when it was appended; the checksum guards it
// since.
//
// The live entry:
//
//	offset  size  field
//	0       8     last sequence, uint64
//	8       8     time of the last event, int64 Unix nanoseconds
//	16      1     p = length of the parent id (0 = none)
//	17      p     parent id (a process's sandbox)
//	17+p    rest  type of the last event
//
// A stream is terminal when its last event carries the terminal flag; then it
// has no live entry and one terminal entry, and appending to it is refused
// (ErrTerminal). Terminal means a removed sandbox or an exited process (the
// caller sets Record.Terminal); an exited sandbox stays live.
//
// # Retention and compaction
//
// Retain deletes terminal entities whose terminal event is older than an age;
// bbolt reuses the freed pages but the file does not shrink. Compact rewrites
// a closed journal into a new, smaller file. After Retain an entity's id is
// forgotten: appending to it again would start a new stream at sequence 1
// (ids are random, so only a bug would do that).
//
// The copy marker is keyed by the presence of copy_of, whatever its value. It
// did not change the schema version: a file without it reads as before, and
// the marker is only ever in copies. A build older than the marker ignores it
// and would open a copy writable, so copies are safe from this build on.
//
// Schema version 1 is the first; there are no migrations yet. A later version
// adds an ordered migration step (with its test) and bumps SchemaVersion.
package journal
