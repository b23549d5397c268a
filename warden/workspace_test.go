package warden

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func write(t *testing.T, p, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// workspaceFixture makes a workspace as a sandbox's is: a root-owned 0755
// root, the warden's root-owned directory and 0111 binary, work, and a
// staging directory (holding root's marker directory, as a rollback's
// does). It returns the root.
func workspaceFixture(t *testing.T) string {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("the exchange's checks need files owned by root: run as root (CI does)")
	}
	d := filepath.Join(t.TempDir(), "workspace")
	for _, dir := range []string{d, filepath.Join(d, ".stockade"), filepath.Join(d, ".rollback-3", ".stockade-rollback-ab")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(d, "work", "old.txt"), "old")
	write(t, filepath.Join(d, ".rollback-3", "new.txt"), "new")
	write(t, filepath.Join(d, ".stockade", "stockade-warden"), "bin")
	for p, m := range map[string]os.FileMode{d: 0o755, filepath.Join(d, ".stockade"): 0o755, filepath.Join(d, ".stockade", "stockade-warden"): 0o111} {
		if err := os.Chmod(p, m); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// TestExchange: two trees exchange places whole once the workspace reads
// back as root made it; any sign of the sandbox user's hand (an owner, a
// mode, a link) refuses it (exit 4) and renames
// nothing; bad arguments exit 2.
func TestExchange(t *testing.T) {
	d := workspaceFixture(t)
	if code := exchange(d, ".rollback-3"); code != 0 {
		t.Fatalf("exchange: %d", code)
	}
	if got := names(t, filepath.Join(d, "work")); !slices.Equal(got, []string{".", ".stockade-rollback-ab", "new.txt"}) {
		t.Fatalf("work after the exchange: %v", got)
	}
	if got := names(t, filepath.Join(d, ".rollback-3")); !slices.Equal(got, []string{".", "old.txt"}) {
		t.Fatalf("staging after the exchange: %v", got)
	}
	for _, tc := range []struct {
		name  string
		spoil func(d string) error
		code  int
	}{
		{"workspace owned by the user", func(d string) error { return os.Chown(d, 65532, 65532) }, 4},
		{"workspace writable", func(d string) error { return os.Chmod(d, 0o777) }, 4},
		{"warden dir owned by the user", func(d string) error { return os.Chown(filepath.Join(d, ".stockade"), 65532, 65532) }, 4},
		{"warden binary replaced by a link", func(d string) error {
			b := filepath.Join(d, ".stockade", "stockade-warden")
			if err := os.Remove(b); err != nil {
				return err
			}
			return os.Symlink("/bin/sh", b)
		}, 4},
		{"warden binary writable", func(d string) error { return os.Chmod(filepath.Join(d, ".stockade", "stockade-warden"), 0o777) }, 4},
		{"staging a link", func(d string) error {
			s := filepath.Join(d, ".rollback-3")
			if err := os.RemoveAll(s); err != nil {
				return err
			}
			return os.Symlink("/", s)
		}, 4},
		{"work a link", func(d string) error {
			w := filepath.Join(d, "work")
			if err := os.RemoveAll(w); err != nil {
				return err
			}
			return os.Symlink("/", w)
		}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := workspaceFixture(t)
			if err := tc.spoil(d); err != nil {
				t.Fatal(err)
			}
			if code := exchange(d, ".rollback-3"); code != tc.code {
				t.Fatalf("exchange = %d, want %d", code, tc.code)
			}
			if fi, err := os.Lstat(filepath.Join(d, "work", "old.txt")); tc.name != "work a link" && (err != nil || !fi.Mode().IsRegular()) {
				t.Fatalf("work changed under a refused exchange: %v", err)
			}
		})
	}
	for _, args := range [][2]string{{"rel", ".rollback-3"}, {d, "a/b"}, {d, ".."}, {d, "work"}} {
		if code := exchange(args[0], args[1]); code != 2 {
			t.Errorf("exchange%q = %d, want 2", args, code)
		}
	}
}

// TestEmpty: everything under the directory goes (unwritable directories
// included), the directory stays, a symlink is removed and never followed,
// the files named go, and a path not there is no error.
func TestEmpty(t *testing.T) {
	d := t.TempDir()
	outside := filepath.Join(d, "outside")
	write(t, filepath.Join(outside, "keep.txt"), "keep")
	stage := filepath.Join(d, ".rollback-4")
	write(t, filepath.Join(stage, "a", "b", "c.txt"), "c")
	write(t, filepath.Join(stage, "top.txt"), "t")
	if err := os.Symlink(outside, filepath.Join(stage, "link")); err != nil {
		t.Fatal(err)
	}
	locked := filepath.Join(stage, "locked")
	write(t, filepath.Join(locked, "x"), "x")
	if err := os.Chmod(locked, 0o500); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(d, "work", ".stockade-rollback-ab")
	write(t, marker, "")
	if code := empty(stage, []string{marker, filepath.Join(d, "work", "absent")}); code != 0 {
		t.Fatalf("empty: %d", code)
	}
	if got := names(t, stage); !slices.Equal(got, []string{"."}) {
		t.Fatalf("left in the directory: %v", got)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("the marker: %v", err)
	}
	if got := names(t, outside); !slices.Equal(got, []string{".", "keep.txt"}) {
		t.Fatalf("the symlink was followed: %v", got)
	}
	if code := empty(filepath.Join(d, "absent"), nil); code != 0 {
		t.Fatalf("an absent directory: %d", code)
	}
	if code := empty("rel", nil); code != 2 {
		t.Fatalf("a relative path: %d", code)
	}
}
