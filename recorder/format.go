package recorder

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/stockade/stockade/spec"
)

// Format constants (see the package doc).
const (
	magic      = "STKREC"
	version    = 1
	headerSize = 44
	// recOverhead is a record's framing: type, length, checksum.
	recOverhead = 1 + 4 + 4
	// MaxPayload bounds one record's payload (Docker's frame limit): a
	// larger chunk is split, a larger length on disk is corruption.
	MaxPayload = spec.DefaultFrameLimit
)

// Record types. Stdout and Stderr are Docker's stream ids.
const (
	TypeStdout byte = 1
	TypeStderr byte = 2
	TypeGap    byte = 3
	TypeEnd    byte = 4
)

// ErrCorrupt is the cause of every corruption Read reports: a whole record
// or header that fails its checksum or makes no sense, with more than zero
// bytes after it.
var ErrCorrupt = errors.New("corrupt recording")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// header is a segment's header.
type header struct {
	segment    uint64
	start      int64
	head, tail int64
}

func appendHeader(dst []byte, h header) []byte {
	b := make([]byte, headerSize)
	copy(b, magic)
	b[6] = version
	binary.BigEndian.PutUint64(b[8:], h.segment)
	binary.BigEndian.PutUint64(b[16:], uint64(h.start))
	binary.BigEndian.PutUint64(b[24:], uint64(h.head))
	binary.BigEndian.PutUint64(b[32:], uint64(h.tail))
	binary.BigEndian.PutUint32(b[40:], crc32.Checksum(b[:40], castagnoli))
	return append(dst, b...)
}

// appendRecord frames one record onto dst.
func appendRecord(dst []byte, typ byte, payload []byte) []byte {
	n := len(dst)
	dst = append(dst, typ, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(dst[n+1:], uint32(len(payload)))
	dst = append(dst, payload...)
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[n:], castagnoli))
}

// record is one decoded record; data aliases the decoded bytes.
type record struct {
	typ  byte
	data []byte
}

// end is an end record's payload.
type end struct {
	stdout, stderr, dropped int64
}

func endPayload(e end) []byte {
	b := make([]byte, 24)
	binary.BigEndian.PutUint64(b, uint64(e.stdout))
	binary.BigEndian.PutUint64(b[8:], uint64(e.stderr))
	binary.BigEndian.PutUint64(b[16:], uint64(e.dropped))
	return b
}

// segment is a decoded segment file.
type segment struct {
	hdr    header
	hasHdr bool
	recs   []record
	// bytes is the output bytes its stdout and stderr records hold, gaps
	// the bytes its gap records say were dropped.
	bytes, gaps int64
	end         *end
	// torn: the data stops inside a record (or a header): a crash cut an
	// unsynced write, or a write is under way.
	torn bool
}

// decodeSegment decodes one segment file's bytes. A corruption error (code
// journal, cause ErrCorrupt, naming the offset) comes with the segment
// decoded up to the bad record.
func decodeSegment(b []byte) (segment, error) {
	var s segment
	if len(b) < headerSize {
		if !zeros(b) && !isPrefix(b, magic) {
			return s, corrupt(0, "header of %d bytes is not a recording's", len(b))
		}
		s.torn = true // made, its header not yet (or never) written
		return s, nil
	}
	if string(b[:6]) != magic || crc32.Checksum(b[:40], castagnoli) != binary.BigEndian.Uint32(b[40:]) {
		if zeros(b) {
			s.torn = true
			return s, nil
		}
		return s, corrupt(0, "bad header (magic or checksum)")
	}
	if b[6] != version {
		return s, corrupt(0, "version %d; this build reads version %d", b[6], version)
	}
	s.hdr = header{
		segment: binary.BigEndian.Uint64(b[8:]),
		start:   int64(binary.BigEndian.Uint64(b[16:])),
		head:    int64(binary.BigEndian.Uint64(b[24:])),
		tail:    int64(binary.BigEndian.Uint64(b[32:])),
	}
	s.hasHdr = true
	if s.hdr.start < 0 || s.hdr.head < 0 || s.hdr.tail < 0 {
		return s, corrupt(0, "negative offset or bound in the header")
	}
	off := headerSize
	for off < len(b) {
		rest := b[off:]
		if len(rest) < 5 {
			s.torn = true // a record cut inside its framing
			return s, nil
		}
		typ, n := rest[0], int(binary.BigEndian.Uint32(rest[1:5]))
		if n > MaxPayload {
			if zeros(rest) {
				s.torn = true
				return s, nil
			}
			return s, corrupt(off, "record length %d is over the limit of %d", n, MaxPayload)
		}
		if len(rest) < 5+n+4 {
			s.torn = true // cut inside its payload or checksum
			return s, nil
		}
		whole := rest[:5+n+4]
		bad := ""
		switch {
		case crc32.Checksum(whole[:5+n], castagnoli) != binary.BigEndian.Uint32(whole[5+n:]):
			bad = "checksum mismatch"
		case typ < TypeStdout || typ > TypeEnd:
			bad = "unknown record type"
		case typ == TypeGap && n != 8, typ == TypeEnd && n != 24:
			bad = "payload of the wrong size"
		case s.end != nil:
			bad = "a record after the end record"
		}
		if bad != "" {
			if zeros(rest[len(whole):]) {
				// The last record, with nothing but zeros after it: a
				// crash left the file longer than the data that reached
				// the disk. Torn, not corrupt.
				s.torn = true
				return s, nil
			}
			return s, corrupt(off, "record of type %d: %s", typ, bad)
		}
		data := whole[5 : 5+n]
		switch typ {
		case TypeStdout, TypeStderr:
			s.bytes += int64(n)
		case TypeGap:
			s.gaps += int64(binary.BigEndian.Uint64(data))
		case TypeEnd:
			s.end = &end{
				stdout:  int64(binary.BigEndian.Uint64(data)),
				stderr:  int64(binary.BigEndian.Uint64(data[8:])),
				dropped: int64(binary.BigEndian.Uint64(data[16:])),
			}
		}
		s.recs = append(s.recs, record{typ: typ, data: data})
		off += len(whole)
	}
	return s, nil
}

func zeros(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func isPrefix(b []byte, s string) bool {
	if len(b) > len(s) {
		b = b[:len(s)]
	}
	return string(b) == s[:len(b)]
}

// corruptError locates a corruption in a segment; Read names the file.
type corruptError struct {
	off int
	msg string
}

func (e *corruptError) Error() string { return e.msg }
func (e *corruptError) Unwrap() error { return ErrCorrupt }

func corrupt(off int, format string, args ...any) error {
	return &corruptError{off: off, msg: fmt.Sprintf(format, args...)}
}
