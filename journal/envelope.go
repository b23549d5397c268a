package journal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"
)

// EnvelopeVersion is the envelope version this build writes and the only one
// it reads.
const EnvelopeVersion uint16 = 1

const (
	flagTerminal = 1 << 0
	knownFlags   = flagTerminal

	envHeader  = 12 // version(2) flags(1) time(8) typelen(1)
	envTrailer = 4  // crc32c
	// MaxTypeLen is the longest event type, in bytes.
	MaxTypeLen = 255
	// MaxPayload is the largest payload of one event, in bytes.
	MaxPayload = 4 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// envelope is a decoded record; typ and payload alias the input.
type envelope struct {
	version  uint16
	terminal bool
	time     int64
	typ      []byte
	payload  []byte
}

// appendEnvelope appends the version-1 encoding of an event to dst.
func appendEnvelope(dst []byte, typ string, terminal bool, unixNano int64, payload []byte) []byte {
	start := len(dst)
	var flags byte
	if terminal {
		flags |= flagTerminal
	}
	dst = binary.BigEndian.AppendUint16(dst, EnvelopeVersion)
	dst = append(dst, flags)
	dst = binary.BigEndian.AppendUint64(dst, uint64(unixNano))
	dst = append(dst, byte(len(typ)))
	dst = append(dst, typ...)
	dst = append(dst, payload...)
	sum := crc32.Checksum(dst[start:], castagnoli)
	return binary.BigEndian.AppendUint32(dst, sum)
}

// decodeEnvelope decodes b. The returned slices alias b. Errors wrap
// ErrUnknownVersion or ErrCorrupt and say what is wrong, not where (the caller
// adds the stream and sequence).
func decodeEnvelope(b []byte) (envelope, error) {
	var e envelope
	if len(b) < 2 {
		return e, fmt.Errorf("%w: %d bytes, shorter than a version", ErrCorrupt, len(b))
	}
	e.version = binary.BigEndian.Uint16(b)
	if e.version != EnvelopeVersion {
		return e, fmt.Errorf("%w %d (this build reads %d)", ErrUnknownVersion, e.version, EnvelopeVersion)
	}
	if len(b) < envHeader+1+envTrailer {
		return e, fmt.Errorf("%w: %d bytes, shorter than an envelope", ErrCorrupt, len(b))
	}
	body := b[:len(b)-envTrailer]
	if want, got := binary.BigEndian.Uint32(b[len(body):]), crc32.Checksum(body, castagnoli); want != got {
		return e, fmt.Errorf("%w: checksum %08x, stored %08x", ErrCorrupt, got, want)
	}
	flags := body[2]
	if flags&^knownFlags != 0 {
		return e, fmt.Errorf("%w: unknown flags %#02x", ErrCorrupt, flags)
	}
	e.terminal = flags&flagTerminal != 0
	e.time = int64(binary.BigEndian.Uint64(body[3:11]))
	n := int(body[11])
	if n == 0 || envHeader+n > len(body) {
		return e, fmt.Errorf("%w: type length %d in a %d-byte envelope", ErrCorrupt, n, len(b))
	}
	e.typ = body[envHeader : envHeader+n]
	if !validType(e.typ) {
		return e, fmt.Errorf("%w: type %q", ErrCorrupt, e.typ)
	}
	e.payload = body[envHeader+n:]
	return e, nil
}

func validType[S string | []byte](s S) bool {
	if len(s) == 0 || len(s) > MaxTypeLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}

// unixTime converts stored nanoseconds to the time the journal reports: UTC,
// no monotonic reading, so what Append returns equals what Read returns.
func unixTime(n int64) time.Time { return time.Unix(0, n).UTC() }
