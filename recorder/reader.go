package recorder

import (
	"errors"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/stockade/stockade/spec"
)

// Chunk is one piece of a recording, in arrival order: output bytes of one
// stream, or a gap.
type Chunk struct {
	// Stream is TypeStdout or TypeStderr; 0 for a gap.
	Stream byte
	// Offset is where the chunk starts in the process's output (both
	// streams together, in arrival order).
	Offset int64
	// Data is the output (the caller may keep it).
	Data []byte
	// Gap is, for a gap, how many bytes of output are not in the
	// recording here: beyond the bounds, lost to a crash, or dropped by a
	// write error.
	Gap int64
	// Lost: the gap is a gap record the writer put here, so the bytes
	// are known lost (a write error, or output the in-sandbox agent
	// dropped: the journal's process.output_gap says why), not merely
	// beyond the bounds.
	Lost bool
}

// Summary says how a recording ends.
type Summary struct {
	// Complete: the end record was read. The output ended and was synced;
	// only the gaps (bounds, write errors) are missing.
	Complete bool `json:"complete"`
	// Torn: the last segment ends inside a record: a crash cut an
	// unsynced write, or the process is still being recorded. Without
	// Complete, output after the last chunk may be missing.
	Torn bool `json:"torn"`
	// StdoutBytes and StderrBytes are the process's output totals when
	// Complete, else the bytes recorded up to where the recording ends.
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`
	// Recorded is the bytes handed out as chunks; Missing the bytes in
	// gaps; Dropped those a write error kept out (a Complete recording
	// says).
	Recorded int64 `json:"recorded"`
	Missing  int64 `json:"missing"`
	Dropped  int64 `json:"dropped"`
	// Head and Tail are the bounds the recording was made with.
	Head int64 `json:"head"`
	Tail int64 `json:"tail"`
}

// errNotFound is wrapped by Read's not_found error.
var errNotFound = errors.New("no recording")

// Read reads process id's recording from the store directory dir (see
// Dir) and hands each chunk to fn in arrival order, a gap as a chunk with
// Stream 0. It needs no lock: a live writer is fine (what was written when
// the files were opened is read) and so is a closed journal. An error from
// fn stops it and is returned. A corrupt recording fails (code journal,
// cause ErrCorrupt, naming the file and offset) after every chunk before
// the corruption was handed out. A process with no recording is not_found.
func Read(dir, id string, fn func(Chunk) error) (Summary, error) {
	if err := validID(id); err != nil {
		return Summary{}, err
	}
	files, names, err := openSegments(dir, id)
	if err != nil {
		return Summary{}, err
	}
	defer closeAll(files)
	var segs []segment
	var corruptErr error
	for i, f := range files {
		b, err := io.ReadAll(f)
		if err != nil {
			return Summary{}, spec.Wrap(spec.CodeJournal, "recorder", err, "reading %s", names[i])
		}
		s, err := decodeSegment(b)
		if err != nil {
			var ce *corruptError
			if errors.As(err, &ce) {
				err = spec.Wrap(spec.CodeJournal, "recorder", err, "%s at offset %d", names[i], ce.off)
			}
			corruptErr = err
		}
		if i > 0 && !s.hasHdr && corruptErr == nil {
			continue // a tail segment made, its header not yet written
		}
		segs = append(segs, s)
		if corruptErr != nil {
			break // what follows a corruption cannot be placed
		}
	}
	sum, err := emit(segs, fn)
	if err != nil {
		return sum, err
	}
	return sum, corruptErr
}

// openSegments opens the head and the tail segments, in order. A tail
// deleted by a rotation between the listing and its open starts it over:
// once open, a file reads the same whatever the writer deletes.
func openSegments(dir, id string) ([]*os.File, []string, error) {
	head := headName(dir, id)
	hf, err := os.Open(head)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, spec.Wrap(spec.CodeNotFound, "recorder", errNotFound, "process %s has no recording in %s (never recorded, recording off, or removed by retention)", id, dir)
	}
	if err != nil {
		return nil, nil, spec.Wrap(spec.CodeJournal, "recorder", err, "opening %s", head)
	}
	for attempt := 0; ; attempt++ {
		tails, err := listTails(dir, id)
		if err != nil {
			closeAll([]*os.File{hf})
			return nil, nil, err
		}
		files, names := []*os.File{hf}, []string{head}
		retry := false
		for _, n := range tails {
			name := tailName(dir, id, n)
			f, err := os.Open(name)
			if errors.Is(err, os.ErrNotExist) && attempt < 100 {
				retry = true
				break
			}
			if err != nil {
				closeAll(files)
				return nil, nil, spec.Wrap(spec.CodeJournal, "recorder", err, "opening %s", name)
			}
			files, names = append(files, f), append(names, name)
		}
		if !retry {
			return files, names, nil
		}
		closeAll(files[1:])
	}
}

// closeAll closes segments opened read-only: a close loses nothing of a
// file only read, so its error is not reported.
func closeAll(files []*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}

func listTails(dir, id string) ([]uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, spec.Wrap(spec.CodeJournal, "recorder", err, "listing %s", dir)
	}
	var ns []uint64
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), id+".rec.")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(rest, 10, 64); err == nil && n > 0 {
			ns = append(ns, n)
		}
	}
	sort.Slice(ns, func(a, b int) bool { return ns[a] < ns[b] })
	return ns, nil
}

// placed is a record with its offset in the output.
type placed struct {
	off int64
	rec record
}

// emit hands out the head's records, then the last Tail bytes of the tail
// segments', with a gap wherever the offsets jump.
func emit(segs []segment, fn func(Chunk) error) (Summary, error) {
	var sum Summary
	if len(segs) == 0 {
		return sum, nil
	}
	sum.Head, sum.Tail = segs[0].hdr.head, segs[0].hdr.tail
	var head, tail []placed
	var endRec *end
	pos := int64(0)
	for i, s := range segs {
		if s.hasHdr {
			pos = max(pos, s.hdr.start)
			if i > 0 {
				sum.Tail = s.hdr.tail
			}
		}
		for _, r := range s.recs {
			p := placed{off: pos, rec: r}
			switch r.typ {
			case TypeStdout, TypeStderr:
				pos += int64(len(r.data))
			case TypeGap:
				pos += int64(be64dec(r.data))
			case TypeEnd:
				endRec = s.end
				continue
			}
			if i == 0 {
				head = append(head, p)
			} else {
				tail = append(tail, p)
			}
		}
	}
	last := segs[len(segs)-1]
	sum.Torn = last.torn
	if sum.Tail > 0 {
		tail = lastBytes(tail, sum.Tail)
	}
	at := int64(0)
	out := func(p placed) error {
		if p.off > at {
			sum.Missing += p.off - at
			if err := fn(Chunk{Offset: at, Gap: p.off - at}); err != nil {
				return err
			}
		}
		switch p.rec.typ {
		case TypeGap:
			n := int64(be64dec(p.rec.data))
			sum.Missing += n
			at = p.off + n
			return fn(Chunk{Offset: p.off, Gap: n, Lost: true})
		case TypeStdout:
			sum.StdoutBytes += int64(len(p.rec.data))
		case TypeStderr:
			sum.StderrBytes += int64(len(p.rec.data))
		}
		sum.Recorded += int64(len(p.rec.data))
		at = p.off + int64(len(p.rec.data))
		return fn(Chunk{Stream: p.rec.typ, Offset: p.off, Data: p.rec.data})
	}
	for _, p := range append(head, tail...) {
		if err := out(p); err != nil {
			return sum, err
		}
	}
	if endRec != nil {
		sum.Complete = true
		sum.StdoutBytes, sum.StderrBytes, sum.Dropped = endRec.stdout, endRec.stderr, endRec.dropped
		if total := endRec.stdout + endRec.stderr; total > at {
			// Output past the last record: lost to a write error the gap
			// record did not cover (it is counted in Dropped).
			sum.Missing += total - at
			if err := fn(Chunk{Offset: at, Gap: total - at}); err != nil {
				return sum, err
			}
		}
	}
	return sum, nil
}

// lastBytes keeps the last n bytes of the tail's records: older ones are
// beyond the bound even if a segment not yet deleted still holds them.
func lastBytes(tail []placed, n int64) []placed {
	dataEnd := int64(0)
	for _, t := range tail {
		if t.rec.typ != TypeGap {
			dataEnd = t.off + int64(len(t.rec.data))
		}
	}
	from := dataEnd - n
	for len(tail) > 0 {
		t := &tail[0]
		if t.off+recSize(t.rec) <= from {
			tail = tail[1:]
			continue
		}
		if t.off < from && t.rec.typ != TypeGap {
			t.rec.data = t.rec.data[from-t.off:]
			t.off = from
		}
		break
	}
	return tail
}

func recSize(r record) int64 {
	if r.typ == TypeGap {
		return int64(be64dec(r.data))
	}
	return int64(len(r.data))
}

func be64dec(b []byte) uint64 {
	var v uint64
	for _, c := range b[:8] {
		v = v<<8 | uint64(c)
	}
	return v
}
