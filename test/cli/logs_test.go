package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/test/testkit"
)

// bothStreams prints to stdout and stderr alternately; the pauses keep the
// two pipes' order (they are read apart, and only their order of arrival is
// recorded).
const bothStreams = "echo out1; sleep 0.2; echo err1 >&2; sleep 0.2; echo out2; sleep 0.2; printf err2 >&2; exit 3"

// TestCLILogsThroughServer: with `stockade serve` running, an exec through
// the CLI prints to both streams; `logs` shows them in order (one stream
// each, or both in order on one file; --json with offsets), `journal show
// --output` shows them under the process's exit line; after SIGTERM (exit
// 0) `logs` and `journal show --output` still read the recording with no
// server.
func TestCLILogsThroughServer(t *testing.T) {
	e := testkit.NewCLI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv := e.Serve(t, ctx)

	code, out, errOut := e.Run(t, "", "sandbox", "create")
	id := strings.TrimSpace(out)
	if code != 0 || id == "" {
		t.Fatalf("create: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := e.Run(t, "", "exec", id, "--", "sh", "-c", bothStreams); code != 3 || out != "out1\nout2\n" || errOut != "err1\nerr2" {
		t.Fatalf("exec: %d %q %q", code, out, errOut)
	}
	pid := processOf(t, e, id)

	checkLogs := func(how string) {
		t.Helper()
		if code, out, errOut := e.Run(t, "", "logs", pid); code != 0 || out != "out1\nout2\n" || errOut != "err1\nerr2" {
			t.Fatalf("logs %s: %d %q %q", how, code, out, errOut)
		}
		if code, out, errOut := e.Run(t, "", "logs", "--stderr", pid); code != 0 || out != "" || errOut != "err1\nerr2" {
			t.Fatalf("logs --stderr %s: %d %q %q", how, code, out, errOut)
		}
		// Both streams onto one file: the order the process printed them.
		cmd := exec.Command(e.Bin, "--journal", e.Journal, "logs", pid)
		var both bytes.Buffer
		cmd.Stdout, cmd.Stderr = &both, &both
		if err := cmd.Run(); err != nil || both.String() != "out1\nerr1\nout2\nerr2" {
			t.Fatalf("logs %s, both streams on one file: %q %v", how, both.String(), err)
		}
		code, out, errOut := e.Run(t, "", "logs", "--json", pid)
		if code != 0 {
			t.Fatalf("logs --json %s: %d %q", how, code, errOut)
		}
		type line struct {
			Stream  string
			Offset  int64
			Text    *string
			Summary *stockade.OutputSummary
		}
		var got []string
		var end *stockade.OutputSummary
		dec := json.NewDecoder(strings.NewReader(out))
		for dec.More() {
			var l line
			if err := dec.Decode(&l); err != nil {
				t.Fatalf("logs --json %s: %v in %q", how, err, out)
			}
			if l.Stream == "end" {
				end = l.Summary
				continue
			}
			if l.Text == nil {
				t.Fatalf("logs --json %s: a line without text: %q", how, out)
			}
			got = append(got, l.Stream+"@"+testkit.Itoa(l.Offset)+":"+*l.Text)
		}
		want := []string{"stdout@0:out1\n", "stderr@5:err1\n", "stdout@10:out2\n", "stderr@15:err2"}
		if strings.Join(got, "|") != strings.Join(want, "|") || end == nil || !end.Complete || end.StdoutBytes != 10 || end.StderrBytes != 9 || end.Missing != 0 {
			t.Fatalf("logs --json %s: %q, end %+v; want %q, complete", how, got, end, want)
		}
	}
	checkLogs("while served")

	// journal show --output: the output, marked by stream, right under
	// the process's exit line.
	checkShowOutput := func(how string) {
		t.Helper()
		code, out, errOut := e.Run(t, "", "journal", "show", "--output", id)
		if code != 0 {
			t.Fatalf("journal show --output %s: %d %q", how, code, errOut)
		}
		lines := strings.Split(out, "\n")
		at := -1
		for i, l := range lines {
			if strings.Contains(l, pid) && strings.Contains(l, "process.exited") {
				at = i
			}
		}
		wantUnder := []string{"out| out1", "err| err1", "out| out2", "err| err2"}
		if at < 0 || len(lines) < at+1+len(wantUnder) {
			t.Fatalf("journal show --output %s: no exit line of %s with output under it:\n%s", how, pid, out)
		}
		for i, w := range wantUnder {
			if got := strings.TrimSpace(lines[at+1+i]); got != w {
				t.Fatalf("journal show --output %s, line %d under the exit: %q, want %q\n%s", how, i+1, got, w, out)
			}
		}
	}
	checkShowOutput("through the server")

	if code, _, errOut := e.Run(t, "", "sandbox", "rm", "-f", id); code != 0 {
		t.Fatalf("rm -f: %d %q", code, errOut)
	}
	if err := srv.Stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("serve after SIGTERM: %v (want exit 0)\n%s", err, srv.Logs.String())
	}
	if _, err := os.Stat(srv.Sock); !os.IsNotExist(err) {
		t.Fatalf("socket after a clean stop: %v", err)
	}
	// No server, no runtime: logs reads the recording files, journal show
	// the journal and them.
	checkLogs("with no server")
	checkShowOutput("with no server")
}

// processOf is the one process journaled in sandbox id, from journal show
// --json.
func processOf(t *testing.T, e *testkit.CLIEnv, id string) string {
	t.Helper()
	code, out, errOut := e.Run(t, "", "journal", "show", "--json", id)
	if code != 0 {
		t.Fatalf("journal show --json: %d %q", code, errOut)
	}
	ids := map[string]bool{}
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var ev struct{ Kind, ID string }
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("journal show --json: %v in %q", err, out)
		}
		if ev.Kind == "process" {
			ids[ev.ID] = true
		}
	}
	if len(ids) != 1 {
		t.Fatalf("journal show --json: processes %v, want one\n%s", ids, out)
	}
	for pid := range ids {
		return pid
	}
	return ""
}
