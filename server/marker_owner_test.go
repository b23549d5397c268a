package server_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockade/stockade/internal/testenv"
	"github.com/stockade/stockade/server"
	"github.com/stockade/stockade/spec"
)

// TestWriteMarkerRefusesADirectoryAnotherUIDOwns: serve writes its marker
// beside the journal before the journal is opened, so the marker checks
// the journal's directory as the journal does: one another user owns is
// refused and nothing is written in it (its owner could have planted a
// link where the marker's temporary file goes).
func TestWriteMarkerRefusesADirectoryAnotherUIDOwns(t *testing.T) {
	dir := testenv.ForeignDir(t, "nobody")
	jpath := filepath.Join(dir, "journal.db")
	unmark, err := server.WriteMarker(jpath)
	if err == nil {
		unmark()
		t.Fatalf("WriteMarker in a directory uid %d owns: written, want invalid_argument", testenv.Nobody)
	}
	if !spec.IsCode(err, spec.CodeInvalidArgument) {
		t.Fatalf("got %v, want invalid_argument", err)
	}
	for _, want := range []string{dir, fmt.Sprintf("uid %d", testenv.Nobody), fmt.Sprintf("uid %d", os.Geteuid()), "chown"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Errorf("the refused WriteMarker left %v in %s (%v)", ents, dir, err)
	}
}
