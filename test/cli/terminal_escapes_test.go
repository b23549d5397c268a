package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/test/testkit"
)

// rcHostile is what a sandbox puts in the strings it controls: a title
// change (OSC … BEL) and a screen clear (CSI).
const rcHostile = "\x1b]0;pwned\a\x1b[2J"

// rcTerminalSafe fails t if a line of out holds a rune a terminal obeys.
func rcTerminalSafe(t *testing.T, what, out string) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		ok := utf8.ValidString(line)
		for _, r := range line {
			ok = ok && unicode.IsPrint(r) && !(r >= 0x7f && r <= 0x9f)
		}
		if !ok {
			t.Fatalf("%s printed a control: %q", what, line)
		}
	}
}

// TestNewLayersEscapeSandboxStrings: a process of an allowlist sandbox
// whose argv, output and Proxy-Authorization user carry terminal escape
// sequences. journal show (argv), journal show --egress (the proxy user)
// and journal show --output print them escaped; --json keeps them exactly;
// stockade logs writes the output bytes as they are.
func TestNewLayersEscapeSandboxStrings(t *testing.T) {
	e := testkit.NewCLI(t)
	code, out, errOut := e.Run(t, "", "sandbox", "create", "--network", "allow=192.0.2.1:443")
	if code != 0 {
		t.Fatalf("sandbox create: %d %s", code, errOut)
	}
	sb := strings.TrimSpace(out)
	t.Cleanup(func() { e.Run(t, "", "sandbox", "rm", "-f", sb) })
	// The proxy user is the hostile string; the CONNECT target is denied
	// (not in the allowlist), which is decided and recorded all the same.
	script := `: '` + rcHostile + `'; ` + testkit.ProxyScript + `auth=$(printf '\033]0;pwned\007\033[2J:x' | base64 | tr -d '\n'); ` +
		`printf 'out \033]0;pwned\007\033[2J\n'; ` +
		`printf 'CONNECT 198.51.100.7:443 HTTP/1.1\r\nHost: x\r\nProxy-Authorization: Basic %s\r\n\r\n' "$auth" | nc -w 5 "$ph" "$pp" >/dev/null`
	code, out, errOut = e.Run(t, "", "exec", sb, "--", "sh", "-c", script)
	if code != 0 {
		t.Fatalf("exec: %d %q %q", code, out, errOut)
	}

	// The process's id, from the journal's JSON.
	code, out, errOut = e.Run(t, "", "--json", "journal", "show", sb)
	if code != 0 {
		t.Fatalf("journal show --json: %d %s", code, errOut)
	}
	var pid string
	argvKept := false
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var ev host.HistoryEvent
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if ev.Type == "process.reserved" {
			pid = ev.ID
			var r struct {
				Spec struct{ Argv []string } `json:"spec"`
			}
			if err := json.Unmarshal(ev.Payload, &r); err != nil {
				t.Fatalf("process.reserved payload: %v", err)
			}
			argvKept = len(r.Spec.Argv) == 3 && strings.Contains(r.Spec.Argv[2], rcHostile)
		}
	}
	if pid == "" || !argvKept {
		t.Fatalf("journal show --json: no process, or its argv not kept exactly:\n%s", out)
	}

	code, out, errOut = e.Run(t, "", "journal", "show", sb)
	if code != 0 {
		t.Fatalf("journal show: %d %s", code, errOut)
	}
	rcTerminalSafe(t, "journal show", out)
	if !strings.Contains(out, `\x1b]0;pwned\a`) {
		t.Fatalf("journal show does not show the argv escaped:\n%s", out)
	}

	code, out, errOut = e.Run(t, "", "journal", "show", sb, "--output")
	if code != 0 {
		t.Fatalf("journal show --output: %d %s", code, errOut)
	}
	rcTerminalSafe(t, "journal show --output", out)

	code, out, errOut = e.Run(t, "", "logs", pid)
	if code != 0 || !strings.Contains(out, "out "+rcHostile+"\n") {
		t.Fatalf("logs: %d %q %q; want the output bytes as they are", code, out, errOut)
	}

	// The proxy's decision is recorded beside the journal (the proxy
	// reports it; the exec's end does not wait for it).
	var ds []egress.Decision
	testutil.Eventually(t, "the decision with the hostile proxy user", func() bool {
		code, out, _ := e.Run(t, "", "--json", "journal", "show", sb, "--egress")
		if code != 0 {
			return false
		}
		ds = ds[:0]
		dec := json.NewDecoder(strings.NewReader(out))
		for {
			var d egress.Decision
			if dec.Decode(&d) != nil {
				break
			}
			ds = append(ds, d)
		}
		for _, d := range ds {
			if d.Process == rcHostile {
				return true
			}
		}
		return false
	})
	code, out, errOut = e.Run(t, "", "journal", "show", sb, "--egress")
	if code != 0 {
		t.Fatalf("journal show --egress: %d %s", code, errOut)
	}
	rcTerminalSafe(t, "journal show --egress", out)
	if !strings.Contains(out, `"\x1b]0;pwned\a\x1b[2J"`) {
		t.Fatalf("journal show --egress does not show the proxy user escaped:\n%s", out)
	}
}
