package framing

import (
	"encoding/binary"
	"io"
	"strconv"

	"github.com/stockade/stockade/spec"
)

// StreamID is the first byte of a frame header: which stream the payload
// belongs to.
type StreamID uint8

// The stream ids Docker uses. Only Stdout and Stderr carry output; Systemerr
// carries the daemon's own error; Stdin never appears on an attach stream
// and is rejected.
const (
	Stdin     StreamID = 0
	Stdout    StreamID = 1
	Stderr    StreamID = 2
	Systemerr StreamID = 3
)

// HeaderLen is the size of a frame header: the stream id, three zero bytes and
// the payload length as a big-endian uint32.
const HeaderLen = 8

// maxEmptyReads is how many (0, nil) reads in a row the Decoder tolerates
// before it gives up with io.ErrNoProgress (as bufio does).
const maxEmptyReads = 100

// Options tune a Decoder. The zero value gives the defaults.
type Options struct {
	// FrameLimit is the largest payload length a header may declare; a larger
	// one is an output_limit error. Zero or negative means
	// spec.DefaultFrameLimit (1 MiB).
	FrameLimit int
	// ChunkSize bounds both one read from the source and one piece Next
	// returns (a read asks for at most max(ChunkSize, HeaderLen) bytes).
	// Zero or negative means spec.DefaultReceiveChunk (64 KiB).
	ChunkSize int
}

func (o Options) withDefaults() Options {
	if o.FrameLimit <= 0 {
		o.FrameLimit = spec.DefaultFrameLimit
	}
	if o.ChunkSize <= 0 {
		o.ChunkSize = spec.DefaultReceiveChunk
	}
	return o
}

// Decoder reads Docker's multiplexed stdout/stderr stream from a reader and
// hands out its payload piece by piece. It owns one buffer that starts small
// (InitialBuffer) and doubles each time a read fills it, up to
// max(ChunkSize, HeaderLen) bytes — so thousands of idle or quiet processes
// cost little, and a busy stream reaches full-size reads after a few. It
// allocates nothing per frame once grown; it reads from the source only when
// it needs more bytes, at most one buffer at a time.
//
// A Decoder is not safe for concurrent use.
type Decoder struct {
	r     io.Reader
	buf   []byte
	r0    int   // start of unconsumed bytes in buf
	w0    int   // end of valid bytes in buf
	off   int64 // bytes read from r so far
	chunk int
	limit int
	size  int  // the buffer's full size
	full  bool // the last read filled the buffer: grow before the next

	stream    StreamID // stream of the current frame
	remaining int      // payload bytes of the current frame not yet handed out
	frameLen  int      // declared length of the current frame
	frameOff  int64    // input offset of the current frame's header

	msg  []byte // the stream-3 payload read so far
	eof  bool   // r returned io.EOF
	rerr error  // a reader error that came with data, reported when needed
	err  error  // sticky: malformed or torn input
}

// NewDecoder returns a Decoder reading from r. For an exec attach, r must be
// the hijacked response's buffered reader, not the raw connection: the
// buffered reader may already hold the first output bytes.
func NewDecoder(r io.Reader, opts Options) *Decoder {
	opts = opts.withDefaults()
	size := max(opts.ChunkSize, HeaderLen)
	return &Decoder{
		r:     r,
		buf:   make([]byte, min(size, max(InitialBuffer, HeaderLen))),
		chunk: opts.ChunkSize,
		limit: opts.FrameLimit,
		size:  size,
	}
}

// InitialBuffer is the size a Decoder's buffer starts at.
const InitialBuffer = 4 << 10

// Reset discards the Decoder's state and makes it read from r, keeping its
// buffer and options.
func (d *Decoder) Reset(r io.Reader) {
	*d = Decoder{r: r, buf: d.buf, chunk: d.chunk, limit: d.limit, size: d.size}
}

// InputOffset returns how many bytes of the source the Decoder has consumed:
// the offset in the input of the next byte it will decode.
func (d *Decoder) InputOffset() int64 { return d.off - int64(d.w0-d.r0) }

// Next returns the next piece of payload: at most ChunkSize bytes, never
// empty, all from one frame, on Stdout or Stderr. A frame longer than that
// (or than what the source has delivered so far) comes as several pieces in
// order. The slice aliases the Decoder's buffer and is valid only until the
// next call to Next, Reset or CopyTo; the caller must not retain it.
//
// Zero-length frames are skipped. Next returns io.EOF, bare, only when the
// source ends cleanly between frames; every other error is a *spec.Error
// (see errors.go for the table). Errors about the input itself (malformed,
// oversized, torn, the daemon's error) are sticky: every later call returns
// the same error. An error from the source is returned once; a later call
// reads again, so a caller that gets a timeout may retry.
func (d *Decoder) Next() (StreamID, []byte, error) {
	if err := d.ready(); err != nil {
		return 0, nil, err
	}
	n := min(d.remaining, d.w0-d.r0, d.chunk)
	p := d.buf[d.r0 : d.r0+n : d.r0+n]
	d.r0 += n
	d.remaining -= n
	return d.stream, p, nil
}

// ready makes sure the current frame is on stdout or stderr and has at least
// one payload byte in the buffer, reading headers (and skipping empty frames)
// as needed.
func (d *Decoder) ready() error {
	for {
		if d.err != nil {
			return d.err
		}
		if d.stream == Systemerr {
			if err := d.daemonError(); err != io.EOF { //nolint:errorlint // more's bare io.EOF, see more
				return err
			}
			return d.err
		}
		if d.remaining > 0 {
			if d.w0 > d.r0 {
				return nil
			}
			if err := d.more(); err != nil {
				if err == io.EOF { //nolint:errorlint // more's bare io.EOF, see more
					d.err = errTorn(d.frameOff, "payload", uint64(d.frameLen-d.remaining), uint64(d.frameLen))
					return d.err
				}
				return err
			}
			continue
		}
		if err := d.header(); err != nil {
			return err
		}
	}
}

// header reads and checks the next frame header and makes its frame current.
func (d *Decoder) header() error {
	for d.w0-d.r0 < HeaderLen {
		if err := d.more(); err != nil {
			if err == io.EOF { //nolint:errorlint // more's bare io.EOF, see more
				if d.w0 == d.r0 {
					return io.EOF
				}
				d.err = errTorn(d.InputOffset(), "header", uint64(d.w0-d.r0), HeaderLen)
				return d.err
			}
			return err
		}
	}
	off := d.InputOffset()
	h := d.buf[d.r0 : d.r0+HeaderLen]
	id := StreamID(h[0])
	switch {
	case id == Stdin:
		d.err = errHeader(off, h, "stream 0 (stdin) is not an output stream")
	case id > Systemerr:
		d.err = errHeader(off, h, "unknown stream id "+strconv.Itoa(int(id)))
	case h[1]|h[2]|h[3] != 0:
		d.err = errHeader(off, h, "nonzero padding")
	}
	if d.err != nil {
		return d.err
	}
	n := binary.BigEndian.Uint32(h[4:])
	if uint64(n) > uint64(d.limit) {
		d.err = errTooLarge(off, id, n, d.limit)
		return d.err
	}
	d.r0 += HeaderLen
	d.stream, d.remaining, d.frameLen, d.frameOff = id, int(n), int(n), off
	return nil
}

// daemonError reads the current stream-3 frame's payload (bounded by the
// frame limit, checked already) and, once it has all of it, returns it as
// the sticky error. It allocates, but only as the payload arrives, and only
// once: the error is terminal. A reader error on the way is reported like
// any other, and a later call carries on.
func (d *Decoder) daemonError() error {
	for d.remaining > 0 {
		if d.w0 == d.r0 {
			if err := d.more(); err != nil {
				if err == io.EOF { //nolint:errorlint // more's bare io.EOF, see more
					d.err = errTorn(d.frameOff, "payload", uint64(len(d.msg)), uint64(d.frameLen))
				}
				return err
			}
			continue
		}
		n := min(d.remaining, d.w0-d.r0)
		d.msg = append(d.msg, d.buf[d.r0:d.r0+n]...)
		d.r0 += n
		d.remaining -= n
	}
	d.err = errDaemon(d.frameOff, d.msg)
	d.msg = nil
	return d.err
}

// more reads at least one more byte into the buffer. It is called only when
// the buffer holds less than a header (so it first moves those few bytes to
// the front) and returns io.EOF, bare, at the end of the source. Its callers
// test for that io.EOF with ==, not errors.Is: a source's error that wraps
// io.EOF is a failure of the source (io.Reader's contract: Read returns
// io.EOF itself), returned wrapped by errRead, which errors.Is would take
// for the end, turning a failed read into a clean end or a torn frame.
func (d *Decoder) more() error {
	if d.rerr != nil {
		err := d.rerr
		d.rerr = nil
		return errRead(d.off, err)
	}
	if d.eof {
		return io.EOF
	}
	if d.full && len(d.buf) < d.size {
		grown := make([]byte, min(2*len(d.buf), d.size))
		d.w0 = copy(grown, d.buf[d.r0:d.w0])
		d.buf, d.r0 = grown, 0
	}
	if d.r0 > 0 {
		d.w0 = copy(d.buf, d.buf[d.r0:d.w0])
		d.r0 = 0
	}
	for range maxEmptyReads {
		space := len(d.buf) - d.w0
		n, err := d.r.Read(d.buf[d.w0:])
		if n < 0 || n > space {
			d.err = errInvalidRead(n, space)
			return d.err
		}
		d.full = n == space
		d.w0 += n
		d.off += int64(n)
		switch {
		case err == io.EOF:
			d.eof = true
			if n > 0 {
				return nil
			}
			return io.EOF
		case err != nil:
			if n > 0 {
				d.rerr = err
				return nil
			}
			return errRead(d.off, err)
		case n > 0:
			return nil
		}
	}
	return errRead(d.off, io.ErrNoProgress)
}
