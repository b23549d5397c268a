package recorder

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stockade/stockade/spec"
)

// chunk is a write in a test: a stream and its bytes.
type chunk struct {
	stream byte
	data   []byte
}

// script makes n chunks of sizes drawn from [1, max], streams alternating
// at random, bytes numbered so any misplaced byte shows.
func script(seed uint64, n, maxSize int) []chunk {
	r := rand.New(rand.NewPCG(seed, 1))
	var out []chunk
	k := 0
	for range n {
		size := 1 + r.IntN(maxSize)
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(k*7 + k>>8)
			k++
		}
		out = append(out, chunk{stream: byte(1 + r.IntN(2)), data: b})
	}
	return out
}

// flat is an output as bytes with their stream, one per byte.
type flat struct {
	data    []byte
	streams []byte
}

func flatten(cs []chunk) flat {
	var f flat
	for _, c := range cs {
		f.data = append(f.data, c.data...)
		f.streams = append(f.streams, bytes.Repeat([]byte{c.stream}, len(c.data))...)
	}
	return f
}

func newStore(t *testing.T, def spec.Record) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "journal.rec"), def, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func recordAll(t *testing.T, s *Store, id string, r spec.Record, cs []chunk) {
	t.Helper()
	rec, err := s.Create(id, r)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if err := rec.Write(c.stream, c.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
}

// readAll reads a recording back into the flat output it shows, gaps as
// their byte counts.
func readAll(t *testing.T, dir, id string) (flat, []int64, Summary, error) {
	t.Helper()
	var f flat
	var gaps []int64
	sum, err := Read(dir, id, func(c Chunk) error {
		if int64(len(f.data))+sumOf(gaps) != c.Offset {
			t.Fatalf("chunk at offset %d, after %d bytes and gaps %v", c.Offset, len(f.data), gaps)
		}
		if c.Stream == 0 {
			gaps = append(gaps, c.Gap)
			return nil
		}
		f.data = append(f.data, c.Data...)
		f.streams = append(f.streams, bytes.Repeat([]byte{c.Stream}, len(c.Data))...)
		return nil
	})
	return f, gaps, sum, err
}

func sumOf(xs []int64) int64 {
	var n int64
	for _, x := range xs {
		n += x
	}
	return n
}

func TestBounds(t *testing.T) {
	const head, tail = 4 << 10, 8 << 10
	cases := []struct {
		name     string
		chunks   []chunk
		rec      spec.Record
		wantHead int64 // bytes kept from the start
		wantTail int64 // bytes kept from the end
	}{
		{"empty", nil, spec.Record{}, 0, 0},
		{"under the head", script(1, 3, 1000), spec.Record{}, -1, 0},
		{"head exactly", []chunk{{1, make([]byte, head)}}, spec.Record{}, head, 0},
		{"head and a little tail", []chunk{{1, bytes.Repeat([]byte("a"), 3000)}, {2, bytes.Repeat([]byte("b"), 3000)}}, spec.Record{}, head, -1},
		{"many rotations", script(3, 500, 3000), spec.Record{}, head, tail},
		{"chunks larger than the tail", script(4, 20, 3*tail), spec.Record{}, head, tail},
		{"per-process larger bounds", script(5, 500, 3000), spec.Record{Head: 2 * head, Tail: 4 * tail}, 2 * head, 4 * tail},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, spec.Record{Head: head, Tail: tail})
			recordAll(t, s, "p1", tc.rec, tc.chunks)
			want := flatten(tc.chunks)
			n := int64(len(want.data))
			h, tl := tc.wantHead, tc.wantTail
			if h < 0 {
				h = n
			}
			if tl < 0 {
				tl = n - h
			}
			got, gaps, sum, err := readAll(t, s.Path(), "p1")
			if err != nil {
				t.Fatal(err)
			}
			if !sum.Complete || sum.Torn {
				t.Fatalf("summary %+v: want complete, not torn", sum)
			}
			wantData := append(append([]byte(nil), want.data[:h]...), want.data[n-tl:]...)
			wantStreams := append(append([]byte(nil), want.streams[:h]...), want.streams[n-tl:]...)
			if !bytes.Equal(got.data, wantData) || !bytes.Equal(got.streams, wantStreams) {
				t.Fatalf("got %d bytes, want the first %d and the last %d of %d", len(got.data), h, tl, n)
			}
			if gap := n - h - tl; gap > 0 {
				if len(gaps) != 1 || gaps[0] != gap {
					t.Fatalf("gaps %v, want one of %d", gaps, gap)
				}
			} else if len(gaps) != 0 {
				t.Fatalf("gaps %v, want none", gaps)
			}
			var so, se int64
			for _, c := range tc.chunks {
				if c.stream == 1 {
					so += int64(len(c.data))
				} else {
					se += int64(len(c.data))
				}
			}
			if sum.StdoutBytes != so || sum.StderrBytes != se || sum.Missing != n-h-tl {
				t.Fatalf("summary %+v: want stdout %d, stderr %d, missing %d", sum, so, se, n-h-tl)
			}
			// Bounded on disk: the head, at most two tail segments.
			files, _ := filepath.Glob(filepath.Join(s.Path(), "p1.rec*"))
			var size int64
			for _, f := range files {
				st, _ := os.Stat(f)
				size += st.Size()
			}
			b := s.Bounds(tc.rec)
			limit := b.Head + 2*(b.Tail+3*tail) + int64(len(files))*headerSize + 4096
			if len(files) > 3 || size > limit {
				t.Fatalf("%d files, %d bytes on disk; want at most 3 files, %d bytes", len(files), size, limit)
			}
		})
	}
}

func TestOffRecordsNothing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		def, r  spec.Record
		records bool
	}{
		{"process off", spec.Record{}, spec.Record{Off: true}, false},
		{"runtime off", spec.Record{Off: true}, spec.Record{}, false},
		{"runtime off, process bound", spec.Record{Off: true}, spec.Record{Tail: 8 << 10}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, tc.def)
			rec, err := s.Create("p", tc.r)
			if err != nil {
				t.Fatal(err)
			}
			if (rec != nil) != tc.records {
				t.Fatalf("recording %v, want %v", rec != nil, tc.records)
			}
			// A nil recording takes writes and closes.
			if err := rec.Write(1, []byte("x")); err != nil {
				t.Fatal(err)
			}
			if err := rec.Close(); err != nil {
				t.Fatal(err)
			}
			_, err = Read(s.Path(), "p", func(Chunk) error { return nil })
			if got := err == nil; got != tc.records {
				t.Fatalf("read: %v", err)
			}
			if !tc.records && !spec.IsCode(err, spec.CodeNotFound) {
				t.Fatalf("read of no recording: %v, want not_found", err)
			}
		})
	}
}

func TestBadBoundsAndIDs(t *testing.T) {
	s := newStore(t, spec.Record{})
	for _, tc := range []struct {
		id string
		r  spec.Record
	}{
		{"p", spec.Record{Head: -1}},
		{"p", spec.Record{Tail: 10}},
		{"p", spec.Record{Off: true, Tail: 8 << 10}},
		{"p", spec.Record{Head: spec.MaxRecordBound + 1}},
		{"../x", spec.Record{}},
		{"", spec.Record{}},
	} {
		if _, err := s.Create(tc.id, tc.r); !spec.IsCode(err, spec.CodeInvalidArgument) {
			t.Errorf("Create(%q, %+v): %v, want invalid_argument", tc.id, tc.r, err)
		}
	}
	if _, err := Read(s.Path(), "a/b", nil); !spec.IsCode(err, spec.CodeInvalidArgument) {
		t.Errorf("Read of a bad id: %v", err)
	}
}

// lastFile is the recording's newest segment.
func lastFile(t *testing.T, dir, id string) string {
	t.Helper()
	tails, err := listTails(dir, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(tails) == 0 {
		return headName(dir, id)
	}
	return tailName(dir, id, tails[len(tails)-1])
}

func TestTornTail(t *testing.T) {
	const head, tail = 4 << 10, 8 << 10
	for _, tc := range []struct {
		name   string
		chunks []chunk
		cut    int  // bytes cut from the newest segment's end
		zeros  int  // zero bytes appended after the cut
		head   bool // cut the head, not the newest tail
	}{
		{"inside the end record", script(1, 3, 100), 3, 0, false},
		{"inside a data record", script(1, 3, 100), 40, 0, false},
		{"inside a header", script(1, 3, 100), 1000, 0, false}, // less than a header left
		{"zeros after a cut", script(1, 3, 100), 50, 300, false},
		{"tail segment cut", script(2, 100, 1000), 700, 0, false},
		{"head cut under its tails", script(2, 100, 1000), 100, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, spec.Record{Head: head, Tail: tail})
			recordAll(t, s, "p", spec.Record{}, tc.chunks)
			name := lastFile(t, s.Path(), "p")
			if tc.head {
				name = headName(s.Path(), "p")
			}
			b, _ := os.ReadFile(name)
			b = b[:max(0, len(b)-tc.cut)]
			b = append(b, make([]byte, tc.zeros)...)
			if err := os.WriteFile(name, b, 0o600); err != nil {
				t.Fatal(err)
			}
			got, _, sum, err := readAll(t, s.Path(), "p")
			if err != nil {
				t.Fatalf("a torn recording must read: %v", err)
			}
			if tc.head {
				// The tails still place themselves: the head's lost bytes
				// are a gap; the recording is complete.
				if !sum.Complete || sum.Missing == 0 {
					t.Fatalf("summary %+v: want complete with a gap", sum)
				}
				return
			}
			if sum.Complete || !sum.Torn {
				t.Fatalf("summary %+v: want torn, not complete", sum)
			}
			// What was read is what was written, up to the cut.
			want := flatten(tc.chunks)
			if !bytes.HasPrefix(want.data, got.data[:min(len(got.data), 4096)]) {
				t.Fatalf("the head read back differs from what was written")
			}
		})
	}
}

func TestCorruption(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   func(size int) int // the offset of the byte flipped
	}{
		{"header", func(int) int { return 10 }},
		{"first record's payload", func(int) int { return headerSize + 7 }},
		{"first record's type", func(int) int { return headerSize }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, spec.Record{})
			recordAll(t, s, "p", spec.Record{}, script(9, 5, 200))
			name := headName(s.Path(), "p")
			b, _ := os.ReadFile(name)
			b[tc.at(len(b))] ^= 0x5a
			if err := os.WriteFile(name, b, 0o600); err != nil {
				t.Fatal(err)
			}
			_, _, _, err := readAll(t, s.Path(), "p")
			if !errors.Is(err, ErrCorrupt) || !spec.IsCode(err, spec.CodeJournal) {
				t.Fatalf("read: %v, want a journal error wrapping ErrCorrupt", err)
			}
		})
	}
	t.Run("chunks before the corruption are handed out", func(t *testing.T) {
		s := newStore(t, spec.Record{})
		cs := script(9, 5, 200)
		recordAll(t, s, "p", spec.Record{}, cs)
		name := headName(s.Path(), "p")
		b, _ := os.ReadFile(name)
		// Flip a byte of the third record's payload.
		off := headerSize + recOverhead + len(cs[0].data) + recOverhead + len(cs[1].data) + 5
		b[off] ^= 1
		if err := os.WriteFile(name, b, 0o600); err != nil {
			t.Fatal(err)
		}
		got, _, _, err := readAll(t, s.Path(), "p")
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("read: %v", err)
		}
		if want := flatten(cs[:2]); !bytes.Equal(got.data, want.data) {
			t.Fatalf("got %d bytes before the corruption, want %d", len(got.data), len(want.data))
		}
	})
}

// TestConcurrentReader reads a recording again and again while it is
// written and rotated: every read succeeds and shows what was written, at
// its offsets.
func TestConcurrentReader(t *testing.T) {
	const head, tail = 4 << 10, 4 << 10
	s := newStore(t, spec.Record{Head: head, Tail: tail})
	cs := script(7, 2000, 700)
	want := flatten(cs)
	rec, err := s.Create("p", spec.Record{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		for _, c := range cs {
			if err := rec.Write(c.stream, c.data); err != nil {
				t.Error(err)
				return
			}
		}
		if err := rec.Close(); err != nil {
			t.Error(err)
		}
	}()
	reads := 0
	for finished := false; !finished; reads++ {
		select {
		case <-done:
			finished = true
		default:
		}
		_, err := Read(s.Path(), "p", func(c Chunk) error {
			if c.Stream == 0 {
				return nil
			}
			end := c.Offset + int64(len(c.Data))
			if end > int64(len(want.data)) || !bytes.Equal(c.Data, want.data[c.Offset:end]) || !bytes.Equal(bytes.Repeat([]byte{c.Stream}, len(c.Data)), want.streams[c.Offset:end]) {
				return fmt.Errorf("chunk at %d (%d bytes, stream %d) differs from what was written", c.Offset, len(c.Data), c.Stream)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("read %d: %v", reads, err)
		}
	}
	wg.Wait()
	if _, _, sum, err := readAll(t, s.Path(), "p"); err != nil || !sum.Complete {
		t.Fatalf("final read: %+v %v", sum, err)
	}
}

// TestWriteErrorMarksIncomplete: a failed write is reported once, the
// recording goes on counting (never failing its caller again), and Close
// says it is incomplete.
func TestWriteErrorMarksIncomplete(t *testing.T) {
	s := newStore(t, spec.Record{})
	rec, err := s.Create("p", spec.Record{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Write(1, []byte("kept")); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	_ = rec.cur.Close() // the disk goes away under it
	rec.mu.Unlock()
	if err := rec.Write(1, []byte("lost")); !spec.IsCode(err, spec.CodeJournal) {
		t.Fatalf("write after the failure: %v, want a journal error", err)
	}
	if err := rec.Write(2, []byte("lost too")); err != nil {
		t.Fatalf("a second write reports the failure again: %v", err)
	}
	if err := rec.Close(); err == nil {
		t.Fatal("Close of an incomplete recording says nothing")
	}
	got, _, sum, err := readAll(t, s.Path(), "p")
	if err != nil || string(got.data) != "kept" || sum.Complete {
		t.Fatalf("read back %q, %+v, %v: want the bytes before the failure, not complete", got.data, sum, err)
	}
}

func TestRemoveAndIDs(t *testing.T) {
	s := newStore(t, spec.Record{Head: 4 << 10, Tail: 4 << 10})
	recordAll(t, s, "a", spec.Record{}, script(1, 100, 500))
	recordAll(t, s, "b", spec.Record{}, nil)
	ids, err := s.IDs()
	if err != nil || len(ids) != 2 {
		t.Fatalf("ids %v %v", ids, err)
	}
	if err := s.Remove("a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("a"); err != nil {
		t.Fatalf("removing twice: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(s.Path(), "a.rec*"))
	if len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
	if ids, _ := s.IDs(); len(ids) != 1 || ids[0] != "b" {
		t.Fatalf("ids after remove: %v", ids)
	}
}

// TestSyncEvery: a write arms one sync timer of SyncEvery (at most a
// second); writes until it fires share it; its sync leaves nothing unsynced
// (the new file's directory entry included); the next write arms the next
// one. The timers are fakes fired by hand: nothing here waits.
func TestSyncEvery(t *testing.T) {
	if SyncEvery <= 0 || SyncEvery > time.Second {
		t.Fatalf("SyncEvery %v: a running process's output must be synced at least once a second", SyncEvery)
	}
	s := newStore(t, spec.Record{})
	var delays []time.Duration
	var fire []func()
	s.after = func(d time.Duration, f func()) *time.Timer {
		delays, fire = append(delays, d), append(fire, f)
		tm := time.AfterFunc(time.Hour, f)
		tm.Stop() // never fires by itself: the test fires f
		return tm
	}
	rec, err := s.Create("p1", spec.Record{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Write(TypeStdout, []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := rec.Write(TypeStderr, []byte("b")); err != nil {
		t.Fatal(err)
	}
	if len(fire) != 1 || delays[0] != SyncEvery {
		t.Fatalf("after two writes: timers armed %v, want one of %v", delays, SyncEvery)
	}
	fire[0]()
	rec.mu.Lock()
	pending, dirty := rec.timer != nil, rec.dirDirty || len(rec.retired) > 0
	rec.mu.Unlock()
	if pending || dirty {
		t.Fatalf("after the timer's sync: a timer pending %v, unsynced files or names %v", pending, dirty)
	}
	if err := rec.Write(TypeStdout, []byte("c")); err != nil {
		t.Fatal(err)
	}
	if len(fire) != 2 || delays[1] != SyncEvery {
		t.Fatalf("a write after the sync: timers armed %v, want a second one", delays)
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	fire[1]() // a timer firing after Close does nothing
}

// TestStats: the store counts the bytes its recordings wrote, the bytes
// marked lost in place, and the egress decisions by verdict.
func TestStats(t *testing.T) {
	s := newStore(t, spec.Record{})
	rec, err := s.Create("p1", spec.Record{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Write(TypeStdout, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := rec.Write(TypeStderr, []byte("err")); err != nil {
		t.Fatal(err)
	}
	if _, err := rec.Gap(100); err != nil {
		t.Fatal(err)
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	s.CountDecision("allowed")
	s.CountDecision("allowed")
	s.CountDecision("denied")
	st := s.Stats()
	if st.Recorded != 8 || st.Gaps != 100 || st.Dropped != 0 || st.Decisions["allowed"] != 2 || st.Decisions["denied"] != 1 {
		t.Fatalf("stats %+v", st)
	}
}
