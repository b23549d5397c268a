package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/recorder"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/statedir"
)

// hostile is what a sandbox may put in any string it controls: a title
// change (OSC), a screen clear (CSI), a C1 CSI, a bidi override and a
// carriage return.
const hostile = "\x1b]0;pwned\a\x1b[2J\u009b31m\u202e\r"

// noControls fails t if out holds a byte or rune a terminal obeys.
func noControls(t *testing.T, what, out string) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if !terminalSafe(line) {
			t.Fatalf("%s printed a control: %q", what, line)
		}
	}
}

// TestRenderEscapesSandboxStrings: every human view of a string a sandbox
// controls is escaped (journal show's summaries, --egress's table, --output's
// lines, an error); --json keeps the string exactly; logs writes the
// output bytes as they are.
func TestRenderEscapesSandboxStrings(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.db")
	sbID, pID := recordedJournal(t, path, dockerio.FakeFrame{Stream: framing.Stdout, Data: []byte("out " + hostile + "\n")})
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := dispatch(context.Background(), append(args, "--journal", path), nil, &out, &errb)
		return code, out.String(), errb.String()
	}

	t.Run("journal show summaries", func(t *testing.T) {
		now := time.Now()
		var out bytes.Buffer
		p := historyPrinter{w: &out}
		for _, ev := range []lifecycle.Event{
			lifecycle.ProcessReserved{Sandbox: sbID, Spec: spec.Process{Argv: []string{"sh", "-c", hostile}}},
			lifecycle.ProcessExited{Reason: lifecycle.ReasonFailed, Message: "warden says " + hostile},
			lifecycle.WardenLost{Reason: hostile},
			lifecycle.Recovered{Decision: "lost", Observed: hostile},
		} {
			b, _ := json.Marshal(ev)
			if err := p.print(host.HistoryEvent{Kind: "process", ID: pID, Time: now, Type: ev.Type(), Payload: b}); err != nil {
				t.Fatal(err)
			}
		}
		noControls(t, "journal show", out.String())
		if !strings.Contains(out.String(), `\x1b]0;pwned\a`) {
			t.Fatalf("the escaped string is not shown:\n%s", out.String())
		}
	})

	t.Run("journal show --output", func(t *testing.T) {
		code, out, e := run("journal", "show", sbID, "--output")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, e)
		}
		noControls(t, "journal show --output", out)
		if !strings.Contains(out, `out| "out \x1b]0;pwned`) {
			t.Fatalf("the output line is not shown escaped:\n%s", out)
		}
	})

	t.Run("logs writes the bytes as they are", func(t *testing.T) {
		code, out, e := run("logs", pID)
		if code != 0 || out != "out "+hostile+"\n" {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out, e)
		}
	})

	t.Run("journal show --egress", func(t *testing.T) {
		log, err := recorder.OpenDecisions(statedir.Recordings(path), sbID)
		if err != nil {
			t.Fatal(err)
		}
		d := egress.Decision{Seq: 1, Time: time.Now(), Process: hostile, Method: "CONNECT" + hostile, Host: "h" + hostile,
			Port: 443, Addr: hostile, Verdict: egress.VerdictDeny, Reason: "refused: " + hostile}
		if err := log.Append(d); err != nil {
			t.Fatal(err)
		}
		if err := log.Close(); err != nil {
			t.Fatal(err)
		}
		code, out, e := run("journal", "show", sbID, "--egress")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, e)
		}
		noControls(t, "journal show --egress", out)
		if !strings.Contains(out, `"\x1b]0;pwned\a`) {
			t.Fatalf("the proxy user is not shown escaped:\n%s", out)
		}
		code, out, e = run("--json", "journal", "show", sbID, "--egress")
		if code != 0 {
			t.Fatalf("--json: exit %d: %s", code, e)
		}
		var got egress.Decision
		if err := json.Unmarshal([]byte(out), &got); err != nil || got.Process != hostile || got.Host != d.Host || got.Reason != d.Reason {
			t.Fatalf("--json does not keep the strings: %+v %v\n%s", got, err, out)
		}
		noControls(t, "journal show --egress --json", out)
	})

	t.Run("an error message", func(t *testing.T) {
		var errb bytes.Buffer
		fail(&errb, spec.Errorf(spec.CodeExecFailed, "process", "spawn failed: %s", hostile), 1)
		noControls(t, "fail", errb.String())
	})
}
