package journal

import (
	"errors"

	"github.com/stockade/stockade/internal/safedir"
	"github.com/stockade/stockade/spec"
)

// Every error the journal returns is a *spec.Error. Its Code says what kind of
// failure it is (journal, journal_locked, identity_mismatch, invalid_argument,
// not_found, cancelled); the causes below, matched with errors.Is, say
// precisely what went wrong.
var (
	// ErrCorrupt is the cause when a stored envelope or index entry does not
	// decode (short, bad checksum, bad field). The error names the stream and
	// sequence. Code journal.
	ErrCorrupt = errors.New("journal: corrupt record")

	// ErrUnknownVersion is the cause when a stored envelope has a version this
	// build does not read. The error names the stream and sequence. Code
	// journal.
	ErrUnknownVersion = errors.New("journal: unknown envelope version")

	// ErrUnknownSchema is the cause when the file's meta schema version is one
	// this build does not read. The file is left untouched. Code journal.
	ErrUnknownSchema = errors.New("journal: unknown schema version")

	// ErrNotJournal is the cause when a bbolt file holds buckets but no
	// stockade meta bucket, or is not a bbolt file at all. Code journal.
	ErrNotJournal = errors.New("journal: not a stockade journal")

	// ErrCopy is the cause when a writable Open meets a copy made by CopyTo
	// or CopyFile. A copy carries the original's owner id, so a runtime on it
	// would remove the original's newer sandboxes as orphans: it opens only
	// read-only, or becomes a journal again through Restore. The error names
	// the file, the original's path and when the copy was taken; the file is
	// untouched. Code identity_mismatch: like an owner mismatch, the file's
	// identity is not that of a runtime's journal (nothing is corrupt, and
	// retrying cannot help).
	ErrCopy = errors.New("journal: file is a copy of a journal")

	// ErrInconsistent is the cause Verify returns when the indexes disagree
	// with the streams or a stream has a gap. Code journal.
	ErrInconsistent = errors.New("journal: index disagrees with streams")

	// ErrTerminal is the cause when an Append targets a stream whose last
	// event was terminal. Nothing of that call is written. Code
	// invalid_argument.
	ErrTerminal = errors.New("journal: stream is terminal")

	// ErrSequence is the cause when a Sequenced record finds its stream at
	// another position than After (and its last event is not this record).
	// Nothing of that call is written. Code conflict.
	ErrSequence = errors.New("journal: stream is not at the expected sequence")

	// ErrUncertain is the cause when an Append stopped waiting for its
	// commit (its context ended): the records may or may not be stored. A
	// Sequenced retry settles it. Code cancelled.
	ErrUncertain = errors.New("journal: append outcome unknown")

	// ErrClosed is the cause when a Journal is used after Close. Code journal.
	ErrClosed = errors.New("journal: closed")

	// ErrReadOnly is the cause when a write is asked of a journal opened
	// read-only. Code journal.
	ErrReadOnly = errors.New("journal: opened read-only")

	// ErrDirOwner is the cause when the journal's directory is owned by
	// another uid than the opener's effective one: its owner could replace
	// the file. Nothing is opened or made in it. The error names the
	// directory, its owner, the expected one and what to do (chown it, or
	// choose another path). Code invalid_argument.
	ErrDirOwner = safedir.ErrForeign

	// ErrDirWritable is the cause when group or others may write in the
	// journal's directory. Nothing is opened or made in it. Code
	// invalid_argument.
	ErrDirWritable = safedir.ErrWritable

	// ErrDirLink is the cause when the journal's directory is itself a
	// symbolic link (its parents may be). Code invalid_argument.
	ErrDirLink = safedir.ErrSymlink
)

func errJournal(op string, cause error, format string, args ...any) error {
	return spec.Wrap(spec.CodeJournal, op, cause, format, args...)
}

func errInvalid(op, format string, args ...any) error {
	return spec.Errorf(spec.CodeInvalidArgument, op, format, args...)
}
