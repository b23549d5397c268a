package mcpserver_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/mcpserver"
	"github.com/stockade/stockade/spec"
)

// bearer adds a token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.next.RoundTrip(r)
}

// TestHTTPBearer: over Streamable HTTP the SDK's client with the token
// drives the tools; without it, or with another, it is refused 401
// before the MCP layer.
func TestHTTPBearer(t *testing.T) {
	f := testutil.NewFake(t)
	f.Script = script
	rt := testutil.OpenFake(t, f, "")
	const token = "0123456789abcdef-secret"
	srv := httptest.NewServer(mcpserver.HTTPHandler(rt.Host(), mcpserver.Options{}, token))
	t.Cleanup(srv.Close)
	ctx := context.Background()
	connect := func(tok string) (*mcp.ClientSession, error) {
		tr := &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: &http.Client{Transport: bearer{tok, http.DefaultTransport}}, MaxRetries: -1}
		return mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, nil).Connect(ctx, tr, nil)
	}
	for _, tok := range []string{"", "wrong-token-of-some-length"} {
		if cs, err := connect(tok); err == nil {
			_ = cs.Close()
			t.Fatalf("token %q: connected", tok)
		}
	}
	cs, err := connect(token)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cs.Close() }() // the test's session
	var made mcpserver.SandboxCreateOut
	must(t, cs, "sandbox_create", map[string]any{"image": fakeImage}, &made)
	var ran mcpserver.ExecOut
	must(t, cs, "exec", map[string]any{"sandbox_id": made.ID, "argv": []string{"echo", "hello"}}, &ran)
	if ran.Stdout != "hello\n" {
		t.Fatalf("exec over HTTP: %+v", ran)
	}
	resp, err := http.Post(srv.URL, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
		t.Fatalf("a request without the token: %s", resp.Status)
	}
}

// TestReadToken: a token file others can read, someone else's, empty or
// short, or of several lines is refused, saying what to fix.
func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "0123456789abcdef0123\n", 0o600)
	if tok, err := mcpserver.ReadToken(good); err != nil || tok != "0123456789abcdef0123" {
		t.Fatalf("a good token file: %q %v", tok, err)
	}
	for _, c := range []struct {
		path, want string
	}{
		{write("open", "0123456789abcdef0123", 0o644), "chmod 600"},
		{write("short", "abc", 0o600), "at least 16"},
		{write("lines", "0123456789abcdef\n0123456789abcdef", 0o600), "more than one line"},
		{dir, "not a regular file"},
		{filepath.Join(dir, "none"), "no such file"},
	} {
		if _, err := mcpserver.ReadToken(c.path); !spec.IsCode(err, spec.CodeInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want invalid_argument saying %q", filepath.Base(c.path), err, c.want)
		}
	}
}

// TestHTTPRefusesBrowsers: a page's cross-origin request, and a request
// whose Host is not loopback on a loopback listener (DNS rebinding), are
// refused before the tools.
func TestHTTPRefusesBrowsers(t *testing.T) {
	f := testutil.NewFake(t)
	rt := testutil.OpenFake(t, f, "")
	srv := httptest.NewServer(mcpserver.HTTPHandler(rt.Host(), mcpserver.Options{}, ""))
	t.Cleanup(srv.Close)
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	for _, c := range []struct {
		name   string
		header map[string]string
		host   string
	}{
		{"cross-origin", map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}, ""},
		{"rebound host", nil, "evil.example"},
	} {
		req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range c.header {
			req.Header.Set(k, v)
		}
		if c.host != "" {
			req.Host = c.host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %s, want 403", c.name, resp.Status)
		}
	}
}

// TestMakeToken: a made token is this user's alone and reads back; made
// again, it is another.
func TestMakeToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db.mcp-token")
	var tokens []string
	for range 2 {
		if _, err := mcpserver.MakeToken(path); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("the token file: %v %v", fi.Mode(), err)
		}
		tok, err := mcpserver.ReadToken(path)
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, tok)
	}
	if tokens[0] == tokens[1] || len(tokens[0]) < 32 {
		t.Fatalf("tokens %q", tokens)
	}
}
