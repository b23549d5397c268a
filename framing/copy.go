package framing

import (
	"encoding/binary"
	"errors"
	"io"
	"sync"
)

// errInvalidWrite is returned when a writer reports an impossible count.
var errInvalidWrite = errors.New("framing: invalid write result")

// decoders pools Copy's decoders (and their 64 KiB buffers), so a Copy
// allocates nothing in steady state.
var decoders = sync.Pool{New: func() any { return NewDecoder(nil, Options{}) }}

// Copy demultiplexes src, a Docker attach stream, writing stdout frames'
// payloads to stdout and stderr frames' payloads to stderr, until src ends
// cleanly or something fails. It has the signature of moby's stdcopy.StdCopy
// and can replace it, but it is stricter:
//
//   - input that ends inside a header or a payload is an error (stream_failure
//     wrapping io.ErrUnexpectedEOF); stdcopy returns nil;
//   - a frame longer than spec.DefaultFrameLimit is an error (output_limit);
//     stdcopy grows its buffer to whatever the header declares;
//   - stream 0 is an error (stream_failure); stdcopy writes it to stdout;
//   - written counts the bytes the writers accepted, also on error; stdcopy
//     resets it to 0.
//
// A frame on stream 3 ends the copy with a *spec.Error wrapping a
// *DaemonError, as stdcopy ends it with the daemon's message. A nil writer
// discards its stream (its bytes still count as written). Errors from the
// writers are returned as they are; a short write is io.ErrShortWrite.
//
// Consecutive frames of one stream that are already in the buffer are passed
// to their writer in one Write call; frame boundaries carry no meaning for
// the payload (Docker splits output wherever its reads happen to end).
func Copy(stdout, stderr io.Writer, src io.Reader) (written int64, err error) {
	d := decoders.Get().(*Decoder)
	d.Reset(src)
	written, err = d.CopyTo(stdout, stderr)
	d.Reset(nil)
	decoders.Put(d)
	return written, err
}

// CopyTo writes the rest of the Decoder's input to stdout and stderr as Copy
// does, with the Decoder's options. Writes may be larger than ChunkSize (up to
// the buffer's size) because payloads of consecutive same-stream frames are
// joined. It returns nil at a clean end of input.
func (d *Decoder) CopyTo(stdout, stderr io.Writer) (written int64, err error) {
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	for {
		id, p, err := d.run()
		if err != nil {
			if err == io.EOF { //nolint:errorlint // the clean end is io.EOF itself; a source's error wrapping io.EOF is a failure (more)
				return written, nil
			}
			return written, err
		}
		w := stdout
		if id == Stderr {
			w = stderr
		}
		n, err := w.Write(p)
		if n < 0 || n > len(p) {
			return written, errInvalidWrite
		}
		written += int64(n)
		if err != nil {
			return written, err
		}
		if n != len(p) {
			return written, io.ErrShortWrite
		}
	}
}

// coalesceMax is the largest frame run joins to the one before: moving a
// payload costs a copy of it, which pays for a saved Write only while the
// payload is small (1 KiB moves in about the time of a cheap Write call; a
// Write to a pipe or a channel costs far more).
const coalesceMax = 1024

// run is Next without the ChunkSize cap and with coalescing: after the
// current piece, it joins the payloads of the following frames of the same
// stream that are already buffered, moving them down over the headers in
// between, so a run of small frames costs one Write. Any header it does not
// like (another stream, malformed, oversized) it leaves for the next
// call, which reports it in order.
func (d *Decoder) run() (StreamID, []byte, error) {
	if err := d.ready(); err != nil {
		return 0, nil, err
	}
	id := d.stream
	start := d.r0
	n := min(d.remaining, d.w0-d.r0)
	d.r0 += n
	d.remaining -= n
	end := d.r0
	for d.remaining == 0 && d.w0-d.r0 >= HeaderLen {
		h := d.buf[d.r0 : d.r0+HeaderLen]
		if StreamID(h[0]) != id || h[1]|h[2]|h[3] != 0 {
			break
		}
		size := binary.BigEndian.Uint32(h[4:])
		if size == 0 {
			d.r0 += HeaderLen
			continue
		}
		if uint64(size) > uint64(d.limit) || int(size) > coalesceMax {
			break
		}
		d.frameOff = d.InputOffset()
		d.r0 += HeaderLen
		d.remaining, d.frameLen = int(size), int(size)
		n := min(d.remaining, d.w0-d.r0)
		end += copy(d.buf[end:], d.buf[d.r0:d.r0+n])
		d.r0 += n
		d.remaining -= n
	}
	return id, d.buf[start:end:end], nil
}
