package client_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockade/stockade/client"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/statedir"
)

// TestDialDefault: Dial("") dials the default journal's server (the socket
// beside $STOCKADE_JOURNAL here), not "" and not ".sock": with none
// listening it fails at once, cancelled, naming that socket.
func TestDialDefault(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(statedir.SocketEnv, "")
	t.Setenv(statedir.JournalEnv, filepath.Join(dir, "journal.db"))
	c, err := client.Dial("")
	if err == nil {
		_ = c.Close()
		t.Fatal("Dial(\"\") with no server answered")
	}
	want := filepath.Join(dir, "journal.sock")
	if !spec.IsCode(err, spec.CodeCancelled) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Dial(\"\"): %v; want cancelled naming %s", err, want)
	}
}
