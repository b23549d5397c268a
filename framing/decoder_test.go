package framing

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stockade/stockade/spec"
)

// f builds one frame with a well-formed header.
func f(id StreamID, payload string) []byte { return AppendFrame(nil, id, []byte(payload)) }

// hdr builds a raw header from its eight bytes' parts.
func hdr(b0, b1, b2, b3 byte, n uint32) []byte {
	return []byte{b0, b1, b2, b3, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// transcript renders what a decoder delivered, joining adjacent pieces of one
// stream: "1:hello|2:oops". Piece boundaries are not part of the contract.
type transcript struct {
	b    strings.Builder
	last StreamID
}

func (t *transcript) add(id StreamID, p []byte) {
	if len(p) == 0 {
		return
	}
	if t.b.Len() == 0 || id != t.last {
		if t.b.Len() > 0 {
			t.b.WriteByte('|')
		}
		fmt.Fprintf(&t.b, "%d:", id)
		t.last = id
	}
	t.b.Write(p)
}

func (t *transcript) String() string { return t.b.String() }

// decodeAll drains d with Next, checking the per-piece contract.
func decodeAll(t *testing.T, d *Decoder, chunk int) (string, error) {
	t.Helper()
	var tr transcript
	for range 1 << 20 {
		id, p, err := d.Next()
		if err != nil {
			if p != nil || id != 0 {
				t.Fatalf("Next returned (%v, %q) with error %v", id, p, err)
			}
			return tr.String(), err
		}
		if id != Stdout && id != Stderr {
			t.Fatalf("Next returned stream %v", id)
		}
		if len(p) == 0 || len(p) > chunk {
			t.Fatalf("Next returned a %d-byte piece (chunk %d)", len(p), chunk)
		}
		if cap(p) != len(p) {
			t.Fatalf("piece has spare capacity %d: an append would clobber the buffer", cap(p)-len(p))
		}
		tr.add(id, p)
	}
	t.Fatal("decoder never ended")
	return "", nil
}

// splitWriters records Copy's output as a transcript.
type splitWriters struct {
	tr     transcript
	writes int
	bytes  int64
}

func (s *splitWriters) stream(id StreamID) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		s.writes++
		s.bytes += int64(len(p))
		s.tr.add(id, p)
		return len(p), nil
	})
}

type writerFunc func([]byte) (int, error)

func (w writerFunc) Write(p []byte) (int, error) { return w(p) }

type readerFunc func([]byte) (int, error)

func (r readerFunc) Read(p []byte) (int, error) { return r(p) }

// readers are the adversarial sources every table case runs through.
var readers = []struct {
	name string
	wrap func(io.Reader) io.Reader
}{
	{"plain", func(r io.Reader) io.Reader { return r }},
	{"onebyte", iotest.OneByteReader},
	{"half", iotest.HalfReader},
	{"dataerr", iotest.DataErrReader},
	{"timeout-retried", nil}, // handled specially below
}

var decodeCases = []struct {
	name  string
	in    []byte
	limit int
	want  string    // transcript delivered before the end
	code  spec.Code // "" = clean io.EOF
	is    error     // errors.Is target, if any
	msg   string    // substring of the error message, if any
}{
	{name: "empty", in: nil},
	{name: "one stdout frame", in: f(Stdout, "hello"), want: "1:hello"},
	{name: "interleaved", in: cat(f(Stdout, "out1"), f(Stderr, "err1"), f(Stdout, "out2")), want: "1:out1|2:err1|1:out2"},
	{name: "same stream joins", in: cat(f(Stdout, "ab"), f(Stdout, "cd")), want: "1:abcd"},
	{name: "zero-length frames skipped", in: cat(f(Stdout, ""), f(Stderr, ""), f(Stdout, "x"), f(Stderr, "")), want: "1:x"},
	{name: "only zero-length frames", in: cat(f(Stdout, ""), f(Stdout, "")), want: ""},
	{name: "frame at the limit", in: f(Stderr, "0123456789abcdef"), limit: 16, want: "2:0123456789abcdef"},
	{name: "binary payload", in: f(Stdout, "\x00\x01\x02\xff"), want: "1:\x00\x01\x02\xff"},
	{name: "payload that looks like a header", in: f(Stdout, string(hdr(9, 9, 9, 9, 9))), want: "1:" + string(hdr(9, 9, 9, 9, 9))},

	{name: "stdin rejected", in: cat(f(Stdout, "ok"), f(Stdin, "in")), want: "1:ok", code: spec.CodeStreamFailure,
		msg: "invalid multiplex header [00 00 00 00 00 00 00 02] at offset 10: stream 0 (stdin) is not an output stream"},
	{name: "stream 4", in: f(4, "x"), code: spec.CodeStreamFailure, msg: "unknown stream id 4"},
	{name: "stream 255", in: f(255, "x"), code: spec.CodeStreamFailure, msg: "[ff 00 00 00 00 00 00 01] at offset 0: unknown stream id 255"},
	{name: "padding byte 1", in: hdr(1, 1, 0, 0, 0), code: spec.CodeStreamFailure, msg: "[01 01 00 00 00 00 00 00] at offset 0: nonzero padding"},
	{name: "padding byte 2", in: hdr(2, 0, 0x80, 0, 1), code: spec.CodeStreamFailure, msg: "nonzero padding"},
	{name: "padding byte 3", in: cat(f(Stderr, "e"), hdr(1, 0, 0, 1, 1), []byte("x")), want: "2:e", code: spec.CodeStreamFailure, msg: "at offset 9: nonzero padding"},
	{name: "padding after a same-stream frame", in: cat(f(Stdout, "a"), hdr(1, 0, 1, 0, 1), []byte("x")), want: "1:a", code: spec.CodeStreamFailure,
		msg: "[01 00 01 00 00 00 00 01] at offset 9: nonzero padding"},
	{name: "text is not a header", in: []byte("hello world\n"), code: spec.CodeStreamFailure, msg: "unknown stream id 104"},

	{name: "oversized frame", in: hdr(1, 0, 0, 0, 17), limit: 16, code: spec.CodeOutputLimit,
		msg: "stdout frame at offset 0 declares 17 bytes, over the frame limit of 16"},
	{name: "oversized default limit", in: hdr(2, 0, 0, 0, 1<<20+1), code: spec.CodeOutputLimit, msg: "over the frame limit of 1048576"},
	{name: "max uint32 length", in: hdr(1, 0, 0, 0, 1<<32-1), code: spec.CodeOutputLimit},
	{name: "oversized after output", in: cat(f(Stdout, "a"), hdr(2, 0, 0, 0, 1<<24)), want: "1:a", code: spec.CodeOutputLimit},
	{name: "oversized after a same-stream frame", in: cat(f(Stdout, "a"), hdr(1, 0, 0, 0, 17), []byte("x")), limit: 16, want: "1:a", code: spec.CodeOutputLimit,
		msg: "at offset 9 declares 17"},
	{name: "bad id checked before length", in: hdr(0, 0, 0, 0, 1<<30), code: spec.CodeStreamFailure},

	{name: "daemon error", in: cat(f(Stdout, "partial"), f(Systemerr, "oci runtime exec failed\n")), want: "1:partial",
		code: spec.CodeStreamFailure, msg: "daemon error frame at offset 15: docker daemon error: oci runtime exec failed"},
	{name: "daemon error empty", in: f(Systemerr, ""), code: spec.CodeStreamFailure, msg: "(no message)"},
	{name: "daemon error oversized", in: hdr(3, 0, 0, 0, 17), limit: 16, code: spec.CodeOutputLimit, msg: "systemerr frame"},
	{name: "daemon error torn", in: hdr(3, 0, 0, 0, 10), code: spec.CodeStreamFailure, is: io.ErrUnexpectedEOF, msg: "(0 of 10 bytes)"},

	{name: "torn header 1 byte", in: []byte{1}, code: spec.CodeStreamFailure, is: io.ErrUnexpectedEOF,
		msg: "input ended inside a frame header at offset 0 (1 of 8 bytes)"},
	{name: "torn header 7 bytes", in: cat(f(Stdout, "x"), hdr(1, 0, 0, 0, 1)[:7]), want: "1:x", code: spec.CodeStreamFailure, is: io.ErrUnexpectedEOF,
		msg: "header at offset 9 (7 of 8 bytes)"},
	{name: "torn payload", in: f(Stderr, "abcdef")[:11], want: "2:abc", code: spec.CodeStreamFailure, is: io.ErrUnexpectedEOF,
		msg: "payload at offset 0 (3 of 6 bytes)"},
	{name: "torn right after header", in: hdr(1, 0, 0, 0, 5), code: spec.CodeStreamFailure, is: io.ErrUnexpectedEOF},
	{name: "torn before bad header is reported as torn", in: []byte{0, 0, 0}, code: spec.CodeStreamFailure, is: io.ErrUnexpectedEOF},
}

// TestDecoderTable runs every case through every reader and chunk size, then
// through CopyTo. With iotest.TimeoutReader the decoder must report the
// timeout and, called again, resume where it was.
func TestDecoderTable(t *testing.T) {
	for _, tc := range decodeCases {
		for _, rd := range readers {
			for _, chunk := range []int{1, 3, 8, 9, 64, 0} {
				name := fmt.Sprintf("%s/%s/chunk=%d", tc.name, rd.name, chunk)
				t.Run(name, func(t *testing.T) {
					opts := Options{ChunkSize: chunk, FrameLimit: tc.limit}
					var src io.Reader = bytes.NewReader(tc.in)
					retryTimeout := rd.wrap == nil
					if retryTimeout {
						src = iotest.TimeoutReader(src)
					} else {
						src = rd.wrap(src)
					}
					d := NewDecoder(src, opts)
					got, err := decodeAll(t, d, opts.withDefaults().ChunkSize)
					if retryTimeout && errors.Is(err, iotest.ErrTimeout) && len(tc.in) > 0 {
						if !spec.IsCode(err, spec.CodeStreamFailure) {
							t.Fatalf("timeout error %v lacks stream_failure", err)
						}
						var rest string
						rest, err = decodeAll(t, d, opts.withDefaults().ChunkSize)
						var tr transcript
						for _, part := range []string{got, rest} {
							for s := range strings.SplitSeq(part, "|") {
								if s != "" {
									tr.add(StreamID(s[0]-'0'), []byte(s[2:]))
								}
							}
						}
						got = tr.String()
					}
					checkOutcome(t, got, err, tc.want, tc.code, tc.is, tc.msg)
					// Sticky: the same outcome again.
					if _, _, err2 := d.Next(); (err == nil) != (err2 == nil) || (err != nil && err.Error() != err2.Error()) {
						t.Fatalf("second call after end: %v, first: %v", err2, err)
					}
				})
			}
		}
		t.Run(tc.name+"/copy", func(t *testing.T) {
			var sw splitWriters
			d := NewDecoder(iotest.HalfReader(bytes.NewReader(tc.in)), Options{FrameLimit: tc.limit})
			n, err := d.CopyTo(sw.stream(Stdout), sw.stream(Stderr))
			if err == nil {
				err = io.EOF // checkOutcome's clean end
			}
			checkOutcome(t, sw.tr.String(), err, tc.want, tc.code, tc.is, tc.msg)
			if n != sw.bytes {
				t.Fatalf("written = %d, writers got %d", n, sw.bytes)
			}
		})
	}
}

func checkOutcome(t *testing.T, got string, err error, want string, code spec.Code, is error, msg string) {
	t.Helper()
	if got != want {
		t.Fatalf("delivered %q, want %q", got, want)
	}
	if code == "" {
		if err != io.EOF { //nolint:errorlint // a clean end is io.EOF itself (Next's doc): what this checks
			t.Fatalf("err = %v, want bare io.EOF", err)
		}
		return
	}
	var se *spec.Error
	if !errors.As(err, &se) || se.Code != code || se.Op != "framing" {
		t.Fatalf("err = %#v (%v), want *spec.Error code %s op framing", err, err, code)
	}
	if errors.Is(err, io.EOF) {
		t.Fatalf("err %v matches io.EOF", err)
	}
	if is != nil && !errors.Is(err, is) {
		t.Fatalf("err = %v, want errors.Is %v", err, is)
	}
	if msg != "" && !strings.Contains(err.Error(), msg) {
		t.Fatalf("err = %q, want it to contain %q", err, msg)
	}
}

func TestDaemonErrorAs(t *testing.T) {
	d := NewDecoder(bytes.NewReader(f(Systemerr, "container not running\n")), Options{})
	_, _, err := d.Next()
	var de *DaemonError
	if !errors.As(err, &de) || de.Message != "container not running\n" {
		t.Fatalf("err = %v, want *DaemonError with the raw message", err)
	}
	if !errors.Is(err, spec.ErrStreamFailure) {
		t.Fatalf("err = %v, not a stream_failure", err)
	}
}

func TestReaderErrors(t *testing.T) {
	boom := errors.New("connection reset")
	t.Run("error without data", func(t *testing.T) {
		d := NewDecoder(iotest.ErrReader(boom), Options{})
		_, _, err := d.Next()
		checkOutcome(t, "", err, "", spec.CodeStreamFailure, boom, "read at offset 0: connection reset")
	})
	t.Run("data arrives with the error, and is delivered first", func(t *testing.T) {
		in := cat(f(Stdout, "a"), f(Stderr, "b"))
		done := false
		d := NewDecoder(readerFunc(func(p []byte) (int, error) {
			if done {
				return 0, boom
			}
			done = true
			return copy(p, in), boom
		}), Options{})
		got, err := decodeAll(t, d, 1<<16)
		checkOutcome(t, got, err, "1:a|2:b", spec.CodeStreamFailure, boom, "offset 18")
	})
	t.Run("reader errors are not sticky", func(t *testing.T) {
		calls := 0
		in := f(Stdout, "after")
		d := NewDecoder(readerFunc(func(p []byte) (int, error) {
			calls++
			if calls == 1 {
				return 0, boom
			}
			if calls == 2 {
				return copy(p, in), io.EOF
			}
			return 0, io.EOF
		}), Options{})
		if _, _, err := d.Next(); !errors.Is(err, boom) {
			t.Fatalf("first Next: %v", err)
		}
		got, err := decodeAll(t, d, 1<<16)
		checkOutcome(t, got, err, "1:after", "", nil, "")
	})
	t.Run("spec errors pass through", func(t *testing.T) {
		cancelled := spec.Errorf(spec.CodeCancelled, "dockerio", "attach closed")
		d := NewDecoder(iotest.ErrReader(cancelled), Options{})
		if _, _, err := d.Next(); err != cancelled { //nolint:errorlint // the reader's *spec.Error is returned as it is (errors.go): what this checks
			t.Fatalf("err = %v, want the reader's *spec.Error unchanged", err)
		}
	})
	t.Run("no progress", func(t *testing.T) {
		d := NewDecoder(readerFunc(func([]byte) (int, error) { return 0, nil }), Options{})
		_, _, err := d.Next()
		checkOutcome(t, "", err, "", spec.CodeStreamFailure, io.ErrNoProgress, "")
	})
	t.Run("impossible count", func(t *testing.T) {
		d := NewDecoder(readerFunc(func(p []byte) (int, error) { return len(p) + 1, nil }), Options{})
		_, _, err := d.Next()
		checkOutcome(t, "", err, "", spec.CodeStreamFailure, nil, "reader returned")
	})
	t.Run("eof is sticky and the reader is not asked again", func(t *testing.T) {
		calls := 0
		d := NewDecoder(readerFunc(func([]byte) (int, error) { calls++; return 0, io.EOF }), Options{})
		for range 3 {
			if _, _, err := d.Next(); !errors.Is(err, io.EOF) {
				t.Fatalf("err = %v", err)
			}
		}
		if calls != 1 {
			t.Fatalf("reader called %d times after EOF", calls)
		}
	})
}

// countingReader records how the decoder reads.
type countingReader struct {
	r      io.Reader
	calls  int
	maxAsk int
	total  int
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.calls++
	c.maxAsk = max(c.maxAsk, len(p))
	n, err := c.r.Read(p)
	c.total += n
	return n, err
}

func TestBoundedReads(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 10_000)
	in := cat(AppendFrame(nil, Stdout, big), f(Stderr, "tail"))
	cr := &countingReader{r: bytes.NewReader(in)}
	d := NewDecoder(cr, Options{ChunkSize: 100})
	id, p, err := d.Next()
	if err != nil || id != Stdout || len(p) != 92 { // the buffer is 100 bytes: header + 92
		t.Fatalf("first piece: %v %d %v", id, len(p), err)
	}
	if cr.total > 100 || cr.maxAsk > 100 {
		t.Fatalf("read ahead: %d bytes read, %d asked at once", cr.total, cr.maxAsk)
	}
	got, err := decodeAll(t, d, 100)
	if !errors.Is(err, io.EOF) || got != "1:"+strings.Repeat("x", 10_000-92)+"|2:tail" {
		t.Fatalf("rest: %.40q... %v", got, err)
	}
	if cr.maxAsk > 100 {
		t.Fatalf("asked for %d bytes at once", cr.maxAsk)
	}

	// Many small frames in one buffer: one read serves them all.
	var small []byte
	for i := range 50 {
		small = AppendFrame(small, StreamID(1+i%2), []byte("line\n"))
	}
	cr = &countingReader{r: bytes.NewReader(small)}
	d = NewDecoder(cr, Options{})
	for range 50 {
		if _, _, err := d.Next(); err != nil {
			t.Fatal(err)
		}
	}
	if cr.calls != 1 {
		t.Fatalf("%d reads for frames that fit one buffer", cr.calls)
	}
}

func TestInputOffsetAndReset(t *testing.T) {
	in := cat(f(Stdout, "abc"), f(Stderr, "de"))
	d := NewDecoder(bytes.NewReader(in), Options{ChunkSize: 2})
	var offs []int64
	for {
		_, _, err := d.Next()
		if err != nil {
			break
		}
		offs = append(offs, d.InputOffset())
	}
	if fmt.Sprint(offs) != "[10 11 21]" {
		t.Fatalf("offsets %v", offs)
	}
	d.Reset(bytes.NewReader(f(Stderr, "again")))
	got, err := decodeAll(t, d, 2)
	checkOutcome(t, got, err, "2:again", "", nil, "")
}

func TestNextZeroAllocs(t *testing.T) {
	var in []byte
	for i := range 1000 {
		in = AppendFrame(in, StreamID(1+i%2), bytes.Repeat([]byte{'a'}, 1+i%200))
	}
	r := bytes.NewReader(in)
	d := NewDecoder(r, Options{ChunkSize: 4096})
	allocs := testing.AllocsPerRun(20, func() {
		r.Reset(in)
		d.Reset(r)
		for {
			if _, _, err := d.Next(); err != nil {
				if !errors.Is(err, io.EOF) {
					t.Fatal(err)
				}
				return
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per 1000 frames", allocs)
	}
	w := writerFunc(func(p []byte) (int, error) { return len(p), nil })
	allocs = testing.AllocsPerRun(20, func() {
		r.Reset(in)
		d.Reset(r)
		if _, err := d.CopyTo(w, w); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("CopyTo: %v allocations per 1000 frames", allocs)
	}
}

func TestStreamIDString(t *testing.T) {
	got := fmt.Sprint(Stdin, Stdout, Stderr, Systemerr, StreamID(7))
	if got != "stdin stdout stderr systemerr stream 7" {
		t.Fatal(got)
	}
}
