package mcp

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/test/testkit"
)

// TestMCPCrashStory: the served runtime is killed -9 while a command an
// agent started in the background prints; after the restart a new MCP
// session (a new `stockade mcp`, through the server) reads the command's
// whole output through logs from offset 0, every byte once, and its exit.
func TestMCPCrashStory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e, first, _, sb := testkit.ServedKeptSandbox(t, ctx)
	a := spawn(t, ctx, e)
	var bg struct {
		ProcessID string `json:"process_id"`
	}
	a.must(ctx, "exec_background", map[string]any{"sandbox_id": sb.ID(),
		"command": "i=0; while [ $i -lt 300 ]; do echo line $i; i=$((i+1)); done; while [ ! -e /tmp/gate ]; do sleep 0.1; done; j=300; while [ $j -lt 600 ]; do echo line $j; j=$((j+1)); done"}, &bg)
	// The first half is recorded; then the server dies mid-session.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		var page struct {
			NextOffset int64 `json:"next_offset"`
		}
		a.must(ctx, "logs", map[string]any{"process_id": bg.ProcessID, "max_bytes": 1 << 20}, &page)
		if page.NextOffset >= int64(len(lines(0, 300))) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first half never reached the recording")
		}
	}
	_ = first.Stop(t, syscall.SIGKILL) // killed: its error says so
	e.Serve(t, ctx)                    // recovery re-adopts the process
	b := spawn(t, ctx, e)
	var gate struct {
		ExitCode int `json:"exit_code"`
	}
	b.must(ctx, "exec", map[string]any{"sandbox_id": sb.ID(), "command": "touch /tmp/gate"}, &gate)
	var w struct {
		Ended    bool `json:"ended"`
		ExitCode *int `json:"exit_code"`
	}
	b.must(ctx, "wait", map[string]any{"process_id": bg.ProcessID, "max_wait_seconds": 120}, &w)
	if !w.Ended || w.ExitCode == nil || *w.ExitCode != 0 {
		t.Fatalf("wait after the restart: %+v", w)
	}
	var whole strings.Builder
	from := int64(0)
	for range 200 {
		var page struct {
			Output     string `json:"output"`
			NextOffset int64  `json:"next_offset"`
			More       bool   `json:"more"`
			Missing    int64  `json:"missing"`
		}
		b.must(ctx, "logs", map[string]any{"process_id": bg.ProcessID, "offset": from, "max_bytes": 2000}, &page)
		if page.Missing != 0 {
			t.Fatalf("logs says %d bytes are missing", page.Missing)
		}
		whole.WriteString(page.Output)
		from = page.NextOffset
		if !page.More {
			break
		}
	}
	if want := lines(0, 600); whole.String() != want {
		t.Fatalf("the output after the crash: %d bytes, want %d (first difference at %d)", whole.Len(), len(want), testkit.FirstDiff(whole.String(), want))
	}
}

func lines(from, to int) string {
	var b strings.Builder
	for i := from; i < to; i++ {
		b.WriteString("line " + itoa(i) + "\n")
	}
	return b.String()
}

// TestMCPOverHTTP: `stockade serve --mcp` with a bearer token from a 0600
// file: the SDK's Streamable HTTP client with the token drives the whole
// agent's session (story); without the token the server answers 401.
func TestMCPOverHTTP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := testkit.NewCLI(t)
	image := dockertest.ImageID(t, dockertest.Client(t))
	tokenFile := filepath.Join(t.TempDir(), "token")
	const token = "a-test-token-0123456789"
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := e.Serve(t, ctx, "--mcp", "127.0.0.1:0", "--mcp-token", tokenFile)
	// The socket answers first; the MCP listener's line follows.
	var m []string
	for deadline := time.Now().Add(30 * time.Second); m == nil; time.Sleep(20 * time.Millisecond) {
		m = regexp.MustCompile(`serving MCP on (http://[^ ]+)`).FindStringSubmatch(s.Logs.String())
		if m == nil && time.Now().After(deadline) {
			t.Fatalf("the server did not say where MCP is served:\n%s", s.Logs.String())
		}
	}
	if resp, err := http.Post(m[1], "application/json", strings.NewReader(`{}`)); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a request without the token: %v %v", resp, err)
	} else {
		_ = resp.Body.Close()
	}
	tr := &mcp.StreamableClientTransport{Endpoint: m[1], MaxRetries: -1, HTTPClient: &http.Client{Transport: bearer{token, http.DefaultTransport}}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "0"}, nil).Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("connecting over HTTP with the token: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() }) // the test's session
	story(t, ctx, &agent{t: t, cs: cs}, image)
}

// bearer adds a token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}
