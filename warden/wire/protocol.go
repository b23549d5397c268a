package wire

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Version is the protocol and binary version a warden reports in Hello. The
// runtime runs only a warden of its own version: one that differs is
// replaced (its processes stopped), never spoken to. 3: a request about one
// process that the warden cannot apply is refused alone (2 ended the
// link), a Forget before the reap kills the process and drops it once
// reaped, and a table is made after any spawn in progress. 4: Rekey
// replaces the secret that authenticates reattaches (a warden of 3 does
// not know the message). 5: Changes, what each process did under
// /workspace, comes before each Exited (and first after a Resume of an
// exited process).
const Version = "stockade-warden/5"

// Limits of the wire format.
const (
	HeaderSize = 9
	// MaxPayload bounds every frame's payload: a Spawn carries up to
	// spec.MaxArgvEnvBytes of argv and env, JSON-escaped.
	MaxPayload = 2 << 20
	// MaxData bounds the data an Out or In frame carries (an Out payload
	// has one more byte: the stream id).
	MaxData = 64<<10 - 1
	// DefaultWindow is the output window per process: the bytes a warden
	// keeps unacknowledged (and a full window blocks that child).
	DefaultWindow = 1 << 20
	// DefaultStdinWindow is the stdin window per process.
	DefaultStdinWindow = 64 << 10
	// MaxArgs bounds a Spawn's argv and env entries.
	MaxArgs = 4096
)

// Type is a frame's message type.
type Type uint8

const (
	// TInit (runtime → warden, control, JSON Init): the first message of
	// the first link; carries the secret that authenticates reattaches.
	TInit Type = 1 + iota
	// TChallenge (warden → runtime, control, JSON Challenge): the first
	// message of a reattach link.
	TChallenge
	// TAuth (runtime → warden, control, JSON Auth): the answer.
	TAuth
	// THello (warden → runtime, control, JSON Hello): the link is up.
	THello
	// TSpawn (runtime → warden, process channel, JSON Spawn).
	TSpawn
	// TStarted (warden → runtime, process channel, JSON Started).
	TStarted
	// TSpawnFailed (warden → runtime, process channel, JSON SpawnFailed):
	// the process never ran; the channel is free again.
	TSpawnFailed
	// TOut (warden → runtime, process channel): one byte stream id (1
	// stdout, 2 stderr) then 1..MaxData bytes of output.
	TOut
	// TAck (runtime → warden, process channel): 8 bytes, big-endian, the
	// output offset the runtime has taken up to.
	TAck
	// TIn (runtime → warden, process channel): 1..MaxData bytes of stdin.
	TIn
	// TInAck (warden → runtime, process channel): 8 bytes, the stdin
	// offset written to the child up to.
	TInAck
	// TCloseIn (runtime → warden, process channel, empty): end of stdin
	// once what was sent is written.
	TCloseIn
	// TSignal (runtime → warden, process channel): 4 bytes, the signal
	// number, sent to the process's group.
	TSignal
	// TResize (runtime → warden, process channel): 4 bytes, rows then
	// columns (uint16 each) of the process's terminal.
	TResize
	// TExited (warden → runtime, process channel, JSON Exited): the child
	// was reaped and its pipes reached their end; Out frames may still
	// follow up to Exited.Output.
	TExited
	// TForget (runtime → warden, process channel, empty): the runtime has
	// journaled the end and read all output; the warden drops the entry.
	TForget
	// TList (runtime → warden, control, empty): asks for the Table.
	TList
	// TTable (warden → runtime, control, JSON Table).
	TTable
	// TResume (runtime → warden, process channel): 8 bytes, the output
	// offset to send again from (at least the last Ack).
	TResume
	// TReaped (warden → runtime, process channel, JSON Reaped): the child
	// was reaped; its output may go on (a descendant can hold its pipes)
	// until Exited. It is sent ahead of pending output, so a process no
	// consumer reads can still be known ended (and stopped, forgotten).
	TReaped
	// TRekey (runtime → warden, control, JSON Rekey): from now on a
	// reattach must answer with the MAC under this secret.
	TRekey
	// TRekeyed (warden → runtime, control, empty): the Rekey before it
	// took effect.
	TRekeyed
	// TChanges (warden → runtime, process channel, JSON Changes): what the
	// process did under /workspace; sent just before each Exited, and
	// before anything else after a Resume of an exited process.
	TChanges
	typeEnd
)

var typeNames = [...]string{"", "init", "challenge", "auth", "hello", "spawn", "started", "spawn_failed", "out", "ack", "in", "in_ack", "close_in", "signal", "resize", "exited", "forget", "list", "table", "resume", "reaped", "rekey", "rekeyed", "changes"}

func (t Type) String() string {
	if t > 0 && t < typeEnd {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// control reports whether t travels on channel 0 (and only there).
func (t Type) control() bool {
	switch t {
	case TInit, TChallenge, TAuth, THello, TList, TTable, TRekey, TRekeyed:
		return true
	default:
		// every other type travels on a process channel
	}
	return false
}

// Frame is one decoded frame. Payload is valid until the next Read.
type Frame struct {
	Type    Type
	Channel uint32
	Payload []byte
}

// ProtocolError is a peer's violation of the protocol: the link that
// carried it ends.
type ProtocolError struct {
	What string
}

func (e *ProtocolError) Error() string { return "warden protocol: " + e.What }

// Violation is a ProtocolError saying what the peer broke.
func Violation(format string, args ...any) error {
	return &ProtocolError{What: fmt.Sprintf(format, args...)}
}

// IsProtocol reports whether err is a protocol violation.
func IsProtocol(err error) bool {
	var p *ProtocolError
	return errors.As(err, &p)
}

// Reader decodes frames from a stream. It allocates one payload buffer of
// MaxPayload and nothing per frame.
type Reader struct {
	r   *bufio.Reader
	hdr [HeaderSize]byte
	buf []byte
}

// NewReader returns a frame reader on r.
func NewReader(r io.Reader) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 64<<10), buf: make([]byte, MaxPayload)}
}

// Read returns the next frame, checked for shape (CheckShape). io.EOF only
// at a frame boundary; a stream that ends inside a frame is a violation.
// A frame that fails CheckShape is returned with its violation: it was
// read whole, so the stream is still in step (the warden refuses such a
// frame on a process channel alone); a violation of the framing itself
// returns a zero Frame.
func (r *Reader) Read() (Frame, error) {
	if _, err := io.ReadFull(r.r, r.hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return Frame{}, Violation("the stream ended inside a frame header")
		}
		return Frame{}, err
	}
	f := Frame{Type: Type(r.hdr[0]), Channel: binary.BigEndian.Uint32(r.hdr[1:5])}
	n := binary.BigEndian.Uint32(r.hdr[5:9])
	if n > MaxPayload {
		return Frame{}, Violation("%v frame of %d bytes, more than %d", f.Type, n, MaxPayload)
	}
	if _, err := io.ReadFull(r.r, r.buf[:n]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return Frame{}, Violation("the stream ended inside a %v frame", f.Type)
		}
		return Frame{}, err
	}
	f.Payload = r.buf[:n]
	return f, CheckShape(f)
}

// CheckShape checks what can be checked of a frame without context: a known
// type, on the right kind of channel, with a payload of the right size.
// JSON payloads are checked when decoded.
func CheckShape(f Frame) error {
	if f.Type == 0 || f.Type >= typeEnd {
		return Violation("unknown frame type %d", uint8(f.Type))
	}
	if f.Type.control() != (f.Channel == 0) {
		if f.Channel == 0 {
			return Violation("%v frame on the control channel", f.Type)
		}
		return Violation("%v frame on process channel %d", f.Type, f.Channel)
	}
	n := len(f.Payload)
	switch f.Type {
	case TOut:
		if n < 2 || n > MaxData+1 || (f.Payload[0] != 1 && f.Payload[0] != 2) {
			return Violation("out frame of %d bytes for stream %d", n, firstByte(f.Payload))
		}
	case TIn:
		if n == 0 || n > MaxData {
			return Violation("in frame of %d bytes", n)
		}
	case TAck, TInAck, TResume:
		if n != 8 {
			return Violation("%v frame of %d bytes, not 8", f.Type, n)
		}
	case TSignal, TResize:
		if n != 4 {
			return Violation("%v frame of %d bytes, not 4", f.Type, n)
		}
	case TCloseIn, TForget, TList, TRekeyed:
		if n != 0 {
			return Violation("%v frame with a payload", f.Type)
		}
	default: // JSON
		if n < 2 {
			return Violation("%v frame without its JSON object", f.Type)
		}
	}
	return nil
}

func firstByte(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	return int(b[0])
}

// Offset decodes an Ack, InAck or Resume payload.
func Offset(f Frame) uint64 { return binary.BigEndian.Uint64(f.Payload) }

// SignalNumber decodes a Signal payload.
func SignalNumber(f Frame) int { return int(binary.BigEndian.Uint32(f.Payload)) }

// Size decodes a Resize payload.
func Size(f Frame) (rows, cols uint16) {
	return binary.BigEndian.Uint16(f.Payload[0:2]), binary.BigEndian.Uint16(f.Payload[2:4])
}

// Decode decodes a JSON control payload into v (a pointer to the message
// type of f.Type) and validates it.
func Decode(f Frame, v interface{ Validate() error }) error {
	if err := json.Unmarshal(f.Payload, v); err != nil {
		return Violation("%v payload: %v", f.Type, err)
	}
	if err := v.Validate(); err != nil {
		return Violation("%v: %v", f.Type, err)
	}
	return nil
}

// Writer encodes frames onto a stream. It is safe for concurrent use: each
// frame is written whole.
type Writer struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

// NewWriter returns a frame writer on w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write writes one frame with the payload parts concatenated.
func (w *Writer) Write(t Type, ch uint32, parts ...[]byte) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	if n > MaxPayload {
		return fmt.Errorf("warden: %v frame of %d bytes exceeds %d", t, n, MaxPayload)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	b := append(w.buf[:0], byte(t), 0, 0, 0, 0, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(b[1:5], ch)
	binary.BigEndian.PutUint32(b[5:9], uint32(n))
	for _, p := range parts {
		b = append(b, p...)
	}
	w.buf = b
	_, err := w.w.Write(b)
	return err
}

// WriteJSON writes a control message.
func (w *Writer) WriteJSON(t Type, ch uint32, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("warden: encoding %v: %w", t, err)
	}
	return w.Write(t, ch, b)
}

// WriteOffset writes an Ack, InAck or Resume.
func (w *Writer) WriteOffset(t Type, ch uint32, off uint64) error {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], off)
	return w.Write(t, ch, b[:])
}

// WriteSignal writes a Signal.
func (w *Writer) WriteSignal(ch uint32, sig int) error {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(sig))
	return w.Write(TSignal, ch, b[:])
}

// WriteResize writes a Resize.
func (w *Writer) WriteResize(ch uint32, rows, cols uint16) error {
	var b [4]byte
	binary.BigEndian.PutUint16(b[0:2], rows)
	binary.BigEndian.PutUint16(b[2:4], cols)
	return w.Write(TResize, ch, b[:])
}

// WriteOut writes an Out frame: stream (1 or 2) then data.
func (w *Writer) WriteOut(ch uint32, stream byte, data []byte) error {
	return w.Write(TOut, ch, []byte{stream}, data)
}

// OutHeaderSize is the bytes AppendOutHeader adds: the frame header and
// the stream id.
const OutHeaderSize = HeaderSize + 1

// AppendOutHeader appends the start of an Out frame carrying n bytes of
// stream's data (the data itself follows): a sender that builds frames in
// its own buffer writes them with WriteFrames, without one more copy.
func AppendOutHeader(b []byte, ch uint32, stream byte, n int) []byte {
	b = append(b, byte(TOut), 0, 0, 0, 0, 0, 0, 0, 0, stream)
	h := b[len(b)-OutHeaderSize:]
	binary.BigEndian.PutUint32(h[1:5], ch)
	binary.BigEndian.PutUint32(h[5:9], uint32(n+1))
	return b
}

// WriteFrames writes b, whole frames already encoded (AppendOutHeader and
// its data, say), in one write, between the frames of other callers.
func (w *Writer) WriteFrames(b []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, err := w.w.Write(b)
	return err
}
