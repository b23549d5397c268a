package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

// reseal recomputes the checksum of an edited envelope.
func reseal(b []byte) []byte {
	body := b[:len(b)-envTrailer]
	binary.BigEndian.PutUint32(b[len(body):], crc32.Checksum(body, castagnoli))
	return b
}

func TestEnvelopeRoundTrip(t *testing.T) {
	tests := []struct {
		typ      string
		terminal bool
		time     int64
		payload  string
	}{
		{"sandbox.reserved", false, 1, `{"image":"sha256:abc"}`},
		{"process.exited", true, -5, `{"code":137,"reason":"oom"}`},
		{"t", false, 0, ""},
		{string(bytes.Repeat([]byte("x"), MaxTypeLen)), true, 1<<63 - 1, "null"},
	}
	for _, tt := range tests {
		b := appendEnvelope([]byte("prefix"), tt.typ, tt.terminal, tt.time, []byte(tt.payload))[len("prefix"):]
		e, err := decodeEnvelope(b)
		if err != nil {
			t.Fatalf("%s: %v", tt.typ, err)
		}
		if e.version != EnvelopeVersion || string(e.typ) != tt.typ || e.terminal != tt.terminal || e.time != tt.time || string(e.payload) != tt.payload {
			t.Fatalf("%s: decoded %+v", tt.typ, e)
		}
	}
}

// TestDecodeEnvelopeErrors maps bytes to the exact error.
func TestDecodeEnvelopeErrors(t *testing.T) {
	good := func() []byte { return appendEnvelope(nil, "a.b", false, 42, []byte(`{"x":1}`)) }
	tests := []struct {
		name  string
		in    []byte
		cause error
		msg   string
	}{
		{"nil", nil, ErrCorrupt, "journal: corrupt record: 0 bytes, shorter than a version"},
		{"one byte", []byte{0}, ErrCorrupt, "journal: corrupt record: 1 bytes, shorter than a version"},
		{"version 0", []byte{0, 0}, ErrUnknownVersion, "journal: unknown envelope version 0 (this build reads 1)"},
		{"version 2", func() []byte { b := good(); b[1] = 2; return b }(), ErrUnknownVersion, "journal: unknown envelope version 2 (this build reads 1)"},
		{"version 256", func() []byte { b := good(); b[0] = 1; return b }(), ErrUnknownVersion, "journal: unknown envelope version 257 (this build reads 1)"},
		{"header only", []byte{0, 1, 0}, ErrCorrupt, "journal: corrupt record: 3 bytes, shorter than an envelope"},
		{"torn checksum", func() []byte { b := good(); return b[:len(b)-1] }(), ErrCorrupt, ""},
		{"flipped bit", func() []byte { b := good(); b[len(b)-5] ^= 1; return b }(), ErrCorrupt, ""},
		{"unknown flag", reseal(func() []byte { b := good(); b[2] = 0x80; return b }()), ErrCorrupt, "journal: corrupt record: unknown flags 0x80"},
		{"type length 0", reseal(func() []byte { b := good(); b[11] = 0; return b }()), ErrCorrupt, "journal: corrupt record: type length 0 in a 26-byte envelope"},
		{"type past end", reseal(func() []byte { b := good(); b[11] = 200; return b }()), ErrCorrupt, "journal: corrupt record: type length 200 in a 26-byte envelope"},
		{"control byte in type", reseal(func() []byte { b := good(); b[12] = '\n'; return b }()), ErrCorrupt, `journal: corrupt record: type "\n.b"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeEnvelope(tt.in)
			if !errors.Is(err, tt.cause) {
				t.Fatalf("got %v, want %v", err, tt.cause)
			}
			if tt.msg != "" && err.Error() != tt.msg {
				t.Fatalf("got %q, want %q", err, tt.msg)
			}
		})
	}
}

func FuzzDecodeEnvelope(f *testing.F) {
	f.Add(appendEnvelope(nil, "sandbox.reserved", false, 1767225600000000000, []byte(`{"image":"sha256:abc","user":"65532:65532"}`)))
	f.Add(appendEnvelope(nil, "process.exited", true, 0, []byte(`{"code":0}`)))
	f.Add(appendEnvelope(nil, "t", false, -1, nil))
	f.Add([]byte{})
	f.Add([]byte{0, 1})
	f.Add([]byte{0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 'x', 0, 0, 0, 0})
	f.Add(bytes.Repeat([]byte{0xff}, 64))
	f.Fuzz(func(t *testing.T, b []byte) {
		in := bytes.Clone(b)
		e, err := decodeEnvelope(b)
		if !bytes.Equal(in, b) {
			t.Fatal("decoder modified its input")
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnknownVersion) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		// A decoded envelope re-encodes to the same bytes.
		if again := appendEnvelope(nil, string(e.typ), e.terminal, e.time, e.payload); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n%x\n%x", again, b)
		}
	})
}
