package mcpserver

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"os"
	"strings"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/spec"
)

// HTTPHandler serves the tools over MCP's Streamable HTTP transport,
// stateless (each request stands alone: nothing of a session to lose
// across a restart), at any path, refusing requests from a browser's
// pages (cross-origin) and, on loopback, ones whose Host is not loopback. A non-empty token is required of every
// request as "Authorization: Bearer TOKEN" (compared in constant time);
// a request without it is refused 401 before the MCP layer sees it.
func HTTPHandler(rt host.Runtime, opts Options, token string) http.Handler {
	// Stateless: no session for a subscription to live in.
	opts.noSubscriptions = true
	srv := New(rt, opts)
	// A browser's page must not drive the tools: the SDK refuses a
	// loopback listener's requests whose Host is not loopback (DNS
	// rebinding), and cross-origin requests are refused (a page's
	// fetch to 127.0.0.1 carries its Origin and Sec-Fetch-Site).
	h := http.NewCrossOriginProtection().Handler(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{Stateless: true, MaxRequestBodyBytes: MaxMessageBytes}))
	if token == "" {
		return h
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="stockade"`)
			http.Error(w, "stockade: a bearer token is required (the one in the file given to stockade serve --mcp-token)", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// MakeToken writes a new random token (32 bytes, base64) to path, 0600,
// replacing one there (written beside it, then renamed), and returns path.
func MakeToken(path string) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", spec.Wrap(spec.CodeInternal, "mcp", err, "making a token")
	}
	tmp := path + ".new"
	_ = os.Remove(tmp) // a leftover of a crash: ours to replace
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", spec.Wrap(spec.CodeInvalidArgument, "mcp", err, "writing a token beside the journal (give --mcp-token FILE instead)")
	}
	_, err = f.WriteString(base64.RawURLEncoding.EncodeToString(b) + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp) // the write's error is the one reported
		return "", spec.Wrap(spec.CodeInvalidArgument, "mcp", err, "writing the token file %s", path)
	}
	return path, nil
}

// ReadToken reads a bearer token from path: a regular file of this user's,
// readable by no one else (0600 or tighter), holding one non-empty line
// of at least 16 characters. Anything else is invalid_argument saying what
// to fix: a token others can read is no secret.
func ReadToken(path string) (string, error) {
	bad := func(format string, args ...any) (string, error) {
		return "", spec.Errorf(spec.CodeInvalidArgument, "mcp", "token file %s: "+format, append([]any{path}, args...)...)
	}
	// Not blocking: a FIFO planted at path must not hold the server.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return bad("%v", err)
	}
	defer func() { _ = f.Close() }() // only read
	fi, err := f.Stat()
	if err != nil {
		return bad("%v", err)
	}
	if !fi.Mode().IsRegular() {
		return bad("not a regular file")
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return bad("mode %04o lets others read it: chmod 600 %s", fi.Mode().Perm(), path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return bad("owned by uid %d, not this user (%d)", st.Uid, os.Geteuid())
	}
	b := make([]byte, 4096)
	n, _ := f.Read(b) // a short or failed read leaves too few bytes: refused below
	token := strings.TrimSpace(string(b[:n]))
	switch {
	case strings.ContainsAny(token, "\r\n"):
		return bad("more than one line")
	case len(token) < 16:
		return bad("the token is %d characters; use at least 16 (e.g. head -c 32 /dev/urandom | base64 > %s)", len(token), path)
	}
	return token, nil
}
