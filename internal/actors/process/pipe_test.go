package process

import (
	"bytes"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stockade/stockade/spec"
)

func TestPipeRoundTrip(t *testing.T) {
	for _, hwm := range []int{1, 7, 64, 1 << 10} {
		p := newPipe(hwm, nil)
		want := bytes.Repeat([]byte("0123456789abcdef"), 1000)
		go func() {
			for rest := want; len(rest) > 0; {
				n := min(len(rest), 333)
				if _, err := p.Write(rest[:n]); err != nil {
					t.Error(err)
					return
				}
				rest = rest[n:]
			}
			p.CloseWrite(nil)
		}()
		got, err := io.ReadAll(iotest.OneByteReader(p))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("hwm %d: %d bytes, %v", hwm, len(got), err)
		}
	}
}

// TestPipeBackpressure: a writer blocks once hwm bytes wait unread.
func TestPipeBackpressure(t *testing.T) {
	p := newPipe(16, nil)
	var written atomic.Int64
	go func() {
		for range 10 {
			n, _ := p.Write(make([]byte, 8))
			written.Add(int64(n))
		}
	}()
	time.Sleep(50 * time.Millisecond)
	// Waiting shows the bound, never a timing: whatever the scheduler did,
	// no more than hwm bytes (plus a partially accepted write) are taken.
	if w := written.Load(); w > 16 {
		t.Fatalf("%d bytes accepted with nobody reading; credit is 16", w)
	}
	buf := make([]byte, 80)
	n, _ := io.ReadAtLeast(p, buf, 80)
	if n != 80 {
		t.Fatalf("read %d", n)
	}
}

func TestPipeAbandon(t *testing.T) {
	var told atomic.Int32
	p := newPipe(4, func() { told.Add(1) })
	errc := make(chan error, 1)
	go func() {
		_, err := p.Write(make([]byte, 100))
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !spec.IsCode(err, spec.CodeCancelled) {
		t.Fatalf("writer got %v, want cancelled", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if told.Load() != 1 {
		t.Fatalf("abandon told %d times, want once", told.Load())
	}
	if _, err := p.Read(make([]byte, 1)); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("read after close: %v", err)
	}
}

// TestPipeDrainedCloseIsNotAbandon: closing after reading to the end is not
// a cancellation.
func TestPipeDrainedCloseIsNotAbandon(t *testing.T) {
	var told atomic.Int32
	p := newPipe(4, func() { told.Add(1) })
	go func() { _, _ = p.Write([]byte("abc")); p.CloseWrite(nil) }()
	if _, err := io.ReadAll(p); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if told.Load() != 0 {
		t.Fatal("a drained stream's close was taken for an abandon")
	}
}

// TestPipeAbortUnblocksWriter: CloseWrite from the process actor (a
// stopping process whose consumer no longer reads) frees a blocked Write.
func TestPipeAbortUnblocksWriter(t *testing.T) {
	p := newPipe(4, nil)
	stop := spec.Errorf(spec.CodeTimeout, "test", "timed out")
	errc := make(chan error, 1)
	go func() {
		_, err := p.Write(make([]byte, 100))
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond)
	p.CloseWrite(stop)
	if err := <-errc; !errors.Is(err, stop) {
		t.Fatalf("blocked writer got %v", err)
	}
	if _, err := io.ReadFull(p, make([]byte, 4)); err != nil {
		t.Fatalf("reading the buffered bytes: %v", err)
	}
	if _, err := p.Read(make([]byte, 1)); !errors.Is(err, stop) {
		t.Fatalf("reader got %v after the buffered bytes, want the stop error", err)
	}
}

func TestPipeQuietCostsNothing(t *testing.T) {
	p := newPipe(64<<10, nil)
	if p.buf != nil {
		t.Fatal("a pipe allocated its buffer before anything was written")
	}
}

func TestPipeWriteTo(t *testing.T) {
	p := newPipe(100, nil)
	want := bytes.Repeat([]byte("abcdefghij"), 10000)
	go func() {
		for rest := want; len(rest) > 0; {
			n := min(len(rest), 37)
			_, _ = p.Write(rest[:n]) // a failure shows in what the reader gets
			rest = rest[n:]
		}
		p.CloseWrite(nil)
	}()
	var got bytes.Buffer
	n, err := io.Copy(&got, p) // io.Copy takes WriteTo
	if err != nil || n != int64(len(want)) || !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("WriteTo moved %d bytes, %v", n, err)
	}
	// A failure of the stream reaches io.Copy's caller.
	q := newPipe(8, nil)
	stop := spec.Errorf(spec.CodeOutputLimit, "test", "quota")
	go func() { _, _ = q.Write([]byte("xy")); q.CloseWrite(stop) }()
	if _, err := io.Copy(io.Discard, q); !errors.Is(err, stop) {
		t.Fatalf("got %v, want the stream's error", err)
	}
}
