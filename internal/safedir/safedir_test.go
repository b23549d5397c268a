package safedir_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stockade/stockade/internal/safedir"
	"github.com/stockade/stockade/spec"
)

const nobody = 65534

var rule = safedir.Rule{Op: "test", What: "test directory", Self: "this test", Deny: 0o022, Risk: "its owner could swap it", Else: "or choose another"}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root to chown a directory to another uid; CI must run it as root")
		}
		t.Skip("needs root to chown a directory to another uid")
	}
}

func TestOpen(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mode  fs.FileMode
		owner int // -1: this process
		root  bool
		cause error
		says  []string
	}{
		{name: "own 0700", mode: 0o700, owner: -1},
		{name: "own 0755", mode: 0o755, owner: -1},
		{name: "own 0775", mode: 0o775, owner: -1, cause: safedir.ErrWritable, says: []string{"mode 0775", "chmod go-w"}},
		{name: "own 1777", mode: fs.ModeSticky | 0o777, owner: -1, cause: safedir.ErrWritable, says: []string{"mode 1777", "chmod go-w"}},
		{name: "nobody's 0700", mode: 0o700, owner: nobody, cause: safedir.ErrForeign, says: []string{"owned by uid 65534", "chown"}},
		{name: "nobody's 0700, root accepted", mode: 0o700, owner: nobody, root: true, cause: safedir.ErrForeign, says: []string{"owned by uid 65534"}},
		{name: "root's 0700, root accepted", mode: 0o700, owner: 0, root: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "d")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, tc.mode); err != nil {
				t.Fatal(err)
			}
			if tc.owner >= 0 && tc.owner != os.Geteuid() {
				needRoot(t)
				if err := os.Chown(dir, tc.owner, tc.owner); err != nil {
					t.Fatal(err)
				}
			}
			r := rule
			r.Root = tc.root
			d, err := safedir.Open(dir, r)
			if tc.cause == nil {
				if err != nil {
					t.Fatal(err)
				}
				_ = d.Close() // only the Open is tested
				return
			}
			if err == nil {
				_ = d.Close() // the test fails anyway
				t.Fatalf("Open: accepted, want %v", tc.cause)
			}
			if !spec.IsCode(err, spec.CodeInvalidArgument) || !errors.Is(err, tc.cause) {
				t.Fatalf("got %v, want invalid_argument, cause %v", err, tc.cause)
			}
			for _, want := range append([]string{"test: ", dir, "or choose another"}, tc.says...) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%q does not say %q", err, want)
				}
			}
		})
	}
}

func TestOpenRefusesALink(t *testing.T) {
	base := t.TempDir()
	if err := os.Mkdir(filepath.Join(base, "real"), 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink("real", link); err != nil {
		t.Fatal(err)
	}
	if d, err := safedir.Open(link, rule); !errors.Is(err, safedir.ErrSymlink) || !strings.Contains(err.Error(), link) {
		if err == nil {
			_ = d.Close() // the test fails anyway
		}
		t.Fatalf("got %v, want a refusal of the link %s", err, link)
	}
	// A linked parent is followed.
	if err := os.Mkdir(filepath.Join(base, "real", "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	d, err := safedir.Open(filepath.Join(link, "sub"), rule)
	if err != nil {
		t.Fatal(err)
	}
	_ = d.Close() // only the Open is tested
}

func TestOpenPassesOtherErrorsThrough(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	if _, err := safedir.Open(missing, rule); !errors.Is(err, fs.ErrNotExist) || spec.CodeOf(err) != "" {
		t.Fatalf("got %v, want the bare not-exist error", err)
	}
}

// TestJoinNamesTheCheckedDirectory: a name Join returned resolves in the
// directory that was opened and checked, even once another directory has
// taken its path.
func TestJoinNamesTheCheckedDirectory(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("anchored names need /proc/self/fd")
	}
	dir := filepath.Join(t.TempDir(), "d")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	d, err := safedir.Open(dir, rule)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Close() }() // teardown
	if !d.Anchored() || d.Path() != dir {
		t.Fatalf("Anchored %v, Path %s: want anchored at %s", d.Anchored(), d.Path(), dir)
	}
	if err := os.Rename(dir, dir+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d.Join("f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir+".moved", "f")); err != nil {
		t.Fatalf("the file is not in the checked directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "f")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the file went to the directory swapped in: %v", err)
	}
}
