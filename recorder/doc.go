// Package recorder keeps what processes printed, beside the journal and not
// in it: output must not contend with the journal's fsyncs. Replay debugging
// then shows a process's output, not only its byte counts.
//
// # Layout
//
// A journal at dir/journal.db records into the directory dir/journal.rec
// (Dir), one set of files per process:
//
//	<process-id>.rec      the head segment: the first Head bytes of output
//	<process-id>.rec.<n>  tail segments n = 1, 2, ...: the last Tail bytes
//
// Output (stdout and stderr together, in arrival order) goes to the head
// segment until it holds Head bytes of payload, then to tail segment 1. A
// tail segment that holds Tail bytes or more is left for segment n+1, and
// segment n-1 is deleted as n+1 is made: at most two tail segments exist,
// so the last Tail bytes are always on disk and a recording takes at most
// Head + 2×Tail bytes (plus a chunk and the framing). A reader keeps exactly
// the last Tail bytes of the tail segments and reports the bytes between the
// head and them as a gap, with its byte count.
//
// # Format (version 1)
//
// Every segment starts with a 44-byte header (integers big-endian):
//
//	offset size
//	0      6    magic "STKREC"
//	6      1    version (1)
//	7      1    reserved, 0
//	8      8    segment number (0: the head)
//	16     8    start: bytes of output (both streams) before this segment's first record
//	24     8    the head bound
//	32     8    the tail bound
//	40     4    CRC-32C (Castagnoli) of bytes 0..40
//
// and is followed by records, appended and never rewritten:
//
//	0      1    type: 1 stdout, 2 stderr, 3 gap, 4 end
//	1      4    payload length n (at most MaxPayload)
//	5      n    payload
//	5+n    4    CRC-32C of bytes 0..5+n
//
// Stdout and stderr records carry output bytes (the stream id is Docker's).
// A gap record (payload: 8-byte count) says that many bytes were not
// recorded where it stands: the writer failed to write them (a full disk)
// and says so at the end if it still can, or they are known lost where
// they stand (Recording.Gap: a resumed process whose in-sandbox agent no
// longer holds them; the journal's process.output_gap says why). The end
// record (payload: 8-byte stdout total, 8-byte stderr total, 8-byte count
// of bytes dropped by write errors) is written once, after the process's
// exit is journaled, and synced with everything before it: a recording
// with an end record is complete up to its bounds, and its process has
// ended.
//
// # Durability
//
// Appends are plain writes (page cache). A recording is fsynced by a timer
// at most a second after a write (never per write), every retired segment
// and the directory with it; at the end of the output (Sync: the process
// actor journals a process's exit only after it, so an exit in the journal
// implies its output on disk); and at Close, which writes the end record
// and syncs before it returns, called only once the exit is journaled. A
// process the runtime lets go of without a journaled exit (the journal
// failed, the runtime closes, the warden link ended) is Suspended: no end
// record, so the next runtime resumes it. A crash loses at most the last
// second of a running process's output; a crash between the exit and the
// end record leaves a recording without its end record (not complete).
//
// # Resuming
//
// A process can outlive its runtime (held by an in-sandbox agent that
// buffers the output not yet acknowledged). The runtime that re-adopts it
// calls Store.Resume instead of Create: it decodes the segments, cuts the
// last one after its last whole record (a torn record is an unsynced write
// the crash cut; its bytes are not counted), deletes a tail segment a
// rotation made without its header reaching the disk, syncs, and reopens
// the last segment for appending with the writer's state restored: the
// output offset (the segment's start plus its payload and gap counts) and
// the payload in the current segment, so later writes rotate as if the
// recording had never stopped. The agent sends the output again from that
// offset, and the recording ends up as one written in one go: Read cannot
// tell them apart. If the agent no longer holds the bytes from that offset
// (it had been told they were recorded, and a host crash lost their
// writes), the caller records the missing range with Recording.Gap where
// it stands, and journals it (process.output_gap), instead of splicing the
// output after it over the hole. A resumed recording keeps its headers' bounds, and the
// stdout and stderr totals it restores are the records' on disk: bytes in
// deleted tail segments are counted in the offset but not by stream, so the
// caller sets the exact totals (Recording.SetTotals) before Close when it
// knows them. A complete recording is not resumed (conflict); a head
// without a valid header or a corrupt record fails before anything is
// modified.
//
// # Reading
//
// Read works beside a live writer (files are opened first, then read to
// the end they had) and on a closed journal. A segment that ends inside a
// record is torn: an unsynced write cut by a crash, or a write under way.
// Torn is not corruption: the reader keeps every whole record before it and
// reports the missing bytes as a gap (their count is known from the next
// segment's start; after the last segment, Summary.Torn says it). A record
// that is whole but fails its checksum, or has an unknown type, is
// corruption unless nothing but zero bytes follows it (a crash can leave a
// file longer than the data that reached the disk: its last record then
// reads as zeros in part, and is torn); on corruption Read
// fails with a journal-coded error wrapping ErrCorrupt that names the file
// and offset, after handing out every chunk before it.
package recorder
