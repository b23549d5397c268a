package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// runWarden runs the warden binary with args and returns its exit code and
// stderr.
func runWarden(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(wardenBin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), stderr.String()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, stderr.String()
}

// tree lists every path under dir (relative, sorted; symlinks as name->target).
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		if fi.Mode()&os.ModeSymlink != 0 {
			target, _ := os.Readlink(p)
			rel += "->" + target
		}
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func TestSwapSubcommand(t *testing.T) {
	for _, tc := range []struct {
		name     string
		a, b     string // "file:content", "dir", or "" for missing
		wantCode int
	}{
		{name: "two files", a: "file:A", b: "file:B"},
		{name: "a file and a directory", a: "file:A", b: "dir"},
		{name: "a missing side", a: "file:A", b: "", wantCode: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			mk := func(name, what string) { mkIn(t, dir, name, what) }
			mk("a", tc.a)
			mk("b", tc.b)
			before := tree(t, dir)
			code, stderr := runWarden(t, "swap", filepath.Join(dir, "a"), filepath.Join(dir, "b"))
			if code != tc.wantCode {
				t.Fatalf("exit %d (%s), want %d", code, stderr, tc.wantCode)
			}
			if code != 0 {
				if stderr == "" {
					t.Error("a failed swap without an error on stderr")
				}
				if got := tree(t, dir); strings.Join(got, " ") != strings.Join(before, " ") {
					t.Errorf("a failed swap changed the tree: %v → %v", before, got)
				}
				return
			}
			// Each side now holds what the other did.
			dir2 := t.TempDir()
			mkIn(t, dir2, "a", tc.b)
			mkIn(t, dir2, "b", tc.a)
			if got, want := tree(t, dir), tree(t, dir2); strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("after the swap %v, want %v", got, want)
			}
			for _, side := range []struct{ name, what string }{{"a", tc.b}, {"b", tc.a}} {
				if strings.HasPrefix(side.what, "file:") {
					if b, err := os.ReadFile(filepath.Join(dir, side.name)); err != nil || string(b) != side.what[5:] {
						t.Errorf("%s holds %q, %v; want %q", side.name, b, err, side.what[5:])
					}
				}
			}
		})
	}
}

// mkIn makes dir/name: "dir" (holding an empty file), "file:CONTENT", or
// nothing ("").
func mkIn(t *testing.T, dir, name, what string) {
	t.Helper()
	p := filepath.Join(dir, name)
	switch {
	case what == "dir":
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "inside"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	case strings.HasPrefix(what, "file:"):
		if err := os.WriteFile(p, []byte(what[5:]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestEmptySubcommand(t *testing.T) {
	for _, tc := range []struct {
		name     string
		setup    func(t *testing.T, root, outside string)
		files    []string // relative to root
		dir      string   // relative to root
		wantCode int
		wantLeft []string // under root after
	}{
		{
			name: "nested tree, symlinks not followed",
			setup: func(t *testing.T, root, outside string) {
				must(t, os.MkdirAll(filepath.Join(root, "work/a/b/c"), 0o755))
				must(t, os.WriteFile(filepath.Join(root, "work/a/b/c/f"), []byte("x"), 0o644))
				must(t, os.WriteFile(filepath.Join(root, "work/top"), []byte("x"), 0o644))
				// A link to a directory outside: removed, never entered.
				must(t, os.Symlink(outside, filepath.Join(root, "work/link")))
				must(t, os.Symlink(outside, filepath.Join(root, "work/a/link2")))
				// A directory its owner locked.
				must(t, os.MkdirAll(filepath.Join(root, "work/locked/inner"), 0o755))
				must(t, os.WriteFile(filepath.Join(root, "work/locked/inner/g"), nil, 0o644))
				must(t, os.Chmod(filepath.Join(root, "work/locked/inner"), 0))
				must(t, os.Chmod(filepath.Join(root, "work/locked"), 0o500))
				must(t, os.WriteFile(filepath.Join(root, "journal"), nil, 0o644))
			},
			dir:      "work",
			files:    []string{"journal", "missing"},
			wantLeft: []string{"work"},
		},
		{
			name: "DIR a symlink is refused",
			setup: func(t *testing.T, root, outside string) {
				must(t, os.Symlink(outside, filepath.Join(root, "work")))
			},
			dir:      "work",
			wantCode: 1,
			wantLeft: []string{"work->OUTSIDE"},
		},
		{
			name:     "DIR missing",
			setup:    func(t *testing.T, root, outside string) {},
			dir:      "work",
			wantCode: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, outside := t.TempDir(), t.TempDir()
			must(t, os.WriteFile(filepath.Join(outside, "precious"), []byte("keep"), 0o644))
			tc.setup(t, root, outside)
			t.Cleanup(func() { _ = exec.Command("chmod", "-R", "u+rwx", root).Run() })
			args := []string{"empty", filepath.Join(root, tc.dir)}
			for _, f := range tc.files {
				args = append(args, filepath.Join(root, f))
			}
			code, stderr := runWarden(t, args...)
			if code != tc.wantCode || (code != 0) != (stderr != "") {
				t.Fatalf("exit %d, stderr %q; want %d", code, stderr, tc.wantCode)
			}
			got := strings.ReplaceAll(strings.Join(tree(t, root), " "), outside, "OUTSIDE")
			if want := strings.Join(tc.wantLeft, " "); got != want {
				t.Errorf("left %q, want %q", got, want)
			}
			if b, err := os.ReadFile(filepath.Join(outside, "precious")); err != nil || string(b) != "keep" {
				t.Errorf("outside the tree: %q, %v", b, err)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
