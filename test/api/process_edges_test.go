package api

import (
	"testing"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// TestAPIOOMReason: a process the kernel's OOM killer ends is reported oom
// (exit 137); a later process that kills itself with SIGKILL is not.
func TestAPIOOMReason(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	sb := e.Sandbox(t, spec.OneShot)
	// dd's 256 MiB block buffer is far over the sandbox's 128 MiB with no
	// swap: the OOM killer ends it.
	_, _, res, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"sh", "-c", "exec dd if=/dev/zero of=/dev/null bs=256M count=1"}, Stderr: spec.Discard})
	if err != nil || res.Reason != string(lifecycle.ReasonOOM) || res.ExitCode != 137 {
		t.Fatalf("memory hog: %+v %v, want oom with exit 137", res, err)
	}
	_, _, res, err = testkit.RunOut(t, sb, spec.Process{Argv: []string{"sh", "-c", "kill -9 $$"}})
	if res.Reason == string(lifecycle.ReasonOOM) || res.ExitCode != 137 {
		t.Fatalf("self-killed: %+v %v, want 137 and not oom", res, err)
	}
}

// TestAPIProcessOutlivesItsOutput: a process that closes its stdout and
// stderr and goes on is not taken for ended at its output's end: its real
// exit, learned from the exec_die event, is what Wait reports.
func TestAPIProcessOutlivesItsOutput(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	sb := e.Sandbox(t, spec.OneShot)
	out, _, res, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"sh", "-c", "echo bye; exec >&- 2>&-; sleep 2; exit 3"}})
	if err != nil || out != "bye\n" || res.ExitCode != 3 || res.Reason != string(lifecycle.ReasonExited) {
		t.Fatalf("%q %+v %v, want exit 3 after its output ended", out, res, err)
	}
}

// TestAPIWrapperLeavesTheEnvironment: the exec wrapper's own shell
// variables never replace the process's: a command gets every variable as
// its caller set it.
func TestAPIWrapperLeavesTheEnvironment(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	sb := e.Sandbox(t, spec.OneShot)
	env := []string{"o=1", "f=2", "k=3", "v=4", "g=5", "__x=6"}
	out, _, res, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"sh", "-c", `echo "$o $f $k $v $g $__x"`}, Env: env})
	if err != nil || res.ExitCode != 0 || out != "1 2 3 4 5 6\n" {
		t.Fatalf("%q %+v %v, want the caller's values", out, res, err)
	}
}
