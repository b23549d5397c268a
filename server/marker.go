package server

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	stjournal "github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/spec"
)

// MarkerPath is the file beside a journal that says a server holds it (or
// is about to): journal.db → journal.serving, holding the server's pid. A
// command that finds the journal's socket silent while the marker names a
// live process knows the journal's lock holder is a server still
// recovering, and waits for its socket instead of opening the journal
// itself (which would fail journal_locked).
func MarkerPath(journal string) string {
	return strings.TrimSuffix(journal, filepath.Ext(journal)) + ".serving"
}

// WriteMarker writes this process's pid in the journal's marker, before the
// journal is opened, and returns the function that removes it (only while
// it still names this process). A marker that names another live process
// means a server already holds the journal: journal_locked, at once.
//
// The journal's directory is checked as the journal's Open checks it
// (journal.OpenDir: the server's own, not writable by others; else
// invalid_argument naming it, its owner and what to do), and the marker is
// written and removed through that opened directory: nothing is written in
// a directory another user could have planted a link in.
func WriteMarker(journal string) (func(), error) {
	path := MarkerPath(journal)
	self := os.Getpid()
	if pid := MarkerPID(journal); pid > 0 && pid != self {
		return nil, spec.Errorf(spec.CodeJournalLocked, "serve", "journal %s is held by a server, pid %d", journal, pid)
	}
	// On a fresh machine the marker comes before the journal, so before
	// the directory the journal's Open would make: make it the same way.
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	dir, err := stjournal.OpenDir("serve", filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	at := dir.Join(filepath.Base(path))
	tmp := fmt.Sprintf("%s.%d.tmp", at, self)
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(self)+"\n"), 0o600); err != nil {
		_ = dir.Close() // the WriteFile error is the one reported
		return nil, err
	}
	if err := os.Rename(tmp, at); err != nil {
		_ = os.Remove(tmp) // the Rename error is the one reported
		_ = dir.Close()
		return nil, err
	}
	return func() {
		if stjournal.ReadPIDFile(at) == self {
			// One left behind names a dead pid, which MarkerPID ignores.
			_ = os.Remove(at)
		}
		_ = dir.Close() // only read
	}, nil
}

// MarkerPID returns the pid in the journal's marker when that process is
// alive, else 0 (no marker, or one a killed server left).
func MarkerPID(journal string) int {
	pid := stjournal.LivePIDFile(MarkerPath(journal))
	if pid <= 0 {
		return 0
	}
	// A marker a killed server left names a pid the system may have
	// reused: believe it only while that pid holds the journal's lock, or
	// is about to (a server writes its marker first, then waits up to
	// its lock timeout for the lock: a marker younger than that counts).
	if held, known := stjournal.LockHeldBy(journal, pid); known && !held && !markerYoung(MarkerPath(journal)) {
		return 0
	}
	return pid
}

// markerYoung: the marker was written less than the time a starting
// server waits for the journal's lock ago.
func markerYoung(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && time.Since(fi.ModTime()) < markerGrace
}

// markerGrace is how long a marker is believed before its server holds
// the journal's lock (serve's lock wait).
const markerGrace = 30 * time.Second
