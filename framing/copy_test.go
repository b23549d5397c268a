package framing

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/docker/docker/pkg/stdcopy"
	"github.com/stockade/stockade/spec"
)

func TestCopyCoalescesRuns(t *testing.T) {
	in := cat(f(Stdout, "a"), f(Stdout, ""), f(Stdout, "b"), f(Stdout, "c"), f(Stderr, "x"), f(Stderr, "y"), f(Stdout, "d"))
	var sw splitWriters
	n, err := Copy(sw.stream(Stdout), sw.stream(Stderr), bytes.NewReader(in))
	if err != nil || n != 6 {
		t.Fatalf("Copy = %d, %v", n, err)
	}
	if got := sw.tr.String(); got != "1:abc|2:xy|1:d" {
		t.Fatalf("transcript %q", got)
	}
	if sw.writes != 3 {
		t.Fatalf("%d writes, want 3 (one per run)", sw.writes)
	}
}

func TestCopyWrittenOnError(t *testing.T) {
	in := cat(f(Stdout, "hello"), f(Stderr, "world"), f(Stdout, "more"))
	boom := errors.New("pipe closed")
	cases := []struct {
		name    string
		stdout  io.Writer
		stderr  io.Writer
		written int64
		is      error
	}{
		{"writer error after partial write", &limitWriter{n: 8}, &limitWriter{n: 3, err: boom}, 5 + 3, boom},
		{"short write", &limitWriter{n: 8}, &limitWriter{n: 2, short: true}, 5 + 2, io.ErrShortWrite},
		{"stdout fails first", &limitWriter{n: 0, err: boom}, io.Discard, 0, boom},
		{"nil writers discard", nil, nil, 14, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n, err := Copy(tc.stdout, tc.stderr, bytes.NewReader(in))
			if n != tc.written || !errors.Is(err, tc.is) || (tc.is == nil) != (err == nil) {
				t.Fatalf("Copy = %d, %v; want %d, %v", n, err, tc.written, tc.is)
			}
		})
	}
	t.Run("invalid write count", func(t *testing.T) {
		w := writerFunc(func(p []byte) (int, error) { return len(p) + 1, nil })
		if _, err := Copy(w, w, bytes.NewReader(in)); !errors.Is(err, errInvalidWrite) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("decode error after output", func(t *testing.T) {
		var out bytes.Buffer
		n, err := Copy(&out, io.Discard, bytes.NewReader(cat(f(Stdout, "kept"), []byte{1, 0, 0})))
		if n != 4 || out.String() != "kept" || !spec.IsCode(err, spec.CodeStreamFailure) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("Copy = %d, %v, out %q", n, err, out.String())
		}
	})
}

// limitWriter accepts n bytes, then fails with err, or reports a short write.
type limitWriter struct {
	n     int
	err   error
	short bool
}

func (w *limitWriter) Write(p []byte) (int, error) {
	if len(p) <= w.n {
		w.n -= len(p)
		return len(p), nil
	}
	k := w.n
	w.n = 0
	if w.short {
		return k, nil
	}
	return k, w.err
}

// TestCopyMatchesStdCopy: on well-formed input of stdout and stderr frames,
// Copy and stdcopy.StdCopy write the same bytes and count the same.
func TestCopyMatchesStdCopy(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	in, _, _ := genFrames(rng, 1<<20, 1, 40_000)
	var a1, a2, b1, b2 bytes.Buffer
	n1, err1 := Copy(&a1, &a2, iotest.HalfReader(bytes.NewReader(in)))
	n2, err2 := stdcopy.StdCopy(&b1, &b2, iotest.HalfReader(bytes.NewReader(in)))
	if err1 != nil || err2 != nil || n1 != n2 || !bytes.Equal(a1.Bytes(), b1.Bytes()) || !bytes.Equal(a2.Bytes(), b2.Bytes()) {
		t.Fatalf("Copy %d %v, StdCopy %d %v, outputs equal: %v %v", n1, err1, n2, err2,
			bytes.Equal(a1.Bytes(), b1.Bytes()), bytes.Equal(a2.Bytes(), b2.Bytes()))
	}
	// Where stdcopy is lenient, Copy is not.
	torn := in[:len(in)-1]
	if _, err := stdcopy.StdCopy(io.Discard, io.Discard, bytes.NewReader(torn)); err != nil {
		t.Fatalf("stdcopy changed: %v", err)
	}
	if _, err := Copy(io.Discard, io.Discard, bytes.NewReader(torn)); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("torn input: %v", err)
	}
}

func TestEncoder(t *testing.T) {
	t.Run("splits long payloads", func(t *testing.T) {
		var buf bytes.Buffer
		e := NewEncoderSize(&buf, 4)
		if err := e.WriteFrame(Stderr, []byte("abcdefghij")); err != nil {
			t.Fatal(err)
		}
		want := cat(f(Stderr, "abcd"), f(Stderr, "efgh"), f(Stderr, "ij"))
		if !bytes.Equal(buf.Bytes(), want) {
			t.Fatalf("got % x", buf.Bytes())
		}
	})
	t.Run("empty payload is one empty frame", func(t *testing.T) {
		var buf bytes.Buffer
		if err := NewEncoder(&buf).WriteFrame(Stdout, nil); err != nil || !bytes.Equal(buf.Bytes(), hdr(1, 0, 0, 0, 0)) {
			t.Fatalf("% x %v", buf.Bytes(), err)
		}
	})
	t.Run("writes per frame", func(t *testing.T) {
		var writes []int
		w := writerFunc(func(p []byte) (int, error) { writes = append(writes, len(p)); return len(p), nil })
		e := NewEncoder(w)
		_ = e.WriteFrame(Stdout, make([]byte, smallFrame))
		_ = e.WriteFrame(Stdout, make([]byte, smallFrame+1))
		_ = e.WriteFrame(Stdout, make([]byte, DefaultMaxFrame+1))
		want := []int{8 + smallFrame, 8, smallFrame + 1, 8, DefaultMaxFrame, 9}
		if len(writes) != len(want) {
			t.Fatalf("writes %v, want %v", writes, want)
		}
		for i := range want {
			if writes[i] != want[i] {
				t.Fatalf("writes %v, want %v", writes, want)
			}
		}
	})
	t.Run("bad id", func(t *testing.T) {
		var buf bytes.Buffer
		err := NewEncoder(&buf).WriteFrame(4, []byte("x"))
		if !spec.IsCode(err, spec.CodeInvalidArgument) || buf.Len() != 0 {
			t.Fatalf("err %v, wrote %d", err, buf.Len())
		}
	})
	t.Run("writer errors", func(t *testing.T) {
		boom := errors.New("boom")
		if err := NewEncoder(&limitWriter{n: 3, err: boom}).WriteFrame(Stdout, []byte("x")); err != boom { //nolint:errorlint // the writer's error is returned as it is (WriteFrame's doc): what this checks
			t.Fatalf("err %v", err)
		}
		if err := NewEncoder(&limitWriter{n: 3, short: true}).WriteFrame(Stdout, []byte("x")); !errors.Is(err, io.ErrShortWrite) {
			t.Fatalf("err %v", err)
		}
		if err := NewEncoder(&limitWriter{n: 8, short: true}).WriteFrame(Stdout, make([]byte, 2000)); !errors.Is(err, io.ErrShortWrite) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("stdcopy reads what we write", func(t *testing.T) {
		var buf bytes.Buffer
		e := NewEncoder(&buf)
		_ = e.WriteFrame(Stdout, []byte(strings.Repeat("o", 70_000)))
		_ = e.WriteFrame(Stderr, []byte("e"))
		var o, s bytes.Buffer
		if n, err := stdcopy.StdCopy(&o, &s, &buf); err != nil || n != 70_001 || o.Len() != 70_000 || s.String() != "e" {
			t.Fatalf("stdcopy: %d %v", n, err)
		}
	})
}

// genFrames appends frames of random stdout/stderr payloads of minLen..maxLen
// bytes until the input holds at least size bytes. About three frames in
// four are stdout. It returns the input, the frame count and the payload
// byte count.
func genFrames(rng *rand.Rand, size, minLen, maxLen int) (in []byte, frames, payload int) {
	in = make([]byte, 0, size+maxLen+HeaderLen)
	var pat [256]byte
	for i := range pat {
		pat[i] = byte(i)
	}
	for len(in) < size {
		id := Stdout
		if rng.IntN(4) == 0 {
			id = Stderr
		}
		n := minLen + rng.IntN(maxLen-minLen+1)
		in = append(in, byte(id), 0, 0, 0, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
		for k := n; k > 0; {
			c := min(k, len(pat))
			in = append(in, pat[:c]...)
			k -= c
		}
		frames++
		payload += n
	}
	return in, frames, payload
}
