package testkit

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/client"

	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/journal"
)

// BuildStockade builds the stockade binary into a temporary directory.
func BuildStockade(t testing.TB) string {
	t.Helper()
	root, err := dockertest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "stockade")
	if out, err := exec.Command("go", "build", "-o", bin, filepath.Join(root, "cmd", "stockade")).CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// CLIEnv is the stockade binary on a journal of its own; every resource its
// owner labels is removed when the test ends.
type CLIEnv struct {
	Bin, Journal string
}

// NewCLI builds the stockade binary and gives it a journal in a 0700
// directory of its own; the journal's owner's resources are removed when
// the test ends.
func NewCLI(t testing.TB) *CLIEnv {
	t.Helper()
	cli := dockertest.Client(t)
	dockertest.ImageID(t, cli)
	// The journal's directory is 0700, as the default one is: a server's
	// socket goes beside it.
	state := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	e := &CLIEnv{Bin: BuildStockade(t), Journal: filepath.Join(state, "journal.db")}
	RemoveJournalOwned(t, cli, e.Journal)
	return e
}

// RemoveJournalOwned registers a cleanup that removes every Docker resource
// labelled with the owner of the journal at path (if one was made).
func RemoveJournalOwned(t testing.TB, cli *client.Client, path string) {
	t.Cleanup(func() {
		j, err := journal.Open(path, journal.Options{ReadOnly: true})
		if err != nil {
			return // never made: nothing to clean
		}
		owner := j.Owner()
		_ = j.Close()
		if err := dockertest.RemoveOwned(context.Background(), cli, owner); err != nil {
			t.Errorf("cleanup of %s: %v", owner, err)
		}
	})
}

// Run runs the binary and returns its exit code, stdout and stderr.
func (e *CLIEnv) Run(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(e.Bin, append([]string{"--journal", e.Journal}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode(), out.String(), errb.String()
	case err != nil:
		t.Fatalf("%v: %v", args, err)
	}
	return 0, out.String(), errb.String()
}

// OwnerOfJournal reads the owner a CLI environment's journal was made for
// (the journal must not be held by a writer).
func OwnerOfJournal(t *testing.T, e *CLIEnv) string {
	t.Helper()
	j, err := journal.Open(e.Journal, journal.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = j.Close() }()
	return j.Owner()
}
