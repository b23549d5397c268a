// Package testenv keeps test binaries away from the user's real state: a
// TestMain calls Isolate so that every default path (the journal, its socket,
// anything under HOME or the XDG directories) lands in a fresh temporary
// directory, for the tests and for every child process they start.
package testenv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Run is a whole TestMain: it isolates the environment, runs the tests and
// removes the temporary directory. Use it as os.Exit(testenv.Run(m)).
func Run(m *testing.M) int {
	cleanup, err := Isolate()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: isolating the environment: %v\n", err)
		return 1
	}
	defer cleanup()
	return m.Run()
}

// Dirs are the variables Isolate points at the temporary directory, each at
// its own subdirectory.
var Dirs = map[string]string{
	"HOME":            "home",
	"XDG_STATE_HOME":  "state",
	"XDG_RUNTIME_DIR": "run",
	"XDG_CONFIG_HOME": "config",
	"XDG_CACHE_HOME":  "cache",
}

// Isolate points HOME, the XDG base directories and STOCKADE_JOURNAL at a
// fresh temporary directory for the rest of the process, and unsets
// STOCKADE_SOCKET. The journal it names does not exist yet.
//
// Go's caches are pinned first to where `go env` finds them now: a test that
// runs `go build` must neither rebuild the standard library nor download
// modules (the machine may have no network). DOCKER_HOST and DOCKER_CONFIG
// are left alone, so the daemon stays reachable; a missing ~/.docker only
// means no client configuration.
//
// The returned function removes the directory.
func Isolate() (cleanup func(), err error) {
	pinned := goCaches()
	dir, err := os.MkdirTemp("", "stockade-test-env-")
	if err != nil {
		return nil, err
	}
	// A temp directory of the test run's own; a leftover is the OS's to clear.
	cleanup = func() { _ = os.RemoveAll(dir) }
	set := map[string]string{"STOCKADE_JOURNAL": filepath.Join(dir, "state", "stockade", "journal.db")}
	for k, v := range pinned {
		set[k] = v
	}
	for k, sub := range Dirs {
		p := filepath.Join(dir, sub)
		if err := os.Mkdir(p, 0o700); err != nil {
			cleanup()
			return nil, err
		}
		set[k] = p
	}
	// A go command run by a test would otherwise start collecting telemetry
	// in the fresh config directory, in a child that may outlive cleanup.
	if err := writeFile(filepath.Join(dir, Dirs["XDG_CONFIG_HOME"], "go", "telemetry", "mode"), "off"); err != nil {
		cleanup()
		return nil, err
	}
	for k, v := range set {
		if err := os.Setenv(k, v); err != nil {
			cleanup()
			return nil, err
		}
	}
	if err := os.Unsetenv("STOCKADE_SOCKET"); err != nil {
		cleanup()
		return nil, err
	}
	for _, b := range []struct{ env, name, pkg string }{
		{"STOCKADE_WARDEN", "stockade-warden", "./cmd/warden"},
		{"STOCKADE_EGRESS", "stockade-egress", "./cmd/egress"},
	} {
		if os.Getenv(b.env) != "" {
			continue
		}
		bin := filepath.Join(dir, "bin", b.name)
		if err := buildStatic(bin, b.pkg); err != nil {
			cleanup()
			return nil, err
		}
		if err := os.Setenv(b.env, bin); err != nil {
			cleanup()
			return nil, err
		}
	}
	return cleanup, nil
}

// buildStatic builds one of the static helper binaries (stockade-warden,
// stockade-egress) from the current source, for the runtimes the tests open
// (through $STOCKADE_WARDEN / $STOCKADE_EGRESS): a test run of edited warden
// code then runs that code, not the embedded copy that `make generate` has not
// yet refreshed (make helpers-check fails on that; test/install runs the
// embedded copies).
func buildStatic(out, pkg string) error {
	mod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || len(mod) == 0 {
		return fmt.Errorf("finding the module to build %s: %v", pkg, err) //nolint:errorlint // err is nil when go env names no module: %w would print %!w(<nil>)
	}
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = filepath.Dir(string(bytes.TrimSpace(mod)))
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %w: %s", pkg, err, b)
	}
	return nil
}

// goCaches returns GOCACHE, GOMODCACHE, GOPATH and GOENV as the go command
// resolves them under the current HOME, or nothing when there is no go
// command (then no test can run one either).
func goCaches() map[string]string {
	out, err := exec.Command("go", "env", "-json", "GOCACHE", "GOMODCACHE", "GOPATH", "GOENV").Output()
	if err != nil {
		return nil
	}
	var env map[string]string
	if json.Unmarshal(out, &env) != nil {
		return nil
	}
	for k, v := range env {
		if v == "" {
			delete(env, k)
		}
	}
	return env
}

func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o600)
}

// Nobody is the uid ForeignDir gives a directory: another user's.
const Nobody = 65534

// ForeignDir makes a 0700 directory named name, owned by uid Nobody, in a
// temporary directory of t's: a directory another user owns (a socket's or
// a journal's an impostor could use). Making it needs root: the test is
// skipped otherwise, and fails under CI=true, where it must run.
func ForeignDir(t testing.TB, name string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root to chown a directory to another uid; CI must run it as root")
		}
		t.Skip("needs root to chown a directory to another uid")
	}
	dir := filepath.Join(t.TempDir(), name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, Nobody, Nobody); err != nil {
		t.Fatal(err)
	}
	return dir
}
