package cli

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/test/testkit"
)

// TestCLIServedSandboxCommands: with `stockade serve` holding the journal
// (so no command can run embedded beside it), the kept-sandbox commands go
// through it: exec -i, a command that cannot start (126/127, its code
// carried over the wire as text), cp both ways (a file and a directory),
// sandbox inspect, sandbox stop (then exec refused, cp out still working),
// rm; `journal tail` sees a new event. Once the server is gone, `journal
// show --follow` and `journal tail` fail saying they need one.
func TestCLIServedSandboxCommands(t *testing.T) {
	e := testkit.NewCLI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv := e.Serve(t, ctx)

	// The tail shows only events committed after it subscribed: started
	// first, it has long subscribed when the exec it must see runs (and
	// that exec is retried below if not).
	var tailed testkit.LockedBuffer
	tailCmd := exec.Command(e.Bin, "--journal", e.Journal, "journal", "tail")
	tailCmd.Stdout, tailCmd.Stderr = &tailed, &tailed
	tail := testkit.StartSubprocess(t, tailCmd)

	code, out, errOut := e.Run(t, "", "sandbox", "create", "--memory", "128m")
	id := strings.TrimSpace(out)
	if code != 0 || id == "" || strings.Contains(id, "\n") {
		t.Fatalf("create: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := e.Run(t, "piped\n", "exec", "-i", id, "--", "sh", "-c", "cat; exit 5"); code != 5 || out != "piped\n" || errOut != "" {
		t.Fatalf("exec -i through the server: %d %q %q", code, out, errOut)
	}
	checkNotStarted(t, e, id)

	local := cpRoundTrip(t, e, id) // through the server

	inspect := func(want lifecycle.Phase) {
		t.Helper()
		code, out, errOut := e.Run(t, "", "sandbox", "inspect", "--json", id)
		var st lifecycle.Sandbox
		if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.ID != id || st.Phase != want || st.Spec.Policy.MemoryBytes != 128<<20 {
			t.Fatalf("inspect --json through the server: %d %q %q; want phase %q", code, out, errOut, want)
		}
		if code, out, errOut := e.Run(t, "", "sandbox", "inspect", id); code != 0 || !strings.Contains(out, id) {
			t.Fatalf("inspect through the server: %d %q %q", code, out, errOut)
		}
	}
	inspect(lifecycle.PhaseStarted)

	// journal tail: a process's exit, committed while it follows.
	sawTail := false
	for try := 0; try < 5 && !sawTail; try++ {
		if code, _, errOut := e.Run(t, "", "exec", id, "--", "sh", "-c", "exit 7"); code != 7 {
			t.Fatalf("exec while tailed: %d %q", code, errOut)
		}
		for wait := 0; wait < 50 && !sawTail; wait++ {
			for _, l := range strings.Split(tailed.String(), "\n") {
				sawTail = sawTail || strings.Contains(l, "process.exited") && strings.Contains(l, "code 7")
			}
			if !sawTail {
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
	if !sawTail {
		t.Fatalf("journal tail did not show the new process's exit:\n%s", tailed.String())
	}
	_ = tail.Cmd.Process.Kill()
	<-tail.Done

	if code, _, errOut := e.Run(t, "", "sandbox", "stop", id); code != 0 {
		t.Fatalf("stop through the server: %d %q", code, errOut)
	}
	inspect(lifecycle.PhaseExited)
	if code, _, errOut := e.Run(t, "", "exec", id, "--", "true"); code != 125 || !strings.Contains(errOut, "admission_closed") {
		t.Fatalf("exec in a stopped sandbox through the server: %d %q", code, errOut)
	}
	if code, _, errOut := e.Run(t, "", "cp", id+":work/out.txt", filepath.Join(local, "after-stop.txt")); code != 0 {
		t.Fatalf("cp out of a stopped sandbox through the server: %d %q", code, errOut)
	}
	if code, _, errOut := e.Run(t, "", "sandbox", "rm", id); code != 0 {
		t.Fatalf("rm through the server: %d %q", code, errOut)
	}
	if err := srv.Stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("serve after SIGTERM: %v\n%s", err, srv.Logs.String())
	}

	// No server: what follows live events says it needs one, in one line.
	for _, args := range [][]string{{"journal", "show", "--follow", id}, {"journal", "tail"}} {
		code, out, errOut := e.Run(t, "", args...)
		if code != 1 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "unsupported") || !strings.Contains(errOut, "stockade serve") {
			t.Errorf("%q with no server: %d %q %q, want exit 1 and one line saying it needs stockade serve", args, code, out, errOut)
		}
	}
}

// TestCLIUsageErrorsAsSubprocess: bad input to the built binary exits 2
// with nothing on stdout and one invalid_argument line on stderr, with no
// daemon to reach and no journal made.
func TestCLIUsageErrorsAsSubprocess(t *testing.T) {
	bin := testkit.BuildStockade(t)
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
		var out, errb testkit.LockedBuffer
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
