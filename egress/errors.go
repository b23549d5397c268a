package egress

import (
	"errors"
	"fmt"
)

// ErrClosed is returned by a Control's methods after Control.Close.
var ErrClosed = errors.New("egress: control closed")

// ErrResumed is returned by Control.Resume called a second time on one
// link: decisions already flowing from the first resume point would be sent
// again, out of order.
var ErrResumed = errors.New("egress: resume already sent on this link")

// ErrLineTooLong is the cause of the *ProtocolError returned for a line over
// MaxLine bytes.
var ErrLineTooLong = errors.New("egress: line too long")

// ProtocolError is returned when the peer broke the control protocol: a
// line too long, not JSON, of an unknown kind or shape. The link ends.
type ProtocolError struct {
	// Line is the 1-based number of the offending line on the link, or 0
	// when the message was checked apart from a stream.
	Line int64
	// Msg says what was wrong.
	Msg string
	// Err is the underlying cause, if any (ErrLineTooLong, a JSON error).
	Err error
}

func (e *ProtocolError) Error() string {
	s := "egress: protocol violation"
	if e.Line > 0 {
		s += fmt.Sprintf(" on line %d", e.Line)
	}
	s += ": " + e.Msg
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *ProtocolError) Unwrap() error { return e.Err }

// IsProtocol reports whether err's chain holds a *ProtocolError.
func IsProtocol(err error) bool {
	var pe *ProtocolError
	return errors.As(err, &pe)
}

// VersionError is returned by Open when the proxy's hello names a protocol
// version other than ProtocolVersion.
type VersionError struct {
	Got string
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("egress: proxy speaks protocol version %q, want %q", e.Got, ProtocolVersion)
}

// RemoteError is the text of the proxy's {"error":...} message: why it
// refused a rules message, or why it is closing the link.
type RemoteError struct {
	Msg string
}

func (e *RemoteError) Error() string { return "egress: proxy: " + e.Msg }
