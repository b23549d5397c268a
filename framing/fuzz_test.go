package framing

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/stockade/stockade/spec"
)

// refDecode is the model: the format decoded from a whole slice, the
// obvious way. It returns the transcript, the code of the error that ends
// the input ("" for a clean end) and whether that error is a torn tail.
func refDecode(in []byte, limit int) (tr string, code spec.Code, torn bool) {
	var t transcript
	for len(in) > 0 {
		if len(in) < HeaderLen {
			return t.String(), spec.CodeStreamFailure, true
		}
		id := StreamID(in[0])
		if id == Stdin || id > Systemerr || in[1]|in[2]|in[3] != 0 {
			return t.String(), spec.CodeStreamFailure, false
		}
		n := binary.BigEndian.Uint32(in[4:])
		if uint64(n) > uint64(limit) {
			return t.String(), spec.CodeOutputLimit, false
		}
		in = in[HeaderLen:]
		if uint64(len(in)) < uint64(n) {
			if id != Systemerr {
				t.add(id, in)
			}
			return t.String(), spec.CodeStreamFailure, true
		}
		if id == Systemerr {
			return t.String(), spec.CodeStreamFailure, false
		}
		t.add(id, in[:n])
		in = in[n:]
	}
	return t.String(), "", false
}

// randomReader returns the input in reads of random sizes, sometimes empty,
// sometimes with io.EOF on the last data.
type randomReader struct {
	in  []byte
	rng *rand.Rand
}

func (r *randomReader) Read(p []byte) (int, error) {
	if len(r.in) == 0 {
		return 0, io.EOF
	}
	if r.rng.IntN(8) == 0 {
		return 0, nil
	}
	n := min(len(p), len(r.in), 1+r.rng.IntN(1+r.rng.IntN(64)*r.rng.IntN(64)))
	n = copy(p, r.in[:n])
	r.in = r.in[n:]
	if len(r.in) == 0 && r.rng.IntN(2) == 0 {
		return n, io.EOF
	}
	return n, nil
}

func fuzzSeeds(f *testing.F) {
	for _, tc := range decodeCases {
		f.Add(tc.in, uint16(0), uint16(tc.limit), uint64(1))
		f.Add(tc.in, uint16(3), uint16(tc.limit), uint64(2))
	}
	rng := rand.New(rand.NewPCG(3, 4))
	in, _, _ := genFrames(rng, 1024, 0, 100)
	f.Add(in, uint16(7), uint16(0), uint64(3))
	f.Add(in, uint16(100), uint16(200), uint64(4))
}

// FuzzDecoder: arbitrary bytes, split arbitrarily, never panic, decode as the
// model does (so never more payload than the headers declare), and end in
// io.EOF or a *spec.Error of the model's code. Copy agrees with Next.
func FuzzDecoder(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte, chunk, limit uint16, seed uint64) {
		opts := Options{ChunkSize: int(chunk % 300), FrameLimit: int(limit % 4096)}
		o := opts.withDefaults()
		wantTr, wantCode, wantTorn := refDecode(in, o.FrameLimit)

		check := func(name string, got string, err error) {
			t.Helper()
			if got != wantTr {
				t.Fatalf("%s delivered %q, model %q", name, got, wantTr)
			}
			if wantCode == "" {
				if !errors.Is(err, io.EOF) {
					t.Fatalf("%s: err %v, model a clean end", name, err)
				}
				return
			}
			var se *spec.Error
			if !errors.As(err, &se) || se.Code != wantCode || se.Op != op {
				t.Fatalf("%s: err %#v (%v), model code %s", name, err, err, wantCode)
			}
			if errors.Is(err, io.ErrUnexpectedEOF) != wantTorn {
				t.Fatalf("%s: err %v, model torn=%v", name, err, wantTorn)
			}
		}

		d := NewDecoder(&randomReader{in: in, rng: rand.New(rand.NewPCG(seed, 1))}, opts)
		var tr transcript
		var err error
		for {
			var id StreamID
			var p []byte
			id, p, err = d.Next()
			if err != nil {
				break
			}
			if (id != Stdout && id != Stderr) || len(p) == 0 || len(p) > o.ChunkSize {
				t.Fatalf("piece (%v, %d bytes), chunk %d", id, len(p), o.ChunkSize)
			}
			tr.add(id, p)
		}
		check("Next", tr.String(), err)
		if got := d.InputOffset(); got > int64(len(in)) {
			t.Fatalf("offset %d past input %d", got, len(in))
		}

		var sw splitWriters
		d.Reset(&randomReader{in: in, rng: rand.New(rand.NewPCG(seed, 2))})
		n, err := d.CopyTo(sw.stream(Stdout), sw.stream(Stderr))
		if err == nil {
			err = io.EOF
		}
		check("CopyTo", sw.tr.String(), err)
		if n != sw.bytes {
			t.Fatalf("CopyTo wrote %d, reported %d", sw.bytes, n)
		}
	})
}

// FuzzRoundTrip: frames cut from the input at random points, on random
// streams, encoded with a random maximum frame size, read back through reads
// of random sizes with a random chunk size, come back exactly.
func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte("hello\nworld\n"), uint64(1))
	f.Add([]byte(""), uint64(2))
	f.Add(bytes.Repeat([]byte("0123456789"), 1000), uint64(3))
	f.Add(hdr(3, 0, 0, 0, 4), uint64(4))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		rng := rand.New(rand.NewPCG(seed, 7))
		var buf bytes.Buffer
		e := NewEncoderSize(&buf, 1+rng.IntN(2000))
		var want transcript
		for rest := data; ; {
			n := min(len(rest), rng.IntN(3000))
			id := StreamID(1 + rng.IntN(2))
			if err := e.WriteFrame(id, rest[:n]); err != nil {
				t.Fatal(err)
			}
			want.add(id, rest[:n])
			rest = rest[n:]
			if len(rest) == 0 {
				break
			}
		}
		chunk := rng.IntN(500)
		d := NewDecoder(&randomReader{in: buf.Bytes(), rng: rng}, Options{ChunkSize: chunk})
		got, err := decodeAll(t, d, Options{ChunkSize: chunk}.withDefaults().ChunkSize)
		if !errors.Is(err, io.EOF) || got != want.String() {
			t.Fatalf("decoded %q, %v; want %q", got, err, want.String())
		}
		var sw splitWriters
		n, err := Copy(sw.stream(Stdout), sw.stream(Stderr), &randomReader{in: buf.Bytes(), rng: rng})
		if err != nil || sw.tr.String() != want.String() || n != int64(len(data)) {
			t.Fatalf("Copy %d, %v; transcript equal: %v", n, err, sw.tr.String() == want.String())
		}
	})
}
