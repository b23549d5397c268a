package recorder

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"os"
	"time"

	"github.com/stockade/stockade/spec"
)

// FollowOptions says where a Follow starts and how it learns that no end
// record will come.
type FollowOptions struct {
	// From is the output offset (both streams together) to start at:
	// bytes before it are not handed out.
	From int64
	// Ended reports whether the process has ended by the journal's word,
	// asked when the recording has nothing new. Once it says so, Follow
	// waits at most EndWait for the end record (a runtime that died
	// between the exit and the end record leaves none until a recovery
	// seals it) and then returns what it has, not Complete. nil: only the
	// end record ends a Follow.
	Ended func() bool
	// EndWait bounds that wait; 0 means 2 s.
	EndWait time.Duration
	// Poll is the longest Follow sleeps without a wake-up from a writer
	// of this store (a writer elsewhere is seen at the next poll); 0
	// means 250 ms.
	Poll time.Duration
	// Coalesce joins consecutive records of one stream into chunks of up
	// to this many bytes (a chunk is never held back while Follow waits
	// for more: it goes out before the wait); 0 hands out each record as
	// it is.
	Coalesce int
}

// Follow hands fn process id's recorded output from o.From on, in arrival
// order, as the store's writer adds it: what is on disk first, then each
// new record as it is written (a write of this store wakes it at once),
// until the end record, which it returns as a Complete summary. Chunks are
// handed out as Read's are, with two differences: every byte still on disk
// is handed out (a tail segment is read whole while it exists, not only
// its last Tail bytes), and a record that straddles From is cut at From.
// A segment deleted by a rotation before Follow reached it is a gap. Data
// is the caller's to keep.
//
// It ends with ctx (code cancelled, after the chunks it handed out), with
// an error from fn, with a corruption (code journal, cause ErrCorrupt), or,
// with no end record, once o.Ended says the process ended and EndWait has
// passed: the summary is then not Complete. A recording that does not
// exist yet is waited for in the same way; one that never comes (recording
// off, or a start that failed) is an empty summary once Ended says so.
func (s *Store) Follow(ctx context.Context, id string, o FollowOptions, fn func(Chunk) error) (Summary, error) {
	if err := validID(id); err != nil {
		return Summary{}, err
	}
	if o.From < 0 {
		return Summary{}, spec.Errorf(spec.CodeInvalidArgument, "recorder", "output offset %d is negative: give 0 for the beginning", o.From)
	}
	if o.EndWait <= 0 {
		o.EndWait = 2 * time.Second
	}
	if o.Poll <= 0 {
		o.Poll = 250 * time.Millisecond
	}
	s.follow(id)
	defer s.unfollow(id)
	f := &follower{dir: s.dir, id: id, at: o.From, fn: fn, coalesce: o.Coalesce}
	defer f.close()
	var endBy time.Time // when Ended said so: the end record is due by EndWait
	var asked time.Time // when Ended was last asked: at most once a Poll
	for {
		if err := ctx.Err(); err != nil {
			return f.sum, spec.Wrap(spec.CodeCancelled, "recorder", err, "following the output of %s", id)
		}
		wake := s.wakeup(id)
		progress, err := f.step()
		if err == nil && (f.done || !progress) {
			err = f.flush() // nothing more at once: what is held goes out
		}
		if err != nil || f.done {
			return f.sum, err
		}
		if progress {
			continue
		}
		// Ended costs its caller a journal read: asked when idle, and
		// not again within a Poll however often writes wake this loop.
		if endBy.IsZero() && o.Ended != nil && time.Since(asked) >= o.Poll {
			asked = time.Now()
			if o.Ended() {
				endBy = time.Now().Add(o.EndWait)
				continue // read once more: the end may have come with the exit
			}
		}
		wait := o.Poll
		if !endBy.IsZero() {
			left := time.Until(endBy)
			if left <= 0 {
				return f.sum, nil
			}
			wait = min(wait, left)
		}
		t := time.NewTimer(wait)
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return f.sum, spec.Wrap(spec.CodeCancelled, "recorder", ctx.Err(), "following the output of %s", id)
		}
		t.Stop()
	}
}

// follow counts a follower of id; unfollow, its end, forgets id's wake-up
// channel with the last one, so the map holds only followed recordings.
func (s *Store) follow(id string) {
	s.watchers.Add(1)
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.followers == nil {
		s.followers = make(map[string]int)
	}
	s.followers[id]++
}

func (s *Store) unfollow(id string) {
	s.wmu.Lock()
	if s.followers[id]--; s.followers[id] <= 0 {
		delete(s.followers, id)
		delete(s.wakes, id)
	}
	s.wmu.Unlock()
	s.watchers.Add(-1)
}

// wakeup returns the channel the next write of id's recording closes.
func (s *Store) wakeup(id string) <-chan struct{} {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	ch, ok := s.wakes[id]
	if !ok {
		if s.wakes == nil {
			s.wakes = make(map[string]chan struct{})
		}
		ch = make(chan struct{})
		s.wakes[id] = ch
	}
	return ch
}

// following reports how many recordings have a follower and how many
// wake-up channels are held (a test's check that nothing is left).
func (s *Store) following() (followed, channels int) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return len(s.followers), len(s.wakes)
}

// wake tells id's followers that its recording changed; free when no one
// follows.
func (s *Store) wake(id string) {
	if s.watchers.Load() == 0 {
		return
	}
	s.wmu.Lock()
	if ch, ok := s.wakes[id]; ok {
		close(ch)
		delete(s.wakes, id)
	}
	s.wmu.Unlock()
}

// follower reads one recording incrementally: the segment it is in, the
// bytes of it read but not yet decoded, and how far it has handed out.
type follower struct {
	dir, id string
	fn      func(Chunk) error

	f      *os.File
	seg    uint64 // the open segment's number (0: the head)
	hdr    bool   // its header was read
	buf    []byte // read, not yet decoded
	off    int64  // the file offset of buf's first byte
	pos    int64  // the output offset of the next record in the segment
	at     int64  // handed out up to here (From at first)
	done   bool   // the end record was read
	sum    Summary
	header header

	// coalesce is FollowOptions.Coalesce; pending the chunk being joined.
	coalesce int
	pending  Chunk
}

// emit hands c out, joined to the pending chunk when it continues it.
// With coalescing, c.Data may alias the read buffer: it is copied.
func (f *follower) emit(c Chunk) error {
	if f.coalesce <= 0 {
		return f.fn(c)
	}
	p := &f.pending
	if c.Stream != 0 && p.Stream == c.Stream && p.Offset+int64(len(p.Data)) == c.Offset && len(p.Data)+len(c.Data) <= f.coalesce {
		p.Data = append(p.Data, c.Data...)
		return nil
	}
	if err := f.flush(); err != nil {
		return err
	}
	if c.Stream == 0 {
		return f.fn(c)
	}
	// c.Data aliases the read buffer: the pending chunk gets a buffer of
	// its own, handed to fn with it.
	f.pending = c
	f.pending.Data = append(make([]byte, 0, max(f.coalesce, len(c.Data))), c.Data...)
	return nil
}

// flush hands out the pending chunk, if any.
func (f *follower) flush() error {
	if f.pending.Stream == 0 {
		return nil
	}
	c := f.pending
	f.pending = Chunk{}
	return f.fn(c)
}

func (f *follower) close() {
	if f.f != nil {
		_ = f.f.Close() // only read
	}
}

// step reads what is new and hands it out; progress says something was
// read or a segment was entered.
func (f *follower) step() (bool, error) {
	if f.f == nil {
		h, err := os.Open(headName(f.dir, f.id))
		if errors.Is(err, os.ErrNotExist) {
			return false, nil // not made yet
		}
		if err != nil {
			return false, spec.Wrap(spec.CodeJournal, "recorder", err, "opening the recording of %s", f.id)
		}
		f.f = h
	}
	n, err := f.read()
	if err != nil {
		return false, err
	}
	if err := f.decode(); err != nil || f.done {
		return n > 0, err
	}
	if n > 0 {
		return true, nil
	}
	// Nothing new here: a resume may have made the head again (its
	// header was torn), or a rotation moved the writer on.
	if replaced, err := f.replaced(); err != nil || replaced {
		return replaced, err
	}
	// Every write to this segment came before the next one was made, so
	// once it exists one more read finds the rest; it is entered only
	// once its header is whole (a header that failed to be written
	// leaves no file: see newSegment).
	next, ok, err := f.nextSegment()
	if err != nil || !ok {
		return false, err
	}
	if whole, err := f.headerWhole(next); err != nil || !whole {
		return false, err
	}
	if _, err := f.read(); err != nil {
		return false, err
	}
	if err := f.decode(); err != nil || f.done {
		return true, err
	}
	nf, err := os.Open(tailName(f.dir, f.id, next))
	if errors.Is(err, os.ErrNotExist) {
		return true, nil // deleted meanwhile: the next listing finds a later one
	}
	if err != nil {
		return false, spec.Wrap(spec.CodeJournal, "recorder", err, "opening segment %d of the recording of %s", next, f.id)
	}
	_ = f.f.Close() // only read
	f.f, f.seg, f.hdr, f.buf, f.off = nf, next, false, f.buf[:0], 0
	return true, nil
}

// replaced reports (and follows) the open segment's file having been made
// again under its name: a resume remakes a head whose header was torn.
// Before a header was read it is reopened from its start; after, a
// replaced segment is corruption (a resume never remakes one).
func (f *follower) replaced() (bool, error) {
	name := headName(f.dir, f.id)
	if f.seg > 0 {
		name = tailName(f.dir, f.id, f.seg)
	}
	now, err := os.Stat(name)
	if err != nil {
		return false, nil // deleted by a rotation: read on, then move on
	}
	open, err := f.f.Stat()
	if err != nil || os.SameFile(now, open) {
		return false, nil
	}
	if f.hdr {
		return false, f.corrupt(0, "the segment was replaced after its header was read")
	}
	nf, err := os.Open(name)
	if err != nil {
		return false, nil // gone again: the next step looks once more
	}
	_ = f.f.Close() // only read
	f.f, f.buf, f.off = nf, f.buf[:0], 0
	return true, nil
}

// headerWhole reports whether tail segment n's header is all on disk.
func (f *follower) headerWhole(n uint64) (bool, error) {
	fi, err := os.Stat(tailName(f.dir, f.id, n))
	if errors.Is(err, os.ErrNotExist) {
		return true, nil // deleted meanwhile: the step after finds a later one
	}
	if err != nil {
		return false, spec.Wrap(spec.CodeJournal, "recorder", err, "reading segment %d of the recording of %s", n, f.id)
	}
	return fi.Size() >= headerSize, nil
}

// nextSegment is the lowest tail segment after the open one.
func (f *follower) nextSegment() (uint64, bool, error) {
	tails, err := listTails(f.dir, f.id)
	if err != nil {
		return 0, false, err
	}
	for _, n := range tails {
		if n > f.seg {
			return n, true, nil
		}
	}
	return 0, false, nil
}

// read appends what the open segment has past what was read.
// It reads at explicit offsets, never from the file's own position, and
// reads again what it had not decoded (less than one record, after
// decode): a resume in this store (a warden reattached) cuts a torn record
// off the end and appends after the cut, so bytes read but not decoded
// may have been replaced. What was decoded never is.
func (f *follower) read() (int, error) {
	fi, err := f.f.Stat()
	if err != nil {
		return 0, spec.Wrap(spec.CodeJournal, "recorder", err, "reading segment %d of the recording of %s", f.seg, f.id)
	}
	if fi.Size() < f.off {
		return 0, f.corrupt(fi.Size(), "the segment was cut below what was read (at %d)", f.off)
	}
	held := int64(len(f.buf))
	f.buf = f.buf[:0]
	total := -int(held) // progress is what is new beyond it
	for {
		if cap(f.buf)-len(f.buf) < 64<<10 {
			nb := make([]byte, len(f.buf), max(2*cap(f.buf), len(f.buf)+256<<10))
			copy(nb, f.buf)
			f.buf = nb
		}
		n, err := f.f.ReadAt(f.buf[len(f.buf):cap(f.buf)], f.off+int64(len(f.buf)))
		f.buf = f.buf[:len(f.buf)+n]
		total += n
		if errors.Is(err, io.EOF) || (err == nil && n == 0) {
			return max(total, 0), nil
		}
		if err != nil {
			return max(total, 0), spec.Wrap(spec.CodeJournal, "recorder", err, "reading segment %d of the recording of %s", f.seg, f.id)
		}
		if len(f.buf) >= MaxPayload+recOverhead+headerSize {
			return max(total, 0), nil // enough to decode; the rest next time
		}
	}
}

// decode hands out every whole record in buf and keeps the rest. A record
// not yet whole (a write under way) waits; a whole record that fails its
// checksum is corruption unless only zeros follow it (then it waits, as
// Read calls it torn).
func (f *follower) decode() error {
	b := f.buf
	defer func() {
		f.off += int64(len(f.buf) - len(b))
		n := copy(f.buf, b)
		f.buf = f.buf[:n]
	}()
	at := func() int64 { return f.off + int64(len(f.buf)-len(b)) }
	if !f.hdr {
		if len(b) < headerSize {
			return nil
		}
		if string(b[:6]) != magic || crc32.Checksum(b[:40], castagnoli) != binary.BigEndian.Uint32(b[40:]) || b[6] != version {
			if zeros(b) {
				return nil
			}
			return f.corrupt(at(), "bad header (magic, checksum or version)")
		}
		h := header{
			segment: binary.BigEndian.Uint64(b[8:]),
			start:   int64(binary.BigEndian.Uint64(b[16:])),
			head:    int64(binary.BigEndian.Uint64(b[24:])),
			tail:    int64(binary.BigEndian.Uint64(b[32:])),
		}
		if h.start < 0 || h.head < 0 || h.tail < 0 {
			return f.corrupt(at(), "negative offset or bound in the header")
		}
		f.hdr, f.header = true, h
		if f.seg == 0 {
			f.sum.Head, f.sum.Tail = h.head, h.tail
		}
		f.pos = max(f.pos, h.start)
		b = b[headerSize:]
	}
	for len(b) >= 5 {
		typ, n := b[0], int(binary.BigEndian.Uint32(b[1:5]))
		if n > MaxPayload {
			if zeros(b) {
				return nil
			}
			return f.corrupt(at(), "record length %d is over the limit of %d", n, MaxPayload)
		}
		if len(b) < 5+n+4 {
			return nil
		}
		whole := b[:5+n+4]
		bad := ""
		switch {
		case crc32.Checksum(whole[:5+n], castagnoli) != binary.BigEndian.Uint32(whole[5+n:]):
			bad = "checksum mismatch"
		case typ < TypeStdout || typ > TypeEnd:
			bad = "unknown record type"
		case typ == TypeGap && n != 8, typ == TypeEnd && n != 24:
			bad = "payload of the wrong size"
		}
		if bad != "" {
			if zeros(b[len(whole):]) {
				return nil
			}
			return f.corrupt(at(), "record of type %d: %s", typ, bad)
		}
		b = b[len(whole):]
		if err := f.record(typ, whole[5:5+n]); err != nil || f.done {
			return err
		}
	}
	return nil
}

// record hands out one record's part past f.at, with a gap before it
// where the offsets jump.
func (f *follower) record(typ byte, data []byte) error {
	if typ == TypeEnd {
		e := end{
			stdout:  int64(binary.BigEndian.Uint64(data)),
			stderr:  int64(binary.BigEndian.Uint64(data[8:])),
			dropped: int64(binary.BigEndian.Uint64(data[16:])),
		}
		f.done = true
		f.sum.Complete = true
		f.sum.StdoutBytes, f.sum.StderrBytes, f.sum.Dropped = e.stdout, e.stderr, e.dropped
		if total := e.stdout + e.stderr; total > max(f.at, f.pos) {
			// Output past the last record: lost to a write error.
			from := max(f.at, f.pos)
			f.sum.Missing += total - from
			return f.emit(Chunk{Offset: from, Gap: total - from})
		}
		return nil
	}
	size := int64(len(data))
	if typ == TypeGap {
		size = int64(binary.BigEndian.Uint64(data))
	}
	start, stop := f.pos, f.pos+size
	f.pos = stop
	if stop <= f.at || size == 0 {
		return nil
	}
	if start > f.at {
		f.sum.Missing += start - f.at
		if err := f.emit(Chunk{Offset: f.at, Gap: start - f.at}); err != nil {
			return err
		}
		f.at = start
	}
	skip := f.at - start
	f.at = stop
	if typ == TypeGap {
		f.sum.Missing += size - skip
		return f.emit(Chunk{Offset: start + skip, Gap: size - skip, Lost: true})
	}
	out := data[skip:]
	if f.coalesce <= 0 {
		// Handed out as is: the caller keeps it, the read buffer is
		// reused.
		out = append([]byte(nil), out...)
	}
	f.sum.Recorded += int64(len(out))
	if typ == TypeStderr {
		f.sum.StderrBytes += int64(len(out))
	} else {
		f.sum.StdoutBytes += int64(len(out))
	}
	return f.emit(Chunk{Stream: typ, Offset: start + skip, Data: out})
}

func (f *follower) corrupt(off int64, format string, args ...any) error {
	name := headName(f.dir, f.id)
	if f.seg > 0 {
		name = tailName(f.dir, f.id, f.seg)
	}
	return spec.Wrap(spec.CodeJournal, "recorder", corrupt(int(off), format, args...), "%s at offset %d", name, off)
}
