package recorder

import (
	"bytes"
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockade/stockade/spec"
)

// followed is what a Follow handed out: the bytes with their streams, the
// gaps by offset, and whether the offsets ran on without a hole.
type followed struct {
	flat
	gaps map[int64]int64
	from int64
	next int64
	bad  string
}

func (f *followed) chunk(c Chunk) error {
	if f.gaps == nil {
		f.gaps = map[int64]int64{}
		f.next = f.from
	}
	if c.Offset != f.next && f.bad == "" {
		f.bad = "chunk at " + itoa(c.Offset) + ", want " + itoa(f.next)
	}
	if c.Stream == 0 {
		f.gaps[c.Offset] = c.Gap
		f.next = c.Offset + c.Gap
		return nil
	}
	f.data = append(f.data, c.Data...)
	f.streams = append(f.streams, bytes.Repeat([]byte{c.Stream}, len(c.Data))...)
	f.next = c.Offset + int64(len(c.Data))
	return nil
}

func itoa(n int64) string { return string(appendInt(nil, n)) }

func appendInt(b []byte, n int64) []byte {
	if n >= 10 {
		b = appendInt(b, n/10)
	}
	return append(b, byte('0'+n%10))
}

// TestFollowEnded follows recordings that are already complete, from
// several offsets: each byte from the offset on, once, in order, with its
// stream, and the end's totals.
func TestFollowEnded(t *testing.T) {
	cs := script(3, 40, 300)
	want := flatten(cs)
	var stdout, stderr int64
	for _, c := range cs {
		if c.stream == TypeStderr {
			stderr += int64(len(c.data))
		} else {
			stdout += int64(len(c.data))
		}
	}
	s := newStore(t, spec.Record{})
	recordAll(t, s, "p", spec.Record{}, cs)
	total := int64(len(want.data))
	for _, from := range []int64{0, 1, cs[0].len() - 1, cs[0].len(), total / 2, total - 1, total, total + 10} {
		got := followed{from: from}
		sum, err := s.Follow(context.Background(), "p", FollowOptions{From: from}, got.chunk)
		if err != nil {
			t.Fatalf("from %d: %v", from, err)
		}
		if got.bad != "" {
			t.Fatalf("from %d: %s", from, got.bad)
		}
		lo := min(from, total)
		if !bytes.Equal(got.data, want.data[lo:]) || !bytes.Equal(got.streams, want.streams[lo:]) {
			t.Fatalf("from %d: got %d bytes, want the %d from it on", from, len(got.data), total-lo)
		}
		if !sum.Complete || sum.StdoutBytes != stdout || sum.StderrBytes != stderr || sum.Recorded != total-lo || len(got.gaps) != 0 {
			t.Fatalf("from %d: summary %+v gaps %v, want complete with %d/%d", from, sum, got.gaps, stdout, stderr)
		}
	}
}

func (c chunk) len() int64 { return int64(len(c.data)) }

// TestFollowLive follows a recording while it is written, rotated through
// small bounds, with the follower kept in step with the writer: every byte
// written reaches it once, in order, and the end record ends the follow.
func TestFollowLive(t *testing.T) {
	for _, from := range []int64{0, 37} {
		s := newStore(t, spec.Record{})
		bounds := spec.Record{Head: 4096, Tail: 4096}
		rec, err := s.Create("p", bounds)
		if err != nil {
			t.Fatal(err)
		}
		cs := script(5, 80, 400)
		var seen atomic.Int64
		got := followed{from: from}
		type result struct {
			sum Summary
			err error
		}
		done := make(chan result, 1)
		go func() {
			sum, err := s.Follow(context.Background(), "p", FollowOptions{From: from, Poll: time.Hour}, func(c Chunk) error {
				err := got.chunk(c)
				seen.Store(got.next)
				return err
			})
			done <- result{sum, err}
		}()
		written := int64(0)
		for _, c := range cs {
			if err := rec.Write(c.stream, c.data); err != nil {
				t.Fatal(err)
			}
			written += c.len()
			// The follower catches up before the next write, so no tail
			// segment is deleted under it: a write's wake-up (not the
			// hour-long poll) is what moves it.
			waitFor(t, func() bool { return written <= from || seen.Load() >= written })
		}
		if err := rec.Close(); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil || got.bad != "" {
			t.Fatalf("from %d: %v %s", from, r.err, got.bad)
		}
		want := flatten(cs)
		if !bytes.Equal(got.data, want.data[from:]) || !bytes.Equal(got.streams, want.streams[from:]) || len(got.gaps) != 0 {
			t.Fatalf("from %d: got %d bytes and gaps %v, want %d bytes", from, len(got.data), got.gaps, len(want.data)-int(from))
		}
		if !r.sum.Complete || r.sum.Head != 4096 || r.sum.Tail != 4096 {
			t.Fatalf("from %d: summary %+v", from, r.sum)
		}
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10 s")
		}
	}
}

// TestFollowLate starts after rotations deleted the middle of the output:
// the head, a gap where the deleted segments stood, then the tail still on
// disk.
func TestFollowLate(t *testing.T) {
	s := newStore(t, spec.Record{})
	cs := script(7, 200, 400)
	recordAll(t, s, "p", spec.Record{Head: 4096, Tail: 4096}, cs)
	want := flatten(cs)
	got := followed{}
	sum, err := s.Follow(context.Background(), "p", FollowOptions{}, got.chunk)
	if err != nil || got.bad != "" {
		t.Fatal(err, got.bad)
	}
	if len(got.gaps) != 1 {
		t.Fatalf("gaps %v, want one", got.gaps)
	}
	var gapAt, gap int64
	for at, n := range got.gaps {
		gapAt, gap = at, n
	}
	if gapAt < 4096 || !bytes.Equal(got.data[:gapAt], want.data[:gapAt]) {
		t.Fatalf("gap at %d: the head differs or is short", gapAt)
	}
	rest := want.data[gapAt+gap:]
	if !bytes.Equal(got.data[gapAt:], rest) || int64(len(rest)) < 4096 {
		t.Fatalf("after the gap: got %d bytes, want the %d on disk (at least the tail bound)", len(got.data)-int(gapAt), len(rest))
	}
	if !sum.Complete || sum.Missing != gap {
		t.Fatalf("summary %+v, gap %d", sum, gap)
	}
}

// TestFollowEnds covers the ways a follow ends without an end record.
func TestFollowEnds(t *testing.T) {
	t.Run("no recording, ended", func(t *testing.T) {
		s := newStore(t, spec.Record{})
		sum, err := s.Follow(context.Background(), "p", FollowOptions{Ended: func() bool { return true }, EndWait: time.Millisecond}, func(Chunk) error {
			t.Fatal("a chunk of nothing")
			return nil
		})
		if err != nil || sum.Complete || sum.Recorded != 0 {
			t.Fatalf("%+v %v", sum, err)
		}
	})
	t.Run("suspended, ended", func(t *testing.T) {
		s := newStore(t, spec.Record{})
		rec, _ := s.Create("p", spec.Record{})
		_ = rec.Write(TypeStdout, []byte("hello"))
		if err := rec.Suspend(); err != nil {
			t.Fatal(err)
		}
		var got followed
		sum, err := s.Follow(context.Background(), "p", FollowOptions{Ended: func() bool { return true }, EndWait: time.Millisecond}, got.chunk)
		if err != nil || sum.Complete || string(got.data) != "hello" {
			t.Fatalf("%+v %v %q", sum, err, got.data)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		s := newStore(t, spec.Record{})
		rec, _ := s.Create("p", spec.Record{})
		_ = rec.Write(TypeStdout, []byte("hello"))
		ctx, cancel := context.WithCancel(context.Background())
		var got followed
		sum, err := s.Follow(ctx, "p", FollowOptions{}, func(c Chunk) error {
			cancel()
			return got.chunk(c)
		})
		if !spec.IsCode(err, spec.CodeCancelled) || string(got.data) != "hello" || sum.Recorded != 5 {
			t.Fatalf("%+v %v %q", sum, err, got.data)
		}
		_ = rec.Close()
	})
	t.Run("fn fails", func(t *testing.T) {
		s := newStore(t, spec.Record{})
		recordAll(t, s, "p", spec.Record{}, script(1, 5, 10))
		stop := errors.New("stop")
		if _, err := s.Follow(context.Background(), "p", FollowOptions{}, func(Chunk) error { return stop }); !errors.Is(err, stop) {
			t.Fatalf("%v, want fn's error", err)
		}
	})
	t.Run("corrupt", func(t *testing.T) {
		s := newStore(t, spec.Record{})
		recordAll(t, s, "p", spec.Record{}, script(1, 5, 10))
		name := headName(s.Path(), "p")
		b, _ := os.ReadFile(name)
		b[headerSize+6] ^= 1
		if err := os.WriteFile(name, b, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := s.Follow(context.Background(), "p", FollowOptions{}, func(Chunk) error { return nil })
		if !errors.Is(err, ErrCorrupt) || !spec.IsCode(err, spec.CodeJournal) {
			t.Fatalf("%v, want a journal error wrapping ErrCorrupt", err)
		}
	})
	t.Run("bad input", func(t *testing.T) {
		s := newStore(t, spec.Record{})
		for _, tc := range []struct {
			id   string
			from int64
		}{{"../p", 0}, {"p", -1}} {
			if _, err := s.Follow(context.Background(), tc.id, FollowOptions{From: tc.from}, nil); !spec.IsCode(err, spec.CodeInvalidArgument) {
				t.Fatalf("%q from %d: %v, want invalid_argument", tc.id, tc.from, err)
			}
		}
	})
}

// TestFollowCoalesce: joined chunks hand out the same bytes, streams and
// offsets, fewer and none over the bound, whether the recording is read
// ended or live.
func TestFollowCoalesce(t *testing.T) {
	cs := script(11, 300, 200)
	want := flatten(cs)
	s := newStore(t, spec.Record{})
	recordAll(t, s, "p", spec.Record{}, cs)
	for _, from := range []int64{0, 5} {
		got := followed{from: from}
		n, over := 0, 0
		sum, err := s.Follow(context.Background(), "p", FollowOptions{From: from, Coalesce: 1000}, func(c Chunk) error {
			n++
			if len(c.Data) > 1000 {
				over++
			}
			return got.chunk(c)
		})
		if err != nil || got.bad != "" || !sum.Complete {
			t.Fatalf("from %d: %v %s %+v", from, err, got.bad, sum)
		}
		if !bytes.Equal(got.data, want.data[from:]) || !bytes.Equal(got.streams, want.streams[from:]) {
			t.Fatalf("from %d: the bytes or their streams differ", from)
		}
		if n >= len(cs) || over > 0 {
			t.Fatalf("from %d: %d chunks for %d records, %d over the bound", from, n, len(cs), over)
		}
	}
	// Live: a chunk held for joining goes out before the follow waits.
	live := newStore(t, spec.Record{})
	rec, err := live.Create("q", spec.Record{})
	if err != nil {
		t.Fatal(err)
	}
	_ = rec.Write(TypeStdout, []byte("first"))
	seen := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		_, err := live.Follow(context.Background(), "q", FollowOptions{Coalesce: 1 << 20, Poll: time.Hour}, func(c Chunk) error {
			select {
			case seen <- string(c.Data):
			default:
			}
			return nil
		})
		done <- err
	}()
	select {
	case got := <-seen:
		if got != "first" {
			t.Fatalf("first chunk %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a held chunk was not handed out while the follow waited")
	}
	_ = rec.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestFollowForgets: once its followers are gone, a recording's wake-up
// channel is forgotten, written to since or not.
func TestFollowForgets(t *testing.T) {
	s := newStore(t, spec.Record{})
	recordAll(t, s, "p", spec.Record{}, script(1, 3, 10))
	for range 3 {
		if _, err := s.Follow(context.Background(), "p", FollowOptions{}, func(Chunk) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if f, c := s.following(); f != 0 || c != 0 {
		t.Fatalf("%d recordings followed, %d channels held after every follow ended", f, c)
	}
}

// TestFollowResumeCut: a torn record read (not decoded) before a resume
// cut it off and appended after the cut is dropped, and the follow goes on
// with what the resume wrote: every byte once.
func TestFollowResumeCut(t *testing.T) {
	s := newStore(t, spec.Record{})
	rec, err := s.Create("p", spec.Record{})
	if err != nil {
		t.Fatal(err)
	}
	_ = rec.Write(TypeStdout, []byte("hello "))
	if err := rec.Suspend(); err != nil {
		t.Fatal(err)
	}
	// A torn record at the end, as a write cut by a full disk leaves it.
	name := headName(s.Path(), "p")
	torn := appendRecord(nil, TypeStdout, []byte("TORN"))[:7]
	fh, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.Write(torn); err != nil {
		t.Fatal(err)
	}
	_ = fh.Close()
	var got followed
	seen := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		_, err := s.Follow(context.Background(), "p", FollowOptions{Poll: 10 * time.Millisecond}, func(c Chunk) error {
			err := got.chunk(c)
			select {
			case seen <- struct{}{}:
			default:
			}
			return err
		})
		done <- err
	}()
	<-seen // "hello " is out; the torn bytes are in the follower's buffer
	time.Sleep(50 * time.Millisecond)
	back, off, err := s.Resume("p", spec.Record{})
	if err != nil || off != 6 {
		t.Fatalf("resume: offset %d, %v", off, err)
	}
	_ = back.Write(TypeStdout, []byte("world"))
	if err := back.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil || got.bad != "" || string(got.data) != "hello world" {
		t.Fatalf("%v %s %q, want every byte once", err, got.bad, got.data)
	}
}
