package cli

import (
	"strings"
	"testing"

	"github.com/stockade/stockade/test/testkit"
)

// TestCLIRunOOM: a command the kernel's OOM killer ends under the sandbox's
// memory limit makes `stockade run` exit 137, as the command's own code,
// and say on stderr that the OOM killer did it (issue 9). busybox dd's
// buffer of bs bytes is filled by its first read, so bs=256M needs 256 MiB
// at once under a 128 MiB limit.
func TestCLIRunOOM(t *testing.T) {
	e := testkit.NewCLI(t)
	code, out, errOut := e.Run(t, "", "run", "--memory", "128m", "--", "sh", "-c", "exec dd if=/dev/zero of=/dev/null bs=256M count=1")
	if code != 137 {
		t.Fatalf("exit %d, want 137 (stdout %q, stderr %q)", code, out, errOut)
	}
	const said = "stockade: the process was killed by the kernel's OOM killer (the sandbox's memory limit)"
	if !strings.Contains(errOut, said) {
		t.Fatalf("stderr %q does not say %q", errOut, said)
	}
	if out != "" {
		t.Fatalf("stdout %q, want none", out)
	}
	// The one-shot sandbox is gone with its command.
	code, out, errOut = e.Run(t, "", "sandbox", "ls")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 1 || !strings.HasPrefix(lines[0], "ID ") {
		t.Fatalf("sandbox ls after the run: %d %q %q, want only the header", code, out, errOut)
	}
}
