package recorder

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stockade/stockade/spec"
)

// crash drops a recording as a runtime crash does: no end record, no sync
// (the page cache keeps what was written; the kernel closes the files),
// and its timer can no longer touch the files.
func crash(r *Recording) {
	if r == nil {
		return
	}
	r.syncMu.Lock()
	defer r.syncMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if r.timer != nil {
		r.timer.Stop()
	}
	for _, rt := range r.retired {
		_ = rt.f.Close()
	}
	_ = r.cur.Close()
}

// writeRange writes the output bytes [from, to) of cs to rec, chunk by
// chunk, the first and last clipped: what an agent sends again from an
// offset.
func writeRange(t *testing.T, rec *Recording, cs []chunk, from, to int64) {
	t.Helper()
	pos := int64(0)
	for _, c := range cs {
		lo, hi := pos, pos+int64(len(c.data))
		pos = hi
		if hi <= from || lo >= to {
			continue
		}
		if err := rec.Write(c.stream, c.data[max(from, lo)-lo:min(to, hi)-lo]); err != nil {
			t.Fatal(err)
		}
	}
}

// upTo is the output bytes in cs[:k].
func upTo(cs []chunk, k int) int64 {
	var n int64
	for _, c := range cs[:k] {
		n += int64(len(c.data))
	}
	return n
}

func totals(cs []chunk) (stdout, stderr int64) {
	for _, c := range cs {
		if c.stream == TypeStderr {
			stderr += int64(len(c.data))
		} else {
			stdout += int64(len(c.data))
		}
	}
	return stdout, stderr
}

// files is a recording's files by base name.
func files(t *testing.T, dir, id string) map[string][]byte {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, id+".rec*"))
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string][]byte)
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(n)] = b
	}
	return out
}

func chunks(t *testing.T, dir, id string) ([]Chunk, Summary, error) {
	t.Helper()
	var out []Chunk
	sum, err := Read(dir, id, func(c Chunk) error {
		out = append(out, c)
		return nil
	})
	return out, sum, err
}

// tamper changes a crashed recording's files as a crash may have left
// them; it returns the output bytes it took back (their records are gone
// or cut: the agent sends them again).
type tamper func(t *testing.T, dir, id string) int64

// lastRecord decodes the newest segment and returns its bytes and its last
// record's offset and size.
func lastRecord(t *testing.T, name string) (b []byte, off, size int) {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := decodeSegment(b)
	if err != nil || len(s.recs) == 0 {
		t.Fatalf("%s: %d records, %v; the test wants a last record", name, len(s.recs), err)
	}
	r := s.recs[len(s.recs)-1]
	size = recOverhead + len(r.data)
	return b, wholeSize(s) - size, size
}

var (
	// tornRecord: a record's first bytes reached the disk, not the rest.
	tornRecord tamper = func(t *testing.T, dir, id string) int64 {
		name := lastFile(t, dir, id)
		rec := appendRecord(nil, TypeStdout, []byte("never whole"))
		appendTo(t, name, rec[:len(rec)-6])
		return 0
	}
	// trailingZeros: the file grew, its data never came.
	trailingZeros tamper = func(t *testing.T, dir, id string) int64 {
		appendTo(t, lastFile(t, dir, id), make([]byte, 300))
		return 0
	}
	// lostRecord: the last whole record did not reach the disk but its
	// first bytes.
	lostRecord tamper = func(t *testing.T, dir, id string) int64 {
		name := lastFile(t, dir, id)
		b, off, size := lastRecord(t, name)
		if err := os.WriteFile(name, b[:off+3], 0o600); err != nil {
			t.Fatal(err)
		}
		return int64(size - recOverhead)
	}
	// badLastRecord: the last record is whole but reads wrong, nothing
	// after it: torn, as Read sees it.
	badLastRecord tamper = func(t *testing.T, dir, id string) int64 {
		name := lastFile(t, dir, id)
		b, off, size := lastRecord(t, name)
		b[off+5] ^= 0x40
		if err := os.WriteFile(name, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return int64(size - recOverhead)
	}
)

// headerlessTail: a rotation made the next tail segment; n bytes of its
// header reached the disk.
func headerlessTail(n int) tamper {
	return func(t *testing.T, dir, id string) int64 {
		tails, err := listTails(dir, id)
		if err != nil {
			t.Fatal(err)
		}
		next := uint64(1)
		if len(tails) > 0 {
			next = tails[len(tails)-1] + 1
		}
		h := appendHeader(nil, header{segment: next, start: 1, head: 1, tail: 1})
		if err := os.WriteFile(tailName(dir, id, next), h[:n], 0o600); err != nil {
			t.Fatal(err)
		}
		return 0
	}
}

func appendTo(t *testing.T, name string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
}

// TestResume records a sequence of chunks with crashes in it (each
// followed by a new runtime's Resume and the agent sending the output
// again from the offset Resume returns) and compares with the same
// sequence recorded in one go: the files are byte for byte the same, and
// Read hands out the same chunks and summary.
func TestResume(t *testing.T) {
	const bound = spec.MinRecordBound
	headFull := append([]chunk{{1, bytes.Repeat([]byte("a"), bound/2)}, {2, bytes.Repeat([]byte("b"), bound/2)}}, script(3, 30, 500)...)
	// straddle's second chunk is split by the head bound.
	straddle := []chunk{{1, bytes.Repeat([]byte("c"), 3000)}, {2, bytes.Repeat([]byte("d"), 3000)}}
	for _, tc := range []struct {
		name    string
		cs      []chunk
		none    bool  // no recording before the first Resume
		crashes []int // crash after cs[:k] for each k
		tamper  tamper
		ask     spec.Record // what the new runtime asks Resume
		// setTotals: tail segments were deleted before a crash, so the
		// per-stream totals come from the caller.
		setTotals bool
	}{
		{name: "no recording", cs: script(1, 50, 500), none: true, crashes: []int{0}},
		{name: "empty recording", cs: script(1, 50, 500), crashes: []int{0}},
		{name: "in the head", cs: script(2, 40, 300), crashes: []int{5}},
		{name: "head exactly full", cs: headFull, crashes: []int{2}},
		{name: "in the first tail", cs: script(4, 60, 300), crashes: []int{40}},
		{name: "past several rotations", cs: script(5, 400, 500), crashes: []int{300}, setTotals: true},
		{name: "resumed twice", cs: script(6, 400, 500), crashes: []int{100, 300}, setTotals: true},
		{name: "at the very end", cs: script(6, 100, 500), crashes: []int{100}, setTotals: true},
		{name: "torn record cut", cs: script(7, 200, 500), crashes: []int{150}, tamper: tornRecord, setTotals: true},
		{name: "torn record in the head", cs: script(7, 200, 100), crashes: []int{10}, tamper: tornRecord},
		{name: "zeros after the last record", cs: script(8, 40, 300), crashes: []int{10}, tamper: trailingZeros},
		{name: "last record lost", cs: script(9, 200, 500), crashes: []int{120}, tamper: lostRecord, setTotals: true},
		{name: "last record lost in the head", cs: script(9, 200, 100), crashes: []int{20}, tamper: lostRecord},
		{name: "last record lost across the head bound", cs: straddle, crashes: []int{2}, tamper: lostRecord},
		{name: "bad last record", cs: script(10, 200, 500), crashes: []int{120}, tamper: badLastRecord, setTotals: true},
		{name: "tail made, no header", cs: script(11, 200, 500), crashes: []int{100}, tamper: headerlessTail(0), setTotals: true},
		{name: "tail made, header torn", cs: script(11, 200, 500), crashes: []int{100}, tamper: headerlessTail(20), setTotals: true},
		{name: "first tail made, no header", cs: headFull, crashes: []int{2}, tamper: headerlessTail(0)},
		{name: "off asked: still resumed", cs: script(12, 200, 500), crashes: []int{150}, ask: spec.Record{Off: true}, setTotals: true},
		{name: "other bounds asked: the headers win", cs: script(12, 200, 500), crashes: []int{150}, ask: spec.Record{Head: 4 * bound, Tail: 4 * bound}, setTotals: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bounds := spec.Record{Head: bound, Tail: bound}
			ref := newStore(t, bounds)
			recordAll(t, ref, "p", spec.Record{}, tc.cs)
			total := upTo(tc.cs, len(tc.cs))

			dir := filepath.Join(t.TempDir(), "journal.rec")
			s, err := Open(dir, bounds, nil)
			if err != nil {
				t.Fatal(err)
			}
			var rec *Recording
			if !tc.none {
				if rec, err = s.Create("p", spec.Record{}); err != nil {
					t.Fatal(err)
				}
			}
			at := int64(0)
			for _, k := range tc.crashes {
				to := upTo(tc.cs, k)
				writeRange(t, rec, tc.cs, at, to)
				crash(rec)
				back := int64(0)
				if tc.tamper != nil {
					back = tc.tamper(t, dir, "p")
				}
				// The next runtime.
				s, err := Open(dir, bounds, nil)
				if err != nil {
					t.Fatal(err)
				}
				var off int64
				rec, off, err = s.Resume("p", tc.ask)
				if err != nil {
					t.Fatal(err)
				}
				if rec == nil {
					t.Fatal("Resume returned no recording")
				}
				if want := to - back; off != want {
					t.Fatalf("Resume after %d bytes (%d taken back): offset %d, want %d", to, back, off, want)
				}
				at = off
			}
			writeRange(t, rec, tc.cs, at, total)
			if tc.setTotals {
				rec.SetTotals(totals(tc.cs))
			}
			if err := rec.Close(); err != nil {
				t.Fatal(err)
			}

			want, got := files(t, ref.Path(), "p"), files(t, dir, "p")
			if len(want) != len(got) {
				t.Fatalf("files %v, want %v", keys(got), keys(want))
			}
			for name, b := range want {
				if !bytes.Equal(got[name], b) {
					t.Fatalf("%s: %d bytes differ from the one-go recording's %d", name, len(got[name]), len(b))
				}
			}
			wantChunks, wantSum, err := chunks(t, ref.Path(), "p")
			if err != nil {
				t.Fatal(err)
			}
			gotChunks, gotSum, err := chunks(t, dir, "p")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(gotChunks, wantChunks) || gotSum != wantSum {
				t.Fatalf("read %d chunks, %+v; the one-go recording reads %d chunks, %+v", len(gotChunks), gotSum, len(wantChunks), wantSum)
			}
			// And it reads as the output should: the head, one gap, the
			// last Tail bytes.
			f, gaps, sum, err := readAll(t, dir, "p")
			if err != nil {
				t.Fatal(err)
			}
			all := flatten(tc.cs)
			h := min(total, bound)
			tl := min(total-h, bound)
			wantData := append(append([]byte(nil), all.data[:h]...), all.data[total-tl:]...)
			if !bytes.Equal(f.data, wantData) || !sum.Complete || sum.Torn || sumOf(gaps) != total-h-tl || len(gaps) > 1 {
				t.Fatalf("read %d bytes, gaps %v, %+v: want the first %d and the last %d of %d, complete", len(f.data), gaps, sum, h, tl, total)
			}
			if so, se := totals(tc.cs); sum.StdoutBytes != so || sum.StderrBytes != se {
				t.Fatalf("summary %+v, want stdout %d, stderr %d", sum, so, se)
			}
		})
	}
}

func keys(m map[string][]byte) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// TestResumeRefuses: a recording Resume cannot append to is an error, and
// its files are left as they were.
func TestResumeRefuses(t *testing.T) {
	const bound = spec.MinRecordBound
	bounds := spec.Record{Head: bound, Tail: bound}
	// crashed records cs and crashes.
	crashed := func(t *testing.T, s *Store, cs []chunk) {
		rec, err := s.Create("p", spec.Record{})
		if err != nil {
			t.Fatal(err)
		}
		writeRange(t, rec, cs, 0, upTo(cs, len(cs)))
		crash(rec)
	}
	flip := func(t *testing.T, name string, off int) {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		b[off] ^= 0x5a
		if err := os.WriteFile(name, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		make    func(t *testing.T, s *Store)
		code    spec.Code
		corrupt bool   // the error wraps ErrCorrupt
		file    string // the file the error names
	}{
		{"a corrupt record in the head", func(t *testing.T, s *Store) {
			crashed(t, s, script(1, 5, 200))
			flip(t, headName(s.Path(), "p"), headerSize+7)
		}, spec.CodeJournal, true, "p.rec"},
		{"a corrupt record in the head under its tails", func(t *testing.T, s *Store) {
			crashed(t, s, script(1, 100, 500))
			flip(t, headName(s.Path(), "p"), headerSize+7)
		}, spec.CodeJournal, true, "p.rec"},
		{"a corrupt record in the last tail", func(t *testing.T, s *Store) {
			crashed(t, s, script(2, 100, 200))
			flip(t, lastFile(t, s.Path(), "p"), headerSize+7)
		}, spec.CodeJournal, true, ".rec."},
		{"a corrupt tail header", func(t *testing.T, s *Store) {
			crashed(t, s, script(2, 100, 200))
			flip(t, lastFile(t, s.Path(), "p"), 20)
		}, spec.CodeJournal, true, ".rec."},
		{"a corrupt head header", func(t *testing.T, s *Store) {
			crashed(t, s, script(3, 5, 200))
			flip(t, headName(s.Path(), "p"), 20)
		}, spec.CodeJournal, true, "p.rec"},
		{"a head of zeros", func(t *testing.T, s *Store) {
			if err := os.WriteFile(headName(s.Path(), "p"), make([]byte, 100), 0o600); err != nil {
				t.Fatal(err)
			}
		}, spec.CodeJournal, true, "p.rec"},
		{"bounds out of range in the header", func(t *testing.T, s *Store) {
			b := appendHeader(nil, header{head: 10, tail: bound})
			if err := os.WriteFile(headName(s.Path(), "p"), appendRecord(b, TypeStdout, []byte("x")), 0o600); err != nil {
				t.Fatal(err)
			}
		}, spec.CodeJournal, true, "p.rec"},
		{"tails without their head", func(t *testing.T, s *Store) {
			crashed(t, s, script(4, 100, 200))
			_ = os.Remove(headName(s.Path(), "p"))
		}, spec.CodeJournal, false, "p.rec"},
		{"complete", func(t *testing.T, s *Store) {
			recordAll(t, s, "p", spec.Record{}, script(5, 100, 200))
		}, spec.CodeConflict, false, ".rec"},
		{"complete, end record in the head", func(t *testing.T, s *Store) {
			recordAll(t, s, "p", spec.Record{}, script(5, 3, 200))
		}, spec.CodeConflict, false, "p.rec"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, bounds)
			tc.make(t, s)
			before := files(t, s.Path(), "p")
			s2, err := Open(s.Path(), bounds, nil)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 { // a failed Resume leaves nothing behind: again, the same
				rec, off, err := s2.Resume("p", spec.Record{})
				if rec != nil || off != 0 || !spec.IsCode(err, tc.code) {
					t.Fatalf("Resume: %v, %d, %v; want a %s error", rec, off, err, tc.code)
				}
				if errors.Is(err, ErrCorrupt) != tc.corrupt {
					t.Fatalf("Resume: %v; wrapping ErrCorrupt: want %v", err, tc.corrupt)
				}
				if !strings.Contains(err.Error(), tc.file) {
					t.Fatalf("Resume: %v; want it to name %s", err, tc.file)
				}
			}
			if after := files(t, s.Path(), "p"); !reflect.DeepEqual(after, before) {
				t.Fatalf("the files changed: %v, were %v", keys(after), keys(before))
			}
		})
	}
}

// TestResumeLive: a recording this store has open is not resumed; closed,
// it is not either (complete); a crashed one is, once.
func TestResumeLive(t *testing.T) {
	s := newStore(t, spec.Record{})
	rec, err := s.Create("p", spec.Record{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Write(TypeStdout, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Resume("p", spec.Record{}); !spec.IsCode(err, spec.CodeConflict) {
		t.Fatalf("Resume of an open recording: %v, want conflict", err)
	}
	crash(rec)
	s2, err := Open(s.Path(), spec.Record{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec2, off, err := s2.Resume("p", spec.Record{})
	if err != nil || off != 5 {
		t.Fatalf("Resume: %d, %v", off, err)
	}
	if _, _, err := s2.Resume("p", spec.Record{}); !spec.IsCode(err, spec.CodeConflict) {
		t.Fatalf("a second Resume of a resumed recording: %v, want conflict", err)
	}
	if err := rec2.Write(TypeStderr, []byte(" world")); err != nil {
		t.Fatal(err)
	}
	if err := rec2.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s2.Resume("p", spec.Record{}); !spec.IsCode(err, spec.CodeConflict) {
		t.Fatalf("Resume of a complete recording: %v, want conflict", err)
	}
	got, _, sum, err := readAll(t, s.Path(), "p")
	if err != nil || string(got.data) != "hello world" || !sum.Complete || sum.StdoutBytes != 5 || sum.StderrBytes != 6 {
		t.Fatalf("read %q, %+v, %v", got.data, sum, err)
	}
}

// TestResumeOff: with no recording, off records nothing (as Create); a
// recording that exists is resumed whatever the runtime's default says.
func TestResumeOff(t *testing.T) {
	for _, tc := range []struct {
		name    string
		def, r  spec.Record
		existed bool
		records bool
	}{
		{"process off, no recording", spec.Record{}, spec.Record{Off: true}, false, false},
		{"runtime off, no recording", spec.Record{Off: true}, spec.Record{}, false, false},
		{"process off, a recording", spec.Record{}, spec.Record{Off: true}, true, true},
		{"runtime off, a recording", spec.Record{Off: true}, spec.Record{}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, spec.Record{})
			if tc.existed {
				rec, err := s.Create("p", spec.Record{})
				if err != nil {
					t.Fatal(err)
				}
				if err := rec.Write(TypeStdout, []byte("before")); err != nil {
					t.Error(err)
				}
				crash(rec)
			}
			s2, err := Open(s.Path(), tc.def, nil)
			if err != nil {
				t.Fatal(err)
			}
			rec, off, err := s2.Resume("p", tc.r)
			if err != nil || (rec != nil) != tc.records {
				t.Fatalf("Resume: %v, %v; want a recording: %v", rec, err, tc.records)
			}
			if !tc.records {
				if off != 0 {
					t.Fatalf("offset %d with no recording", off)
				}
				if _, err := Read(s.Path(), "p", func(Chunk) error { return nil }); !spec.IsCode(err, spec.CodeNotFound) {
					t.Fatalf("read: %v, want not_found", err)
				}
				return
			}
			if err := rec.Write(TypeStdout, []byte(" after")); err != nil {
				t.Fatal(err)
			}
			if err := rec.Close(); err != nil {
				t.Fatal(err)
			}
			got, _, sum, err := readAll(t, s.Path(), "p")
			if err != nil || string(got.data) != "before after" || !sum.Complete {
				t.Fatalf("read %q, %+v, %v", got.data, sum, err)
			}
		})
	}
}

// TestSetTotals: the end record carries the totals SetTotals set, later
// writes added; a resumed recording that lost tail segments knows only the
// totals on disk until SetTotals.
func TestSetTotals(t *testing.T) {
	t.Run("set, then written", func(t *testing.T) {
		s := newStore(t, spec.Record{})
		rec, err := s.Create("p", spec.Record{})
		if err != nil {
			t.Fatal(err)
		}
		if err := rec.Write(TypeStdout, []byte("abc")); err != nil {
			t.Fatal(err)
		}
		if err := rec.Write(TypeStderr, []byte("de")); err != nil {
			t.Fatal(err)
		}
		rec.SetTotals(1, 4)
		rec.SetTotals(-1, 6) // ignored
		if err := rec.Write(TypeStdout, []byte("xy")); err != nil {
			t.Fatal(err)
		}
		if err := rec.Close(); err != nil {
			t.Fatal(err)
		}
		rec.SetTotals(100, 100) // closed: ignored
		var nilRec *Recording
		nilRec.SetTotals(1, 1)
		_, _, sum, err := readAll(t, s.Path(), "p")
		if err != nil || sum.StdoutBytes != 3 || sum.StderrBytes != 4 || sum.Recorded != 7 || sum.Missing != 0 {
			t.Fatalf("summary %+v, %v: want stdout 3, stderr 4, recorded 7", sum, err)
		}
	})
	t.Run("resumed after deleted segments", func(t *testing.T) {
		const bound = spec.MinRecordBound
		bounds := spec.Record{Head: bound, Tail: bound}
		cs := script(21, 300, 500)
		total := upTo(cs, len(cs))
		so, se := totals(cs)
		for _, set := range []bool{false, true} {
			s := newStore(t, bounds)
			rec, err := s.Create("p", spec.Record{})
			if err != nil {
				t.Fatal(err)
			}
			writeRange(t, rec, cs, 0, upTo(cs, 250))
			crash(rec)
			s2, _ := Open(s.Path(), bounds, nil)
			rec, off, err := s2.Resume("p", spec.Record{})
			if err != nil {
				t.Fatal(err)
			}
			writeRange(t, rec, cs, off, total)
			if set {
				rec.SetTotals(so, se)
			}
			if err := rec.Close(); err != nil {
				t.Fatal(err)
			}
			_, gaps, sum, err := readAll(t, s.Path(), "p")
			if err != nil || !sum.Complete || sumOf(gaps) != total-2*bound {
				t.Fatalf("summary %+v, gaps %v, %v", sum, gaps, err)
			}
			if set != (sum.StdoutBytes == so && sum.StderrBytes == se) {
				t.Fatalf("SetTotals %v: summary stdout %d, stderr %d; the output's %d, %d", set, sum.StdoutBytes, sum.StderrBytes, so, se)
			}
			if !set && sum.StdoutBytes+sum.StderrBytes >= total {
				t.Fatalf("without SetTotals the totals %d+%d cover the deleted segments' %d bytes", sum.StdoutBytes, sum.StderrBytes, total)
			}
		}
	})
}

// TestResumeAfterCutEnd: a Close whose gap record reached the disk and
// whose end record did not: the gap counts in the offset and, once, in the
// end record's dropped bytes.
func TestResumeAfterCutEnd(t *testing.T) {
	s := newStore(t, spec.Record{})
	rec, err := s.Create("p", spec.Record{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Write(TypeStdout, []byte("kept")); err != nil {
		t.Fatal(err)
	}
	crash(rec)
	endRec := appendRecord(nil, TypeEnd, endPayload(end{stdout: 14}))
	appendTo(t, headName(s.Path(), "p"), append(appendRecord(nil, TypeGap, be64(10)), endRec[:7]...))
	s2, _ := Open(s.Path(), spec.Record{}, nil)
	rec, off, err := s2.Resume("p", spec.Record{})
	if err != nil || off != 14 {
		t.Fatalf("Resume: offset %d, %v; want 14", off, err)
	}
	if err := rec.Write(TypeStdout, []byte("later")); err != nil {
		t.Fatal(err)
	}
	rec.SetTotals(19, 0)
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	got, gaps, sum, err := readAll(t, s.Path(), "p")
	if err != nil || string(got.data) != "keptlater" || !reflect.DeepEqual(gaps, []int64{10}) {
		t.Fatalf("read %q, gaps %v, %v", got.data, gaps, err)
	}
	if !sum.Complete || sum.Dropped != 10 || sum.Missing != 10 || sum.StdoutBytes != 19 {
		t.Fatalf("summary %+v: want complete, 10 dropped and missing, stdout 19", sum)
	}
}

// TestSuspendThenResume: a runtime that closes suspends a live process's
// recording (no end record); a reader sees it unfinished, and the next
// runtime resumes it where it stands.
func TestSuspendThenResume(t *testing.T) {
	s := newStore(t, spec.Record{})
	rec, err := s.Create("p", spec.Record{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Write(TypeStdout, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := rec.Suspend(); err != nil {
		t.Fatal(err)
	}
	if _, _, sum, err := readAll(t, s.Path(), "p"); err != nil || sum.Complete {
		t.Fatalf("a suspended recording reads %+v %v, want not complete", sum, err)
	}
	rec2, off, err := s.Resume("p", spec.Record{})
	if err != nil || off != 5 {
		t.Fatalf("Resume after Suspend: %d, %v", off, err)
	}
	if err := rec2.Write(TypeStdout, []byte(" again")); err != nil {
		t.Fatal(err)
	}
	if err := rec2.Close(); err != nil {
		t.Fatal(err)
	}
	got, _, sum, err := readAll(t, s.Path(), "p")
	if err != nil || string(got.data) != "hello again" || !sum.Complete || sum.StdoutBytes != 11 {
		t.Fatalf("read %q, %+v, %v", got.data, sum, err)
	}
}
