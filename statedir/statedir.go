// Package statedir is the one layout of a runtime's state: the journal
// file, and everything kept beside it, named from the journal's path. The
// journal, the recorder, the checkpoint store, the helpers' installer and
// the server each ask it for their place instead of computing their own.
// It imports spec (for its error) and the standard library only.
//
//	~/.local/state/stockade/   the journal's directory (DefaultJournal)
//	  journal.db               the journal (bbolt)
//	  journal.rec/             the recordings: output, changes, stdin, egress decisions
//	  journal.checkpoints/     the content-addressed checkpoint store
//	  journal.sock             the served runtime's socket
//	  helpers/                 the installed warden and egress binaries
package statedir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/stockade/stockade/spec"
)

// JournalEnv names the variable that, when set, is the journal's path.
const JournalEnv = "STOCKADE_JOURNAL"

// SocketEnv names the variable that, when set, is the served runtime's
// socket, whatever the journal.
const SocketEnv = "STOCKADE_SOCKET"

// ErrNoHome: no journal path could be made (no $STOCKADE_JOURNAL, no
// absolute $XDG_STATE_HOME, and no home directory).
var ErrNoHome = errors.New("no journal path: set STOCKADE_JOURNAL")

// DefaultJournal is the journal's path: $STOCKADE_JOURNAL if set, else
// $XDG_STATE_HOME/stockade/journal.db (when absolute), else
// ~/.local/state/stockade/journal.db; invalid_argument (ErrNoHome) when
// none can be made.
func DefaultJournal() (string, error) {
	if p := os.Getenv(JournalEnv); p != "" {
		return p, nil
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "stockade", "journal.db"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", spec.Wrap(spec.CodeInvalidArgument, "statedir", errors.Join(ErrNoHome, err), "the default journal path")
	}
	return filepath.Join(home, ".local", "state", "stockade", "journal.db"), nil
}

// beside is the journal's path with its extension replaced by ext.
func beside(journal, ext string) string {
	return strings.TrimSuffix(journal, filepath.Ext(journal)) + ext
}

// Recordings is the recording directory of the journal: journal.db →
// journal.rec, beside it.
func Recordings(journal string) string { return beside(journal, ".rec") }

// Checkpoints is the checkpoint store of the journal: journal.db →
// journal.checkpoints, beside it.
func Checkpoints(journal string) string { return beside(journal, ".checkpoints") }

// Socket is the served runtime's socket of the journal: journal.db →
// journal.sock, beside it.
func Socket(journal string) string { return beside(journal, ".sock") }

// ServedSocket is where the server of a journal listens, and where a
// client dials it: $STOCKADE_SOCKET when set, else the socket beside the
// journal (journal "" means DefaultJournal).
func ServedSocket(journal string) (string, error) {
	if env := os.Getenv(SocketEnv); env != "" {
		return env, nil
	}
	if journal == "" {
		var err error
		if journal, err = DefaultJournal(); err != nil {
			return "", err
		}
	}
	return Socket(journal), nil
}

// Helpers is the directory the embedded helper binaries are installed
// under: helpers/ in the journal's directory.
func Helpers(journal string) string { return filepath.Join(filepath.Dir(journal), "helpers") }
