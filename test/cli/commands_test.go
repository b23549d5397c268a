package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/test/testkit"
)

// TestCLIKeptSandboxCommands drives the kept-sandbox commands as a user
// would: create, exec (exit code, stdin), cp both ways, ls, inspect, stop,
// rm; each an embedded runtime of its own on the same journal.
func TestCLIKeptSandboxCommands(t *testing.T) {
	e := testkit.NewCLI(t)
	code, out, errOut := e.Run(t, "", "sandbox", "create", "--memory", "128m")
	id := strings.TrimSpace(out)
	if code != 0 || id == "" || strings.Contains(id, "\n") {
		t.Fatalf("create: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := e.Run(t, "", "exec", id, "--", "sh", "-c", "echo out; echo err >&2; exit 3"); code != 3 || out != "out\n" || errOut != "err\n" {
		t.Fatalf("exec: %d %q %q", code, out, errOut)
	}
	if code, out, _ := e.Run(t, "piped\n", "exec", "-i", id, "--", "cat"); code != 0 || out != "piped\n" {
		t.Fatalf("exec -i: %d %q", code, out)
	}
	checkNotStarted(t, e, id)
	local := cpRoundTrip(t, e, id)
	if code, _, errOut := e.Run(t, "", "cp", id+":work/out.txt", filepath.Join(local, "absent")+"/"); code != 1 || !strings.Contains(errOut, "does not exist") {
		t.Fatalf("cp out into a directory that is not there: %d %q", code, errOut)
	}
	code, out, _ = e.Run(t, "", "sandbox", "ls", "--json")
	var info stockade.SandboxInfo
	if code != 0 || json.Unmarshal([]byte(out), &info) != nil || info.ID != id || info.Phase != lifecycle.PhaseStarted {
		t.Fatalf("ls --json: %d %q", code, out)
	}
	code, out, _ = e.Run(t, "", "sandbox", "inspect", "--json", id)
	var st lifecycle.Sandbox
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.ID != id || st.Spec.Policy.MemoryBytes != 128<<20 {
		t.Fatalf("inspect --json: %d %q", code, out)
	}
	if code, _, errOut := e.Run(t, "", "sandbox", "rm", id); code != 1 || !strings.Contains(errOut, "rm -f") {
		t.Fatalf("rm of a running sandbox without -f: %d %q", code, errOut)
	}
	if code, _, errOut := e.Run(t, "", "sandbox", "stop", id); code != 0 {
		t.Fatalf("stop: %d %q", code, errOut)
	}
	if code, _, errOut := e.Run(t, "", "exec", id, "--", "true"); code != 125 || !strings.Contains(errOut, "admission_closed") {
		t.Fatalf("exec in a stopped sandbox: %d %q", code, errOut)
	}
	if code, _, errOut := e.Run(t, "", "cp", id+":work/out.txt", filepath.Join(local, "after-stop.txt")); code != 0 {
		t.Fatalf("cp out of a stopped sandbox: %d %q", code, errOut)
	}
	if code, _, errOut := e.Run(t, "", "sandbox", "rm", id); code != 0 {
		t.Fatalf("rm: %d %q", code, errOut)
	}
	if code, out, _ := e.Run(t, "", "sandbox", "ls"); code != 0 || strings.Contains(out, id) {
		t.Fatalf("ls after rm: %d %q", code, out)
	}
	if code, out, _ := e.Run(t, "", "journal", "diff", id, "--at", "3", "--at", "0"); code != 0 || !strings.Contains(out, `Phase: "started" → "removed"`) {
		t.Fatalf("journal diff: %d %q", code, out)
	}
}

// cpRoundTrip copies a file and a directory into sandbox id with the CLI,
// checks them inside (owned by the sandbox's user), copies a file and the
// directory back out and checks them; it returns the local directory.
func cpRoundTrip(t *testing.T, e *testkit.CLIEnv, id string) string {
	t.Helper()
	local := t.TempDir()
	if err := os.WriteFile(filepath.Join(local, "in.txt"), []byte("into the sandbox\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(local, "tree", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(local, "tree", "sub", "leaf"), []byte("leaf\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := e.Run(t, "", "cp", filepath.Join(local, "in.txt"), id+":work/"); code != 0 {
		t.Fatalf("cp in: %d %q", code, errOut)
	}
	if code, _, errOut := e.Run(t, "", "cp", filepath.Join(local, "tree"), id+":work/copied"); code != 0 {
		t.Fatalf("cp in a directory: %d %q", code, errOut)
	}
	if code, out, _ := e.Run(t, "", "exec", id, "--", "sh", "-c", "cat in.txt copied/sub/leaf; stat -c %u in.txt; echo made >out.txt"); code != 0 || out != "into the sandbox\nleaf\n65532\n" {
		t.Fatalf("inside: %d %q", code, out)
	}
	back := filepath.Join(local, "back.txt")
	if code, _, errOut := e.Run(t, "", "cp", id+":work/out.txt", back); code != 0 {
		t.Fatalf("cp out: %d %q", code, errOut)
	}
	if b, err := os.ReadFile(back); err != nil || string(b) != "made\n" {
		t.Fatalf("copied out: %q %v", b, err)
	}
	if code, _, errOut := e.Run(t, "", "cp", id+":work/copied", local); code != 0 {
		t.Fatalf("cp out a directory: %d %q", code, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(local, "copied", "sub", "leaf")); err != nil || string(b) != "leaf\n" {
		t.Fatalf("directory copied out: %q %v", b, err)
	}
	return local
}

// checkNotStarted: exec of a command that cannot start exits as a shell's
// would, with one line on stderr: 127 for one not found, 126 for one found
// but not executable (a directory, a file without the x bit).
func checkNotStarted(t *testing.T, e *testkit.CLIEnv, id string) {
	t.Helper()
	if code, _, errOut := e.Run(t, "", "exec", id, "--", "sh", "-c", "printf x > f; chmod 644 f"); code != 0 {
		t.Fatalf("making a file without the x bit: %d %q", code, errOut)
	}
	for _, tc := range []struct {
		argv []string
		want int
	}{{[]string{"no-such-command"}, 127}, {[]string{"./no-such-file"}, 127}, {[]string{"/tmp"}, 126}, {[]string{"./f"}, 126}} {
		code, out, errOut := e.Run(t, "", append([]string{"exec", id, "--"}, tc.argv...)...)
		if code != tc.want || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "exec_failed") {
			t.Errorf("exec %q: %d %q %q, want exit %d and one exec_failed line", tc.argv, code, out, errOut, tc.want)
		}
	}
	// A program's own 126 is its code, not a failure to start.
	if code, _, errOut := e.Run(t, "", "exec", id, "--", "sh", "-c", "exit 126"); code != 126 || errOut != "" {
		t.Errorf("exec of a program exiting 126: %d %q", code, errOut)
	}
}

// TestCLIThroughServer: with `stockade serve` running on the journal, the
// commands go through it: two runs at once both work (an embedded runtime
// would hold the journal), a detached exec returns its process id, a TTL is
// accepted, a process run --no-changes is untracked (diff says so), journal
// show reads the served journal; SIGTERM ends the server with exit 0.
func TestCLIThroughServer(t *testing.T) {
	e := testkit.NewCLI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv := e.Serve(t, ctx)

	type ran struct {
		code     int
		out, err string
	}
	results := make(chan ran, 2)
	for _, word := range []string{"first", "second"} {
		go func() {
			code, out, errOut := e.Run(t, "", "run", "--", "sh", "-c", "sleep 1; echo "+word)
			results <- ran{code, out, errOut}
		}()
	}
	for range 2 {
		r := <-results
		if r.code != 0 || (r.out != "first\n" && r.out != "second\n") {
			t.Fatalf("concurrent run through the server: %d %q %q", r.code, r.out, r.err)
		}
	}
	code, out, errOut := e.Run(t, "", "sandbox", "create", "--ttl", "1h")
	id := strings.TrimSpace(out)
	if code != 0 || id == "" {
		t.Fatalf("create --ttl through the server: %d %q %q", code, out, errOut)
	}
	code, out, errOut = e.Run(t, "", "exec", "-d", id, "--", "sleep", "30")
	if code != 0 || strings.TrimSpace(out) == "" {
		t.Fatalf("exec -d: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := e.Run(t, "", "exec", id, "--", "sh", "-c", "exit 4"); code != 4 {
		t.Fatalf("exec through the server: %d %q %q", code, out, errOut)
	}
	// --no-changes: the process's changes are not tracked, and diff says
	// so (a tracked one's are listed).
	for _, tc := range []struct {
		flags []string
		want  string
	}{{[]string{"--no-changes"}, "changes not tracked: not asked for"}, {nil, "file  /workspace/work/nc.txt"}} {
		args := append(append([]string{"exec", "-d"}, tc.flags...), id, "--", "sh", "-c", "echo x > nc.txt")
		code, out, errOut := e.Run(t, "", args...)
		pid := strings.TrimSpace(out)
		if code != 0 || pid == "" {
			t.Fatalf("exec -d %v: %d %q %q", tc.flags, code, out, errOut)
		}
		var diff string
		testutil.Eventually(t, "the detached process's end", func() bool {
			code, out, _ := e.Run(t, "", "diff", pid)
			diff = out
			return code == 0
		})
		if !strings.Contains(diff, tc.want) {
			t.Fatalf("diff after exec %v: %q, want %q", tc.flags, diff, tc.want)
		}
	}
	if code, out, errOut := e.Run(t, "", "journal", "show", id); code != 0 || !strings.Contains(out, "process.started") {
		t.Fatalf("journal show through the server: %d %q %q", code, out, errOut)
	}
	// The journal commands that read the file go through the server that
	// holds it.
	if code, out, errOut := e.Run(t, "", "journal", "export"); code != 0 || !strings.Contains(out, `"type":"sandbox.reserved"`) {
		t.Fatalf("journal export through the server: %d %q %q", code, out[:min(len(out), 200)], errOut)
	}
	if code, out, errOut := e.Run(t, "", "--json", "journal", "ls"); code != 0 || !strings.Contains(out, `"id":"`+id+`"`) {
		t.Fatalf("journal ls through the server: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := e.Run(t, "", "journal", "verify"); code != 0 || !strings.Contains(out, "every record decodes") {
		t.Fatalf("journal verify through the server: %d %q %q", code, out, errOut)
	}
	// journal show --follow: the past, then a new event as it happens.
	follow := exec.Command(e.Bin, "--journal", e.Journal, "journal", "show", "--follow", id)
	followed, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = follow.Process.Kill(); _ = follow.Wait() }() // killed: Wait's error is the kill
	// A follow that shows nothing is killed, so the scans below end (and
	// the test fails) instead of hanging.
	stall := time.AfterFunc(time.Minute, func() { _ = follow.Process.Kill() })
	defer stall.Stop()
	lines := bufio.NewScanner(followed)
	for lines.Scan() && !strings.Contains(lines.Text(), "sandbox.started") {
	}
	if code, _, errOut := e.Run(t, "", "exec", id, "--", "sh", "-c", "exit 6"); code != 6 {
		t.Fatalf("exec while followed: %d %q", code, errOut)
	}
	sawExit := false
	for !sawExit && lines.Scan() {
		sawExit = strings.Contains(lines.Text(), "process.exited") && strings.Contains(lines.Text(), "code 6")
	}
	if !sawExit {
		t.Fatalf("journal show --follow did not show the new process's exit: %v", lines.Err())
	}
	// logs -f: a detached process's recorded output, followed to its end.
	code, out, errOut = e.Run(t, "", "exec", "-d", id, "--", "sh", "-c", "echo early; sleep 1; echo late >&2; echo last")
	pid := strings.TrimSpace(out)
	if code != 0 || pid == "" {
		t.Fatalf("exec -d: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := e.Run(t, "", "logs", "-f", pid); code != 0 || out != "early\nlast\n" || errOut != "late\n" {
		t.Fatalf("logs -f: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := e.Run(t, "", "sandbox", "rm", "-f", id); code != 0 {
		t.Fatalf("rm -f: %d %q", code, errOut)
	}
	if err := srv.Stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("serve after SIGTERM: %v\n%s", err, srv.Logs.String())
	}
}
