package main

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

// TestSwap: two trees exchange places whole; bad arguments and a missing
// path fail.
func TestSwap(t *testing.T) {
	d := t.TempDir()
	write(t, filepath.Join(d, "work", "old.txt"), "old")
	write(t, filepath.Join(d, ".rollback-3", "new.txt"), "new")
	if code := swap(filepath.Join(d, "work"), filepath.Join(d, ".rollback-3")); code != 0 {
		t.Fatalf("swap: %d", code)
	}
	if got := names(t, filepath.Join(d, "work")); !slices.Equal(got, []string{".", "new.txt"}) {
		t.Fatalf("work after the swap: %v", got)
	}
	if got := names(t, filepath.Join(d, ".rollback-3")); !slices.Equal(got, []string{".", "old.txt"}) {
		t.Fatalf("staging after the swap: %v", got)
	}
	for _, tc := range []struct {
		a, b string
		code int
	}{
		{"rel", filepath.Join(d, "work"), 2},
		{filepath.Join(d, "work"), filepath.Join(d, "absent"), 1},
	} {
		if code := swap(tc.a, tc.b); code != tc.code {
			t.Errorf("swap(%s, %s) = %d, want %d", tc.a, tc.b, code, tc.code)
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
