package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockade/stockade/internal/dockertest"
)

// buildStockade builds the stockade binary into a temporary directory.
func buildStockade(t testing.TB) string {
	t.Helper()
	root, err := dockertest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "stockade")
	if out, err := exec.Command("go", "build", "-o", bin, filepath.Join(root, "cmd", "runtime")).CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// TestCLIUsageErrorsAsSubprocess: bad input to the built binary exits 2
// with nothing on stdout and one invalid_argument line on stderr, with no
// daemon to reach and no journal made.
func TestCLIUsageErrorsAsSubprocess(t *testing.T) {
	bin := buildStockade(t)
	dir := t.TempDir()
	jpath := filepath.Join(dir, "state", "journal.db")
	for _, tc := range []struct {
		args []string
		says string
	}{
		{nil, "no command given"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"exec", "sb1"}, "no command given"},
		{[]string{"run", "--memory", "lots", "--", "true"}, `--memory "lots"`},
		{[]string{"sandbox", "create", "--ttl", "-1s"}, "--ttl"},
		{[]string{"logs", "--stdout", "--stderr", "p1"}, "exclude each other"},
		{[]string{"journal", "show"}, "missing arguments"},
		{[]string{"cp", "a", "b"}, "ID:PATH"},
	} {
		cmd := exec.Command(bin, tc.args...)
		cmd.Env = append(os.Environ(), "STOCKADE_JOURNAL="+jpath, "DOCKER_HOST=unix://"+filepath.Join(dir, "no-daemon.sock"))
		var out, errb lockedBuffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := cmd.ProcessState.ExitCode()
		e := errb.String()
		if code != 2 || out.String() != "" || strings.Count(e, "\n") != 1 || !strings.HasSuffix(e, "\n") ||
			!strings.HasPrefix(e, "stockade: ") || !strings.Contains(e, "invalid_argument") || !strings.Contains(e, tc.says) {
			t.Errorf("%q: exit %d (%v), stdout %q, stderr %q; want exit 2 and one invalid_argument line saying %q", tc.args, code, err, out.String(), e, tc.says)
		}
	}
	if _, err := os.Stat(filepath.Dir(jpath)); !os.IsNotExist(err) {
		t.Errorf("a usage error made the journal's directory: %v", err)
	}
}
