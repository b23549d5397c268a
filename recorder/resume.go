package recorder

import (
	"errors"
	"os"

	"github.com/stockade/stockade/spec"
)

// Resume reopens process id's recording to append to it: for a process that
// a new runtime re-adopts after a crash. It returns the recording and the output
// offset it holds: every byte of output before offset is recorded or counted
// (a gap); output from offset on must be written next. A record torn by the
// crash at the end of the last segment is cut off and not counted (its bytes
// come again). No recording yet: a new one (offset 0), as Create. A complete
// recording (with its end record) cannot be resumed: a conflict error.
//
// The recording keeps the bounds in its segment headers, whatever r says;
// r is validated, and only a new recording takes it. r.Off does not stop a
// recording that exists: its output keeps coming and the recording stays
// whole (with no recording yet, r.Off returns nil, 0, nil as Create does).
//
// The last segment is cut after its last whole record (where Read stops:
// a torn record, or a bad last record with nothing but zeros after it), a
// tail segment after it that has no header yet (made by a rotation the
// crash cut) is deleted, and every segment and the directory are synced
// before Resume returns; later Writes rotate exactly as if the recording
// had never stopped. The stdout and stderr totals are the sums of the
// records on disk: output in tail segments a rotation deleted, or lost
// from a torn segment before the last, counts in offset but cannot be split
// by stream, so a caller that knows the exact totals calls SetTotals
// before Close.
//
// A head segment without a whole, valid header, a corruption anywhere
// (as Read sees it: a whole record that fails its checksum with more than
// zeros after it), or headers that disagree, fail with a journal-coded
// error wrapping ErrCorrupt that names the file, before anything is
// modified. A Recording of id from this store that is not closed yet is a
// conflict: the caller resumes a recording no writer holds (after a crash,
// the journal's lock keeps the old runtime out).
func (s *Store) Resume(id string, r spec.Record) (rec *Recording, offset int64, err error) {
	if err := validID(id); err != nil {
		return nil, 0, err
	}
	if err := r.Validate(); err != nil {
		return nil, 0, err
	}
	s.mu.Lock()
	if _, ok := s.live[id]; ok {
		s.mu.Unlock()
		return nil, 0, spec.Errorf(spec.CodeConflict, "recorder", "the recording of %s is open in this store; close it before resuming it", id)
	}
	s.setLive(id, nil) // reserved while Resume works
	s.mu.Unlock()
	rec, offset, err = s.resume(id, r)
	s.mu.Lock()
	if rec != nil {
		s.live[id] = rec
	} else if s.live[id] == nil {
		delete(s.live, id)
	}
	s.mu.Unlock()
	return rec, offset, err
}

// onDisk is a segment file Resume read.
type onDisk struct {
	name string
	n    uint64 // its number: 0 the head
	seg  segment
	size int
}

func (s *Store) resume(id string, r spec.Record) (*Recording, int64, error) {
	head := headName(s.dir, id)
	tails, err := listTails(s.dir, id)
	if err != nil {
		return nil, 0, err
	}
	hb, err := os.ReadFile(head)
	if errors.Is(err, os.ErrNotExist) {
		if len(tails) > 0 {
			return nil, 0, spec.Errorf(spec.CodeJournal, "recorder", "cannot resume the recording of %s: tail segments %v without the head %s", id, tails, head)
		}
		rec, err := s.create(id, r)
		return rec, 0, err
	}
	if err != nil {
		return nil, 0, spec.Wrap(spec.CodeJournal, "recorder", err, "reading %s", head)
	}

	// Read and check everything before modifying anything.
	segs, err := s.readSegments(id, hb, tails)
	if err != nil {
		return nil, 0, err
	}
	if !segs[0].seg.hasHdr && len(segs) == 1 && segs[0].size < headerSize {
		// The crash came between the head's creation and its header
		// reaching the disk: nothing was recorded yet. Start afresh (with
		// the caller's bounds: the lost header's are unknowable).
		if err := os.Remove(head); err != nil {
			return nil, 0, spec.Wrap(spec.CodeJournal, "recorder", err, "deleting %s (a head segment torn when it was made)", head)
		}
		if err := syncDir(s.dir); err != nil {
			return nil, 0, spec.Wrap(spec.CodeJournal, "recorder", err, "syncing %s", s.dir)
		}
		rec, err := s.create(id, r)
		return rec, 0, err
	}
	if err := checkSegments(id, segs); err != nil {
		return nil, 0, err
	}
	// The last segment with a header takes the output; tail segments after
	// it were made by a rotation the crash cut before their header reached
	// the disk (Read skips them): they go, the next rotation makes them
	// again.
	last := len(segs) - 1
	for !segs[last].seg.hasHdr {
		last--
	}
	f, err := s.reopen(id, segs, last)
	if err != nil {
		return nil, 0, err
	}
	h, cur := segs[0].seg, segs[last]
	rec := &Recording{
		store:    s,
		id:       id,
		head:     h.hdr.head,
		tail:     h.hdr.tail,
		cur:      f,
		curSeg:   cur.n,
		curBytes: cur.seg.bytes,
		total:    cur.seg.hdr.start + cur.seg.bytes + cur.seg.gaps,
	}
	for _, d := range segs[:last+1] {
		for _, rc := range d.seg.recs {
			switch rc.typ {
			case TypeStdout:
				rec.stdout += int64(len(rc.data))
			case TypeStderr:
				rec.stderr += int64(len(rc.data))
			}
		}
		// Gap records count in the end record's dropped bytes (a write
		// error's, or bytes known lost: Gap).
		rec.droppedBefore += d.seg.gaps
	}
	return rec, rec.total, nil
}

// corruptSegment is the error of a segment that cannot be resumed.
func corruptSegment(id string, d onDisk, format string, args ...any) error {
	return spec.Wrap(spec.CodeJournal, "recorder", ErrCorrupt, "cannot resume the recording of %s: %s: "+format, append([]any{id, d.name}, args...)...)
}

// readSegments reads and decodes the head (hb, read already) and each
// tail segment, changing nothing.
func (s *Store) readSegments(id string, hb []byte, tails []uint64) ([]onDisk, error) {
	segs := []onDisk{{name: headName(s.dir, id)}}
	for _, n := range tails {
		segs = append(segs, onDisk{name: tailName(s.dir, id, n), n: n})
	}
	for i := range segs {
		d := &segs[i]
		b := hb
		if i > 0 {
			var err error
			if b, err = os.ReadFile(d.name); err != nil {
				return nil, spec.Wrap(spec.CodeJournal, "recorder", err, "reading %s", d.name)
			}
		}
		seg, err := decodeSegment(b)
		if err != nil {
			var ce *corruptError
			if errors.As(err, &ce) {
				err = spec.Wrap(spec.CodeJournal, "recorder", err, "cannot resume the recording of %s: %s at offset %d", id, d.name, ce.off)
			}
			return nil, err
		}
		d.seg, d.size = seg, len(b)
	}
	return segs, nil
}

// checkSegments refuses segments that do not make one recording to resume:
// a head with no whole header or bounds out of range, an end record (the
// recording is complete), a tail whose header names another segment or
// other bounds.
func checkSegments(id string, segs []onDisk) error {
	h := segs[0].seg
	if !h.hasHdr {
		return corruptSegment(id, segs[0], "the head segment has no whole header (%d bytes): torn when it was made", segs[0].size)
	}
	if h.hdr.head < spec.MinRecordBound || h.hdr.head > spec.MaxRecordBound || h.hdr.tail < spec.MinRecordBound || h.hdr.tail > spec.MaxRecordBound {
		return corruptSegment(id, segs[0], "bounds head %d, tail %d in the header are outside [%d, %d]", h.hdr.head, h.hdr.tail, spec.MinRecordBound, spec.MaxRecordBound)
	}
	for _, d := range segs {
		if d.seg.end != nil {
			return spec.Errorf(spec.CodeConflict, "recorder", "the recording of %s is complete (%s has its end record): it cannot be resumed", id, d.name)
		}
		if !d.seg.hasHdr {
			continue
		}
		if d.seg.hdr.segment != d.n {
			return corruptSegment(id, d, "its header says segment %d", d.seg.hdr.segment)
		}
		if d.seg.hdr.head != h.hdr.head || d.seg.hdr.tail != h.hdr.tail {
			return corruptSegment(id, d, "bounds head %d, tail %d differ from the head segment's %d, %d", d.seg.hdr.head, d.seg.hdr.tail, h.hdr.head, h.hdr.tail)
		}
	}
	return nil
}

// reopen opens segs[last] to append to it: its torn end cut, the tail
// segments after it (made without a header) deleted, and everything synced
// before anything is written after it.
func (s *Store) reopen(id string, segs []onDisk, last int) (*os.File, error) {
	cur := segs[last]
	f, err := os.OpenFile(cur.name, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil, spec.Wrap(spec.CodeJournal, "recorder", err, "opening %s to resume it", cur.name)
	}
	fail := func(err error, format string, args ...any) (*os.File, error) {
		_ = f.Close() // the failure being reported is the one that matters
		return nil, spec.Wrap(spec.CodeJournal, "recorder", err, format, args...)
	}
	if whole := wholeSize(cur.seg); whole < cur.size {
		// A torn record: an unsynced write the crash cut. Its bytes come
		// again from the offset Resume returns.
		if err := f.Truncate(int64(whole)); err != nil {
			return fail(err, "cutting the torn end of %s", cur.name)
		}
	}
	for _, d := range segs[last+1:] {
		if err := os.Remove(d.name); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fail(err, "deleting %s (a tail segment without a header)", d.name)
		}
	}
	// The crashed runtime's last writes may be in the page cache only:
	// sync them (and the cut, and the deletions) before writing after them.
	var errs []error
	for _, d := range segs[:last] {
		if err := syncFile(d.name); err != nil {
			errs = append(errs, err)
		}
	}
	if err := f.Sync(); err != nil {
		errs = append(errs, err)
	}
	if err := syncDir(s.dir); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fail(err, "syncing the recording of %s to resume it", id)
	}
	return f, nil
}

// wholeSize is the bytes of a decoded segment's header and whole records:
// where a torn segment is cut.
func wholeSize(s segment) int {
	if !s.hasHdr {
		return 0
	}
	n := headerSize
	for _, r := range s.recs {
		n += recOverhead + len(r.data)
	}
	return n
}

func syncFile(name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
