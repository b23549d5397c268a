package recorder

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// FuzzDecodeSegment: any bytes decode without a panic into whole records,
// a torn end, or a corruption error (never both a record and an error for
// the same bytes); whole records re-encode to exactly the bytes they came
// from; emit places them without a panic. The seed corpus runs in the
// normal test suite.
func FuzzDecodeSegment(f *testing.F) {
	h := appendHeader(nil, header{segment: 0, start: 0, head: 64 << 10, tail: 1 << 20})
	valid := appendRecord(appendRecord(append([]byte(nil), h...), TypeStdout, []byte("hello\n")), TypeStderr, []byte("oops\n"))
	ended := appendRecord(appendRecord(append([]byte(nil), valid...), TypeGap, be64(12)), TypeEnd, endPayload(end{stdout: 6, stderr: 5, dropped: 12}))
	f.Add([]byte{})
	f.Add(h[:10])
	f.Add(h)
	f.Add(valid)
	f.Add(ended)
	f.Add(ended[:len(ended)-3])
	f.Add(append(append([]byte(nil), valid...), make([]byte, 40)...))
	f.Add(appendRecord(append([]byte(nil), h...), 9, []byte("x")))
	f.Add(appendRecord(append([]byte(nil), h...), TypeEnd, []byte("short")))
	f.Add(append(append([]byte(nil), h...), 1, 0xff, 0xff, 0xff, 0xff, 1))
	tailHdr := appendHeader(nil, header{segment: 3, start: 1 << 30, head: 64 << 10, tail: 1 << 20})
	f.Add(appendRecord(tailHdr, TypeStdout, bytes.Repeat([]byte("y"), 100)))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeSegment(b)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("an error that is not a corruption: %v", err)
		}
		if err != nil && s.torn {
			t.Fatalf("both torn and corrupt: %v", err)
		}
		if s.hasHdr {
			re := appendHeader(nil, s.hdr)
			for _, r := range s.recs {
				re = appendRecord(re, r.typ, r.data)
			}
			if !bytes.HasPrefix(b, re) {
				t.Fatalf("records do not re-encode to their bytes")
			}
			if err == nil && !s.torn && len(re) != len(b) {
				t.Fatalf("clean decode of %d bytes covered only %d", len(b), len(re))
			}
		}
		_, _ = emit([]segment{s}, func(c Chunk) error {
			if c.Stream == 0 && c.Gap < 0 {
				t.Fatalf("negative gap %d", c.Gap)
			}
			return nil
		})
	})
}

// FuzzDecodeChanges: a changes file's bytes (read back from disk) decode
// without a panic into texts whose paths are bounded, or a journal error;
// what decodes re-encodes and decodes the same.
func FuzzDecodeChanges(f *testing.F) {
	f.Add([]byte(`[]`))
	f.Add([]byte(`[{"path":"/workspace/work/a","before":"x\n","after":"y\n"}]`))
	f.Add([]byte(`[{"path":""}]`))
	f.Add([]byte(`[{"path":"/a","after":null}]`))
	f.Add([]byte(`{"path":"/a"}`))
	f.Add([]byte(`[{"path":"/a","before":"\u0000"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		texts, err := decodeChanges(b)
		if err != nil {
			return
		}
		for _, c := range texts {
			if c.Path == "" || len(c.Path) > 4096 {
				t.Fatalf("path %q accepted", c.Path)
			}
		}
		again, err := json.Marshal(texts)
		if err != nil {
			t.Fatal(err)
		}
		if back, err := decodeChanges(again); err != nil || len(back) != len(texts) {
			t.Fatalf("re-decoding %s: %v", again, err)
		}
	})
}
