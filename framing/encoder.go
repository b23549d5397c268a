package framing

import (
	"encoding/binary"
	"io"

	"github.com/stockade/stockade/spec"
)

// DefaultMaxFrame is the largest payload an Encoder from NewEncoder puts in
// one frame: 32 KiB, the largest frame the Docker daemon itself writes.
const DefaultMaxFrame = 32 << 10

// maxLen is the largest length a header can declare (a variable, so the
// conversion to int compiles on 32-bit platforms too).
var maxLen uint64 = 1<<32 - 1

// smallFrame is the largest payload an Encoder copies next to its header so
// that header and payload reach the writer in one Write.
const smallFrame = 1024

// Encoder writes Docker's multiplexed stream format, as the daemon does. It is
// used by tests and by fake engines. It is not safe for concurrent use.
type Encoder struct {
	w        io.Writer
	maxFrame int
	scratch  [HeaderLen + smallFrame]byte
}

// NewEncoder returns an Encoder writing to w frames of at most
// DefaultMaxFrame payload bytes.
func NewEncoder(w io.Writer) *Encoder { return NewEncoderSize(w, DefaultMaxFrame) }

// NewEncoderSize returns an Encoder writing to w frames of at most maxFrame
// payload bytes (clamped to 1..math.MaxUint32; zero or negative means
// DefaultMaxFrame).
func NewEncoderSize(w io.Writer, maxFrame int) *Encoder {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	if uint64(maxFrame) > maxLen {
		maxFrame = int(maxLen)
	}
	return &Encoder{w: w, maxFrame: maxFrame}
}

// WriteFrame writes p on stream id. A p longer than the Encoder's maximum
// frame is split into several frames, in order; an empty p writes one
// zero-length frame (which decoders skip). Any id from 0 to 3 is written as
// given, so tests can make the frames the Decoder rejects (0) or reports (3);
// a larger id is an invalid_argument error and writes nothing.
//
// A payload of up to 1 KiB reaches the writer in the same Write as its
// header; a longer one takes two Writes (header, payload). Errors from the
// writer are returned as they are; a short write is io.ErrShortWrite. After
// an error the output may end inside a frame.
func (e *Encoder) WriteFrame(id StreamID, p []byte) error {
	if id > Systemerr {
		return spec.Errorf(spec.CodeInvalidArgument, op, "cannot encode a frame on stream %d", uint8(id))
	}
	for {
		n := min(len(p), e.maxFrame)
		if err := e.frame(id, p[:n]); err != nil {
			return err
		}
		p = p[n:]
		if len(p) == 0 {
			return nil
		}
	}
}

func (e *Encoder) frame(id StreamID, p []byte) error {
	h := e.scratch[:HeaderLen]
	h[0], h[1], h[2], h[3] = byte(id), 0, 0, 0
	binary.BigEndian.PutUint32(h[4:], uint32(len(p)))
	if len(p) <= smallFrame {
		n := copy(e.scratch[HeaderLen:], p)
		return write(e.w, e.scratch[:HeaderLen+n])
	}
	if err := write(e.w, h); err != nil {
		return err
	}
	return write(e.w, p)
}

// write writes all of p or says why not.
func write(w io.Writer, p []byte) error {
	n, err := w.Write(p)
	if err != nil {
		return err
	}
	if n != len(p) {
		return io.ErrShortWrite
	}
	return nil
}

// AppendFrame appends one frame (header and p, whatever its length) to dst
// and returns the extended slice. It is the allocation-free way to build
// test input.
func AppendFrame(dst []byte, id StreamID, p []byte) []byte {
	dst = append(dst, byte(id), 0, 0, 0, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(dst[len(dst)-4:], uint32(len(p)))
	return append(dst, p...)
}
