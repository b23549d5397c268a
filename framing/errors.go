package framing

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/stockade/stockade/spec"
)

// Errors. Every error the Decoder (and so Copy) reports for bad input is a
// *spec.Error with Op "framing"; match its code with errors.As or
// spec.IsCode, its cause with errors.Is:
//
//	condition                                        code            cause
//	stream id 0 (stdin) or > 3                       stream_failure  -
//	nonzero padding bytes 1..3                       stream_failure  -
//	declared length > Options.FrameLimit             output_limit    -
//	a frame on stream 3 (the daemon's error stream)  stream_failure  *DaemonError
//	input ends inside a header or a payload          stream_failure  io.ErrUnexpectedEOF
//	the reader fails                                 stream_failure  the reader's error
//	the reader makes no progress (100 empty reads)   stream_failure  io.ErrNoProgress
//	the reader returns an impossible count           stream_failure  -
//
// A reader error that already is a *spec.Error (say, cancelled) is returned
// as it is, so its code survives. io.EOF is returned bare, and only at a clean
// end between frames.
//
// Copy returns its writers' errors as they are (not wrapped): they belong to
// the caller, not to Docker's stream. A short write is io.ErrShortWrite.

// op is the Op of every *spec.Error this package returns.
const op = "framing"

// DaemonError is the payload of a frame on stream 3 (Systemerr): the Docker
// daemon's own error, sent in band instead of output. The Decoder returns it
// wrapped in a *spec.Error with code stream_failure; get it back with
// errors.As.
type DaemonError struct {
	// Message is the frame's payload as the daemon sent it (typically one
	// line of text, possibly empty).
	Message string
}

func (e *DaemonError) Error() string {
	m := strings.TrimRight(e.Message, "\r\n")
	if m == "" {
		return "docker daemon error (no message)"
	}
	return "docker daemon error: " + m
}

// errDaemon wraps a stream-3 payload.
func errDaemon(off int64, msg []byte) error {
	return spec.Wrap(spec.CodeStreamFailure, op, &DaemonError{Message: string(msg)},
		"daemon error frame at offset %d", off)
}

// errHeader reports an invalid header, naming its bytes and offset.
func errHeader(off int64, h []byte, why string) error {
	return spec.Errorf(spec.CodeStreamFailure, op, "invalid multiplex header [% x] at offset %d: %s",
		h, off, why)
}

// errTooLarge reports a frame whose declared length exceeds the limit.
func errTooLarge(off int64, id StreamID, n uint32, limit int) error {
	return spec.Errorf(spec.CodeOutputLimit, op, "%s frame at offset %d declares %d bytes, over the frame limit of %d",
		id, off, n, limit)
}

// errTorn reports input that ended inside a header or a payload.
func errTorn(off int64, what string, have, want uint64) error {
	return spec.Wrap(spec.CodeStreamFailure, op, io.ErrUnexpectedEOF,
		"input ended inside a frame %s at offset %d (%d of %d bytes)", what, off, have, want)
}

// errRead wraps a reader's error, unless it is already one of ours.
func errRead(off int64, err error) error {
	var se *spec.Error
	if errors.As(err, &se) {
		return err
	}
	return spec.Wrap(spec.CodeStreamFailure, op, err, "read at offset %d", off)
}

// errInvalidRead reports a reader that broke the io.Reader contract.
func errInvalidRead(n, max int) error {
	return spec.Errorf(spec.CodeStreamFailure, op, "reader returned %d bytes for a %d-byte buffer", n, max)
}

// String names the stream ("stdout", "stderr", ...), or "stream N".
func (id StreamID) String() string {
	switch id {
	case Stdin:
		return "stdin"
	case Stdout:
		return "stdout"
	case Stderr:
		return "stderr"
	case Systemerr:
		return "systemerr"
	}
	return fmt.Sprintf("stream %d", uint8(id))
}
