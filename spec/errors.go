package spec

import (
	"errors"
	"fmt"
)

// Code classifies an Error. Each code names one kind of failure and what it
// stops (a create, a process, the whole sandbox, an Open); the table in
// docs/design.md ("Errors") lists them.
type Code string

const (
	// CodeUnsupported is returned when the daemon, image or policy is not
	// admitted by the profile, or when readback finds a field Docker did not
	// apply as asked. Nothing is left behind.
	CodeUnsupported Code = "unsupported"
	// CodeStreamFailure is returned when Docker's multiplexed output is
	// malformed (bad header, unknown stream id, EOF inside a frame) or the
	// daemon reports an error on stream 3. It fails the whole sandbox closed.
	CodeStreamFailure Code = "stream_failure"
	// CodeOutputLimit is returned when a frame exceeds the frame limit or the
	// combined stdout+stderr quota is exceeded. It stops the process.
	CodeOutputLimit Code = "output_limit"
	// CodeCancelled is returned when a caller's context ends (its deadline
	// included: a process's own timeout is CodeTimeout), a runtime closes
	// under a call, or a process tied to its caller (StopWithCaller) is
	// stopped because the caller went.
	CodeCancelled Code = "cancelled"
	// CodeTimeout is returned when a process outlives its timeout.
	CodeTimeout Code = "timeout"
	// CodeExecFailed is returned when Docker could not start the command
	// (exit 126/127 with the reason as text on stdout).
	CodeExecFailed Code = "exec_failed"
	// CodeJournal is returned when a journal write or read fails; nothing is
	// reported done.
	CodeJournal Code = "journal"
	// CodeJournalLocked is returned when another live process holds the
	// journal file.
	CodeJournalLocked Code = "journal_locked"
	// CodeIdentityMismatch is returned when the owner or daemon id differs
	// from the one recorded in the journal.
	CodeIdentityMismatch Code = "identity_mismatch"
	// CodeUnreconciled is returned for an operation on an entity an earlier
	// runtime left live and that has not been reconciled yet.
	CodeUnreconciled Code = "unreconciled"
	// CodeAdmissionClosed is returned when a process is asked of a sandbox
	// that is stopping or stopped.
	CodeAdmissionClosed Code = "admission_closed"
	// CodeInvalidArgument is returned for malformed input (policy, argv, ids,
	// flags); nothing is journaled.
	CodeInvalidArgument Code = "invalid_argument"
	// CodeNotFound is returned when a sandbox, process or Docker resource
	// named by the caller does not exist.
	CodeNotFound Code = "not_found"
	// CodeConflict is returned when a resource exists under our name but does
	// not carry exactly our labels, or an operation races another.
	CodeConflict Code = "conflict"
	// CodeEngine is returned when the Docker daemon fails a call or cannot be
	// reached, and no more specific code applies.
	CodeEngine Code = "engine"
	// CodeServerGone is returned by a client when the server it talked to
	// went away (stopped or died) while a process it attached to was
	// running: the process's end is not known, and it may run on (a
	// restarted server re-adopts it).
	CodeServerGone Code = "server_gone"
	// CodeResourceExhausted is returned when a bounded store of the
	// runtime's (the checkpoint store) has no room for what was asked;
	// nothing of the request is kept.
	CodeResourceExhausted Code = "resource_exhausted"
	// CodeInternal is returned when stockade itself failed (an actor
	// panicked): the process it ran fails, never the runtime.
	CodeInternal Code = "internal"
)

// Error is stockade's typed error: a code for programs, a message for people,
// and the cause it wraps. Match a code with errors.As or IsCode; match the
// cause with errors.Is.
type Error struct {
	Code Code
	// Op names the operation or component that failed, e.g. "framing" or
	// "journal.append".
	Op string
	// Msg says what was wrong, naming the offending value where it helps.
	Msg   string
	Cause error
}

func (e *Error) Error() string {
	s := string(e.Code)
	if e.Op != "" {
		s = e.Op + ": " + s
	}
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Cause }

// Is reports whether target is an *Error with the same code and no message,
// so errors.Is(err, spec.ErrTimeout) matches any timeout.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Msg == "" && t.Op == "" && t.Cause == nil && t.Code == e.Code
}

// Errorf builds an *Error with a formatted message and no cause.
func Errorf(code Code, op, format string, args ...any) *Error {
	return &Error{Code: code, Op: op, Msg: fmt.Sprintf(format, args...)}
}

// Wrap builds an *Error that wraps cause.
func Wrap(code Code, op string, cause error, format string, args ...any) *Error {
	return &Error{Code: code, Op: op, Msg: fmt.Sprintf(format, args...), Cause: cause}
}

// CodeOf returns the code of the first *Error in err's chain, or "" if none.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// IsCode reports whether err's chain holds an *Error with code c.
func IsCode(err error, c Code) bool { return errors.Is(err, &Error{Code: c}) }

// Sentinels for errors.Is. Each matches any *Error with its code.
var (
	ErrUnsupported      = &Error{Code: CodeUnsupported}
	ErrStreamFailure    = &Error{Code: CodeStreamFailure}
	ErrOutputLimit      = &Error{Code: CodeOutputLimit}
	ErrCancelled        = &Error{Code: CodeCancelled}
	ErrTimeout          = &Error{Code: CodeTimeout}
	ErrExecFailed       = &Error{Code: CodeExecFailed}
	ErrJournal          = &Error{Code: CodeJournal}
	ErrJournalLocked    = &Error{Code: CodeJournalLocked}
	ErrIdentityMismatch = &Error{Code: CodeIdentityMismatch}
	ErrUnreconciled     = &Error{Code: CodeUnreconciled}
	ErrAdmissionClosed  = &Error{Code: CodeAdmissionClosed}
	ErrInvalidArgument  = &Error{Code: CodeInvalidArgument}
	ErrNotFound         = &Error{Code: CodeNotFound}
	ErrConflict         = &Error{Code: CodeConflict}
	ErrEngine           = &Error{Code: CodeEngine}
	ErrInternal         = &Error{Code: CodeInternal}
)
