package journal

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockade/stockade/internal/testenv"
	"github.com/stockade/stockade/spec"
)

// wantDirRefused checks err is the refusal of dir: invalid_argument,
// naming the directory, its owner, the expected owner and the remedy.
func wantDirRefused(t *testing.T, err error, dir string) {
	t.Helper()
	if !spec.IsCode(err, spec.CodeInvalidArgument) {
		t.Fatalf("got %v, want invalid_argument refusing %s", err, dir)
	}
	msg := err.Error()
	for _, want := range []string{dir, fmt.Sprintf("uid %d", testenv.Nobody), fmt.Sprintf("uid %d", os.Geteuid()), "chown", "STOCKADE_JOURNAL"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the refusal %q does not say %q", msg, want)
		}
	}
}

// TestOpenRefusesADirectoryAnotherUIDOwns: a journal whose directory
// another user owns is refused, new or existing, writable or read-only:
// that user could replace the file under the runtime (a false history) or
// plant links where it writes its pid file. Nothing is created.
func TestOpenRefusesADirectoryAnotherUIDOwns(t *testing.T) {
	t.Run("new journal", func(t *testing.T) {
		dir := testenv.ForeignDir(t, "state")
		path := filepath.Join(dir, "journal.db")
		j, err := Open(path, Options{})
		if err == nil {
			_ = j.Close() // the test fails anyway
		}
		wantDirRefused(t, err, dir)
		if _, err := os.Lstat(path); !os.IsNotExist(err) {
			t.Errorf("the refused Open made %s: %v", path, err)
		}
	})
	t.Run("existing journal", func(t *testing.T) {
		dir := testenv.ForeignDir(t, "state")
		path := filepath.Join(dir, "journal.db")
		if err := os.Chown(dir, os.Geteuid(), os.Getegid()); err != nil {
			t.Fatal(err)
		}
		j := open(t, path, Options{})
		if err := j.Close(); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, testenv.Nobody, testenv.Nobody); err != nil {
			t.Fatal(err)
		}
		for _, ro := range []bool{false, true} {
			j, err := Open(path, Options{ReadOnly: ro})
			if err == nil {
				_ = j.Close() // the test fails anyway
			}
			wantDirRefused(t, err, dir)
		}
	})
}

// TestOpenRefusesADirectoryOthersCanWrite: group or world write access to
// the journal's directory is refused (read access is not: the file itself
// is 0600).
func TestOpenRefusesADirectoryOthersCanWrite(t *testing.T) {
	for _, tc := range []struct {
		mode os.FileMode
		ok   bool
	}{{0o700, true}, {0o750, true}, {0o755, true}, {0o770, false}, {0o707, false}, {os.ModeSticky | 0o777, false}} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, tc.mode); err != nil {
				t.Fatal(err)
			}
			j, err := Open(filepath.Join(dir, "journal.db"), Options{})
			if err == nil {
				_ = j.Close() // only the Open is tested
			}
			if tc.ok != (err == nil) {
				t.Fatalf("Open in a %04o directory: %v, want ok=%v", tc.mode, err, tc.ok)
			}
			if !tc.ok && (!spec.IsCode(err, spec.CodeInvalidArgument) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "chmod")) {
				t.Fatalf("got %v, want invalid_argument naming %s and chmod", err, dir)
			}
		})
	}
}

// TestOpenRefusesASymlinkedDirectory: the journal's own directory is
// opened without following a link (a parent may be one): a link names a
// directory its maker chose.
func TestOpenRefusesASymlinkedDirectory(t *testing.T) {
	base := t.TempDir()
	real := filepath.Join(base, "real")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	j, err := Open(filepath.Join(link, "journal.db"), Options{})
	if err == nil {
		_ = j.Close() // the test fails anyway
	}
	if !spec.IsCode(err, spec.CodeInvalidArgument) || !strings.Contains(err.Error(), link) || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("got %v, want invalid_argument naming the link %s", err, link)
	}
	// Through a linked parent it opens.
	open(t, filepath.Join(link, "sub", "journal.db"), Options{})
}
