package journal

import (
	"github.com/stockade/stockade/internal/safedir"
	"github.com/stockade/stockade/spec"
)

// journalDir is what a journal's directory must be: the opener's own
// (owned by its effective uid) and not writable by group or others. Its
// owner, or anyone who may write in it, could replace the journal under
// the runtime (a history that never happened), or plant a link where the
// runtime writes its pid file, server marker or recordings.
var journalDir = safedir.Rule{
	Deny: 0o022,
	What: "journal directory",
	Self: "this process",
	Risk: "its owner could replace the journal with a history that never happened, or plant links where the runtime writes",
	Else: "or choose another journal path (--journal or $STOCKADE_JOURNAL)",
}

// Dir is a journal's directory, opened and checked by OpenDir. Join names
// a file in it through the open directory, so the file is the one in the
// directory that was checked. Close it once those names are used.
type Dir = safedir.Dir

// OpenDir opens dir, a journal's directory, and refuses it unless this
// process's effective uid owns it and group and others cannot write in it
// (invalid_argument, cause ErrDirOwner or ErrDirWritable; a dir that is
// itself a symbolic link is refused too, cause ErrDirLink), naming the
// directory, its owner or mode, the expected one and what to do. op
// prefixes the error. A directory that cannot be opened is a journal
// error (not_found when it is missing). Open calls it; so does a server
// that writes its marker beside a journal before opening it.
func OpenDir(op, dir string) (*Dir, error) {
	r := journalDir
	r.Op = op
	d, err := safedir.Open(dir, r)
	if err == nil || spec.CodeOf(err) != "" {
		return d, err
	}
	return nil, errJournal(op, err, "open the journal directory %s", dir)
}
