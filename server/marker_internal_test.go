package server

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stockade/stockade/journal"
)

// TestMarkerOfAReusedPIDIsStale: a marker a killed server left names a pid
// the system may have given to another process. It is believed while that
// pid holds the journal's lock, or while it is young enough for a starting
// server still waiting for the lock; otherwise it is stale, so neither a
// new `serve` (journal_locked for ever) nor every command (a 30 s wait) is
// held up by it.
func TestMarkerOfAReusedPIDIsStale(t *testing.T) {
	if _, err := os.Stat("/proc/locks"); err != nil {
		t.Skip("no /proc/locks: the lock's holder cannot be read here")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.db")
	marker := MarkerPath(path)
	self := os.Getpid() // alive, like a reused pid
	if err := os.WriteFile(marker, []byte(strconv.Itoa(self)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * markerGrace)
	age := func(when time.Time) {
		t.Helper()
		if err := os.Chtimes(marker, when, when); err != nil {
			t.Fatal(err)
		}
	}

	if got := MarkerPID(path); got != self {
		t.Fatalf("a young marker of a live pid: %d, want %d (a server waiting for the lock)", got, self)
	}
	age(old)
	if got := MarkerPID(path); got != 0 {
		t.Fatalf("an old marker whose live pid does not hold the lock: %d, want 0 (stale)", got)
	}
	if _, err := WriteMarker(path); err != nil {
		t.Fatalf("serve over a stale marker: %v", err)
	}

	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = j.Close() }() // teardown: it only holds the lock
	age(old)
	if got := MarkerPID(path); got != self {
		t.Fatalf("an old marker whose pid holds the lock: %d, want %d", got, self)
	}
}

// TestMarkerBeforeTheJournalsDirectory: on a fresh machine `serve` writes
// its marker before the journal's Open has made the state directory; the
// marker makes it (0700), and its remover takes only the marker.
func TestMarkerBeforeTheJournalsDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "stockade")
	path := filepath.Join(dir, "journal.db")
	unmark, err := WriteMarker(path)
	if err != nil {
		t.Fatalf("marker in a directory not yet made: %v", err)
	}
	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("the state directory: %v %v, want 0700", st, err)
	}
	if pid := MarkerPID(path); pid != os.Getpid() {
		t.Fatalf("the marker names %d, want this process %d", pid, os.Getpid())
	}
	unmark()
	if _, err := os.Stat(MarkerPath(path)); !os.IsNotExist(err) {
		t.Fatalf("the marker is left after its remover: %v", err)
	}
}
