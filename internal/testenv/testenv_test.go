package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockade/stockade/statedir"
)

// TestIsolate: after Isolate every default path is under one fresh
// directory, the journal there does not exist, and Go's caches have not moved.
func TestIsolate(t *testing.T) {
	realHome, _ := os.UserHomeDir()
	before := goCaches()
	cleanup, err := Isolate()
	if err != nil {
		t.Fatal(err)
	}
	home, _ := os.UserHomeDir()
	root := filepath.Dir(home)
	if home == realHome || !strings.HasPrefix(root, os.TempDir()) {
		t.Fatalf("HOME %q (was %q) is not under a fresh temporary directory", home, realHome)
	}
	for k, sub := range Dirs {
		if got := os.Getenv(k); got != filepath.Join(root, sub) {
			t.Errorf("%s = %q, want %q", k, got, filepath.Join(root, sub))
		}
		if fi, err := os.Stat(os.Getenv(k)); err != nil || !fi.IsDir() {
			t.Errorf("%s: %v", k, err)
		}
	}
	path, err := statedir.DefaultJournal()
	if err != nil || !strings.HasPrefix(path, root+string(filepath.Separator)) {
		t.Errorf("statedir.DefaultJournal() = %q, %v; want a path under %s", path, err, root)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the default journal exists: %v", err)
	}
	if _, ok := os.LookupEnv("STOCKADE_SOCKET"); ok {
		t.Error("STOCKADE_SOCKET is still set")
	}
	if _, err := exec.LookPath("go"); err == nil {
		if len(before) == 0 {
			t.Fatal("go env reported no caches")
		}
		for k, v := range before {
			if got := os.Getenv(k); got != v {
				t.Errorf("%s = %q, want it pinned at %q", k, got, v)
			}
		}
		if after := goCaches(); after["GOCACHE"] != before["GOCACHE"] || after["GOMODCACHE"] != before["GOMODCACHE"] {
			t.Errorf("go resolves its caches elsewhere after Isolate: %v, was %v", after, before)
		}
	}
	cleanup()
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("cleanup left %s: %v", root, err)
	}
}
