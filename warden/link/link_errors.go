package link

import (
	"errors"
	"fmt"
	"io"

	"github.com/stockade/stockade/warden/wire"
)

// ErrLinkClosed is returned (and is the link's Err) once Link.Close was
// called.
var ErrLinkClosed = errors.New("warden: link closed")

// ErrProcClosed is returned by Proc.Next after Proc.Close.
var ErrProcClosed = errors.New("warden: process output closed by its consumer")

// ErrForgotten is returned by a Proc's methods after Proc.Forget (Next
// still returns io.EOF if all output was read).
var ErrForgotten = errors.New("warden: process forgotten")

// ErrStdinClosed is returned by Proc.Write after Proc.CloseStdin, and by
// CloseStdin called twice.
var ErrStdinClosed = errors.New("warden: stdin closed")

// ErrNoStdin is returned by Proc.Write for a process spawned without
// Spawn.Stdin, or resumed after a reattach (its stdin offset is unknown).
var ErrNoStdin = errors.New("warden: the process has no stdin on this link")

// ErrExited is returned by Proc.Write once the process has exited.
var ErrExited = errors.New("warden: the process has exited")

// ErrRekeyUnconfirmed is matched by Link.Rekey's error when the request may
// have reached the warden but its answer did not come (the link ended, ctx
// ended): the warden holds the old secret or the new one. The error also
// wraps its cause.
var ErrRekeyUnconfirmed = errors.New("warden: rekey unconfirmed: the warden holds the old secret or the new one")

// SpawnError is returned by Link.Spawn when the warden answered
// SpawnFailed: the process never ran.
type SpawnError struct {
	// Code is 127 (not found) or 126 (found, not executable), as a shell.
	Code int
	// Msg is the warden's explanation.
	Msg string
}

func (e *SpawnError) Error() string {
	return fmt.Sprintf("warden: spawn failed with %d: %s", e.Code, e.Msg)
}

// VersionError is returned by Open when the warden's Hello names a version
// other than Version: the runtime does not speak to it.
type VersionError struct {
	Got string
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("warden: version %q, want %q", e.Got, wire.Version)
}

// OutputCutError is what Proc.Next returns once it handed on every byte
// received when the link ended before the process's output did: the
// output is cut, not at its end. It matches the link's error (errors.Is
// and errors.As see through it: ErrLinkClosed, a *ProtocolError) but never
// io.EOF, even when the link ended because the warden's output did: a
// reader that stops at io.EOF must not take a cut for the end.
type OutputCutError struct {
	// Err is the link's error.
	Err error
}

func (e *OutputCutError) Error() string {
	return "warden: output cut by the link's end: " + e.Err.Error()
}

// Is matches what the link's error matches, io.EOF excepted.
func (e *OutputCutError) Is(target error) bool {
	return target != io.EOF && target != io.ErrUnexpectedEOF && errors.Is(e.Err, target)
}

// As finds what the link's error holds.
func (e *OutputCutError) As(target any) bool { return errors.As(e.Err, target) }
