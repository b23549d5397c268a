package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/spec"
)

func TestConnectRelay(t *testing.T) {
	echo := echoServer(t)
	target := hostPort(echo)
	h := startProxy(t, 16, target)
	w := h.watch()

	c, br, resp := h.connect(target, basicAuth("proc-7", "x"))
	if resp.StatusCode != 200 || resp.Status != "200 Connection established" {
		t.Fatalf("CONNECT answered %q", resp.Status)
	}
	// 1 MiB each way, written while the echo is read, then a half-close:
	// the echo's end comes back through the proxy as EOF.
	data := make([]byte, 1<<20)
	rand.Read(data)
	go func() {
		_, _ = c.Write(data)
		_ = c.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(br)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("echo: %d bytes, %v; want the %d sent", len(got), err, len(data))
	}
	_ = c.Close()

	d := next(t, w)
	want := egress.Decision{Seq: 1, Process: "proc-7", Method: "CONNECT", Host: "127.0.0.1", Port: echo,
		Addr: "127.0.0.1", Verdict: "allow", Rule: target, Up: 1 << 20, Down: 1 << 20}
	d.Time, d.Client, d.Millis = time.Time{}, "", 0
	if d != want {
		t.Errorf("decision\n got %+v\nwant %+v", d, want)
	}
}

// TestConnectEarlyData: bytes sent behind the CONNECT request, before its
// answer (a client that does not wait), reach the upstream first.
func TestConnectEarlyData(t *testing.T) {
	echo := echoServer(t)
	h := startProxy(t, 16, hostPort(echo))
	w := h.watch()
	c := h.dial()
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\n\r\nearly", hostPort(echo)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	if _, err := io.WriteString(c, "+late"); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if got, _ := io.ReadAll(br); string(got) != "early+late" {
		t.Fatalf("echo %q", got)
	}
	if d := next(t, w); d.Up != int64(len("early+late")) || d.Down != d.Up {
		t.Errorf("decision counts up %d down %d", d.Up, d.Down)
	}
}

func TestDenials(t *testing.T) {
	echo := echoServer(t)
	other := closedPort(t)
	h := startProxy(t, 16, hostPort(echo)+",0.0.0.0/0:80,localhost:"+fmt.Sprint(other))
	w := h.watch()
	cases := []struct {
		name    string
		request string // the request line
		status  int
		host    string
		port    uint16
		addr    string
		reason  string // the exact reason
	}{
		{"other port", "CONNECT " + hostPort(other), 403, "127.0.0.1", other, "127.0.0.1",
			fmt.Sprintf("no rule admits 127.0.0.1:%d", other)},
		{"address outside the rules", "CONNECT 203.0.113.9:443", 403, "203.0.113.9", 443, "203.0.113.9",
			"no rule admits 203.0.113.9:443"},
		{"metadata", "CONNECT 169.254.169.254:80", 403, "169.254.169.254", 80, "169.254.169.254",
			"169.254.169.254 is metadata: refused unless a rule names it"},
		{"private through 0/0", "CONNECT 10.1.2.3:80", 403, "10.1.2.3", 80, "10.1.2.3",
			"10.1.2.3 is private: refused unless a rule names it"},
		{"a name to loopback", fmt.Sprintf("CONNECT localhost:%d", other), 403, "localhost", other, "127.0.0.1",
			"127.0.0.1 is loopback: refused unless a rule names it"},
		{"a name no rule admits is not looked up", "CONNECT exfil-data.example:443", 403, "exfil-data.example", 443, "",
			"no rule admits exfil-data.example:443"},
		{"port 0", "CONNECT 127.0.0.1:0", 400, "127.0.0.1:0", 0, "", `port "0" is not 1..65535`},
		{"no port", "CONNECT example.com", 400, "example.com", 0, "", `target "example.com" is not host:port`},
		{"bad host", "CONNECT exa$mple.com:443", 400, "exa$mple.com:443", 0, "", `egress: invalid_argument: host "exa$mple.com": holds '$'`},
		{"zone", "CONNECT [fe80::1%25eth0]:443", 400, "[fe80::1%25eth0]:443", 0, "", `egress: invalid_argument: host "fe80::1%25eth0": a zone is not allowed`},
		{"https without CONNECT", "GET https://example.com/ HTTP/1.1", 400, "example.com", 0, "", "https:// needs CONNECT"},
		{"origin form", "GET /index.html HTTP/1.1", 400, "", 0, "", "not a proxy request: want CONNECT host:port or an absolute http:// URI"},
		{"other scheme", "GET ftp://example.com/ HTTP/1.1", 400, "", 0, "", "not a proxy request: want CONNECT host:port or an absolute http:// URI"},
		{"garbage", "HELLO", 400, "", 0, "", "malformed request: malformed HTTP request \"HELLO\""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := h.dial()
			line := tc.request
			if strings.HasPrefix(line, "CONNECT") {
				line += " HTTP/1.1"
			}
			if _, err := fmt.Fprintf(c, "%s\r\nHost: x\r\n\r\n", line); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status || resp.Header.Get("X-Stockade-Egress") != "denied" ||
				resp.Header.Get("Content-Type") != "text/plain" || !resp.Close || string(body) != tc.reason+"\n" {
				t.Errorf("answer %d %v %q; want %d with the reason", resp.StatusCode, resp.Header, body, tc.status)
			}
			d := next(t, w)
			if d.Verdict != "deny" || d.Host != tc.host || d.Port != tc.port || d.Addr != tc.addr || d.Reason != tc.reason || d.Rule != "" {
				t.Errorf("decision %+v; want deny %s port %d addr %q reason %q", d, tc.host, tc.port, tc.addr, tc.reason)
			}
		})
	}
}

// TestLocalhost: a name rule never opens a loopback address; an address
// rule naming it does, and then the name connects.
func TestLocalhost(t *testing.T) {
	echo := echoServer(t)
	target := fmt.Sprintf("localhost:%d", echo)
	h := startProxy(t, 16, target)
	w := h.watch()
	if _, _, resp := h.connect(target, ""); resp.StatusCode != 403 {
		t.Fatalf("CONNECT %s with only a name rule: %s", target, resp.Status)
	}
	next(t, w)
	apply(t, w, 2, target+","+hostPort(echo))
	c, br, resp := h.connect(target, "")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s with the address named: %s", target, resp.Status)
	}
	if _, err := io.WriteString(c, "ping"); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if got, _ := io.ReadAll(br); string(got) != "ping" {
		t.Fatalf("echo %q", got)
	}
	_ = c.Close()
	if d := next(t, w); d.Verdict != "allow" || d.Rule != hostPort(echo) || d.Addr != "127.0.0.1" || d.Host != "localhost" {
		t.Errorf("decision %+v", d)
	}
}

// TestDialFailure: an admitted address that refuses the connection is a
// 502, recorded as an allow that failed.
func TestDialFailure(t *testing.T) {
	closed := closedPort(t)
	h := startProxy(t, 16, hostPort(closed))
	w := h.watch()
	_, _, resp := h.connect(hostPort(closed), "")
	if resp.StatusCode != 502 || resp.Header.Get("X-Stockade-Egress") != "error" {
		t.Fatalf("CONNECT to a closed port: %s %v", resp.Status, resp.Header)
	}
	if d := next(t, w); d.Verdict != "allow" || !strings.HasPrefix(d.Reason, "dial: ") || d.Up != 0 {
		t.Errorf("decision %+v", d)
	}
}

func TestPlainHTTP(t *testing.T) {
	type seen struct {
		URI    string
		Host   string
		Close  bool
		Header http.Header
		Body   string
	}
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_ = json.NewEncoder(rw).Encode(seen{URI: r.RequestURI, Host: r.Host, Close: r.Close, Header: r.Header, Body: string(b)})
	}))
	defer srv.Close()
	p := port(t, srv.Listener.Addr())
	h := startProxy(t, 16, hostPort(p))
	w := h.watch()

	cases := []struct {
		method, request string
		body            string
	}{
		{"GET", fmt.Sprintf("GET http://127.0.0.1:%d/path?q=1 HTTP/1.1\r\nHost: elsewhere.example\r\n%s"+
			"Proxy-Connection: keep-alive\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nX-Keep: 2\r\nKeep-Alive: 5\r\n\r\n",
			p, basicAuth("alice", "secret")), ""},
		{"POST", fmt.Sprintf("POST http://127.0.0.1:%d/up HTTP/1.1\r\nHost: x\r\n%sTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
			p, basicAuth("alice", "")), "hello"},
		{"POST", fmt.Sprintf("POST http://127.0.0.1:%d/up HTTP/1.1\r\nHost: x\r\n%sExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello",
			p, basicAuth("alice", "")), "hello"},
	}
	for _, tc := range cases {
		t.Run(tc.method, func(t *testing.T) {
			c := h.dial()
			if _, err := io.WriteString(c, tc.request); err != nil {
				t.Fatal(err)
			}
			raw, err := io.ReadAll(c) // the proxy closes after one response
			if err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(bytes.NewReader(raw))
			resp, err := http.ReadResponse(br, nil)
			if err == nil && resp.StatusCode == 100 {
				resp, err = http.ReadResponse(br, nil)
			}
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("response %v %v:\n%s", resp, err, raw)
			}
			var s seen
			if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(s.URI, "/") || s.Host != hostPort(p) || !s.Close || s.Body != tc.body {
				t.Errorf("upstream saw %+v", s)
			}
			for _, hop := range []string{"Proxy-Authorization", "Proxy-Connection", "X-Hop", "Keep-Alive", "Expect", "User-Agent"} {
				if _, ok := s.Header[hop]; ok {
					t.Errorf("%s forwarded: %v", hop, s.Header)
				}
			}
			if tc.method == "GET" && (s.URI != "/path?q=1" || s.Header.Get("X-Keep") != "2") {
				t.Errorf("upstream saw %+v", s)
			}
			d := next(t, w)
			if d.Verdict != "allow" || d.Process != "alice" || d.Method != tc.method ||
				d.Host != "127.0.0.1" || d.Port != p || d.Up <= 0 || d.Down != int64(len(raw)-strings.Index(string(raw), "HTTP/1.1 200")) {
				t.Errorf("decision %+v (response %d bytes)", d, len(raw))
			}
		})
	}
}

// TestRulesLive: rules replaced through the control socket take effect on
// the next request, and cut the open tunnels they no longer admit. A bad
// rule set is refused and the old one stays.
func TestRulesLive(t *testing.T) {
	a, b := echoServer(t), echoServer(t)
	h := startProxy(t, 16, hostPort(a))
	w := h.watch()
	if h := w.Hello(); h.RulesVersion != 1 {
		t.Errorf("hello %+v", h)
	}

	tunnel, tbr, resp := h.connect(hostPort(a), "")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT a: %s", resp.Status)
	}
	if _, err := io.WriteString(tunnel, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(tbr, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if _, _, resp := h.connect(hostPort(b), ""); resp.StatusCode != 403 {
		t.Fatalf("CONNECT b under version 1: %s", resp.Status)
	}
	if d := next(t, w); d.Verdict != "deny" || d.Port != b {
		t.Fatalf("decision %+v", d)
	}

	apply(t, w, 2, hostPort(b))
	// The open tunnel to a is cut: its reader ends, and its decision
	// says why.
	if _, err := io.ReadAll(tbr); err != nil && !isReset(err) {
		t.Fatalf("tunnel to a after the change: %v", err)
	}
	if d := next(t, w); d.Verdict != "allow" || d.Port != a || d.Up != 1 ||
		d.Reason != fmt.Sprintf("cut by rules version 2: no rule admits 127.0.0.1:%d", a) {
		t.Fatalf("cut decision %+v", d)
	}
	if _, _, resp := h.connect(hostPort(a), ""); resp.StatusCode != 403 {
		t.Errorf("CONNECT a under version 2: %s", resp.Status)
	}
	next(t, w)
	c, _, resp := h.connect(hostPort(b), "")
	if resp.StatusCode != 200 {
		t.Errorf("CONNECT b under version 2: %s", resp.Status)
	}
	_ = c.Close()
	next(t, w)

	// A refused set leaves version 2 in force.
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	bad := []spec.EgressRule{{Host: "not a host"}}
	if err := w.Apply(ctx, 3, bad, nil); !spec.IsCode(err, spec.CodeInvalidArgument) || !strings.Contains(err.Error(), `rule 0: policy: invalid_argument: egress rule "not a host"`) {
		t.Fatalf("Apply of a bad rule: %v", err)
	}
	if v := h.p.rules.Load().version; v != 2 {
		t.Errorf("rules version %d after a refused set", v)
	}
	if got := h.control().Hello().RulesVersion; got != 2 {
		t.Errorf("hello after a refused set says version %d", got)
	}
}

func isReset(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "reset") || strings.Contains(err.Error(), "closed"))
}

// deny makes n deny decisions through the proxy (CONNECT to a port no rule
// admits) and waits for them on w.
func denyN(t *testing.T, h *harness, w *egress.Control, n int) []egress.Decision {
	var ds []egress.Decision
	for range n {
		c := h.dial()
		_, _ = io.WriteString(c, "CONNECT 203.0.113.1:9 HTTP/1.1\r\n\r\n")
		_, _ = io.ReadAll(c)
		_ = c.Close()
		ds = append(ds, next(t, w))
	}
	return ds
}

// TestResume: a new control client replaces the old one and resumes after
// the seq it names: exactly the later decisions, then new ones live.
func TestResume(t *testing.T) {
	h := startProxy(t, 16, "")
	w1 := h.watch()
	ds := denyN(t, h, w1, 5)
	for i, d := range ds {
		if d.Seq != uint64(i+1) {
			t.Fatalf("decision %d has seq %d", i, d.Seq)
		}
	}
	// Decisions made while nobody listens are kept.
	_ = w1.Close()
	for range 3 {
		c := h.dial()
		_, _ = io.WriteString(c, "BOGUS\r\n\r\n")
		_, _ = io.ReadAll(c)
	}
	// The ring fills asynchronously to the client's close; the hello
	// must show all three, so wait for them through a link of its own.
	spy := h.watch()
	for range 8 {
		next(t, spy)
	}
	w2 := h.control()
	if hello := w2.Hello(); hello.Next != 9 || hello.Oldest != 1 || hello.Version != egress.ProtocolVersion {
		t.Fatalf("hello %+v", hello)
	}
	// spy was replaced by w2.
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if _, err := spy.Next(ctx); err == nil {
		t.Error("the replaced control link still delivers")
	}
	if err := w2.Resume(5); err != nil {
		t.Fatal(err)
	}
	for want := uint64(6); want <= 8; want++ {
		if d := next(t, w2); d.Seq != want || d.Reason == "" {
			t.Fatalf("resumed decision %+v, want seq %d", d, want)
		}
	}
	if d := denyN(t, h, w2, 1)[0]; d.Seq != 9 {
		t.Fatalf("live decision %+v, want seq 9", d)
	}
}

// TestPacedStream: decisions that come while the stream is paced (just
// after a write of decisions) all arrive, in order, and a rules answer due
// meanwhile is not held behind them.
func TestPacedStream(t *testing.T) {
	h := startProxy(t, 16, "")
	w := h.watch()
	add := func(i int) {
		h.p.record(egress.Decision{Time: time.Now(), Method: "CONNECT", Host: fmt.Sprintf("h%d", i), Verdict: "deny", Reason: "test"})
	}
	add(0)
	if d := next(t, w); d.Seq != 1 {
		t.Fatalf("first decision %+v", d)
	}
	const burst = 50
	for i := 1; i <= burst; i++ {
		add(i)
	}
	apply(t, w, 2, "example.com:443")
	for i := 1; i <= burst; i++ {
		if d := next(t, w); d.Seq != uint64(i+1) || d.Host != fmt.Sprintf("h%d", i) {
			t.Fatalf("decision %+v; want seq %d", d, i+1)
		}
	}
}

// TestRingBound: past RingSize decisions the oldest go; the hello says
// where the ring starts, and a resume from before it starts there.
func TestRingBound(t *testing.T) {
	h := startProxy(t, 16, "")
	const extra = 10
	for i := range egress.RingSize + extra {
		h.p.record(egress.Decision{Time: time.Now(), Method: "CONNECT", Host: fmt.Sprintf("h%d", i), Verdict: "deny", Reason: "test"})
	}
	w := h.control()
	if hello := w.Hello(); hello.Oldest != extra+1 || hello.Next != egress.RingSize+extra+1 {
		t.Fatalf("hello %+v; want oldest %d next %d", hello, extra+1, egress.RingSize+extra+1)
	}
	if err := w.Resume(3); err != nil {
		t.Fatal(err)
	}
	for i := range egress.RingSize {
		d := next(t, w)
		if want := uint64(extra + 1 + i); d.Seq != want || d.Host != fmt.Sprintf("h%d", want-1) {
			t.Fatalf("decision %+v; want seq %d", d, want)
		}
	}
}

// TestConnCap: connections beyond the cap get 503 and a deny decision;
// once one ends, a new one is served.
func TestConnCap(t *testing.T) {
	echo := echoServer(t)
	h := startProxy(t, 2, hostPort(echo))
	w := h.watch()
	var tunnels []net.Conn
	for range 2 {
		c, _, resp := h.connect(hostPort(echo), "")
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT under the cap: %s", resp.Status)
		}
		tunnels = append(tunnels, c)
	}
	// The refusal comes without reading the request: read it before
	// writing, or the close could reset the connection first.
	c := h.dial()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 503 {
		t.Fatalf("over the cap: %v %v", resp, err)
	}
	if d := next(t, w); d.Verdict != "deny" || d.Reason != "over the limit of 2 connections" || d.Client == "" {
		t.Errorf("decision %+v", d)
	}
	_ = tunnels[0].Close()
	if d := next(t, w); d.Verdict != "allow" {
		t.Errorf("decision %+v", d)
	}
	// The slot is given back just after the decision is recorded: poll
	// until a connection is served (each refusal is recorded too).
	testutil.Eventually(t, "a slot after a tunnel ended", func() bool {
		c, _, resp := h.connect(hostPort(echo), "")
		if resp.StatusCode == 200 {
			_ = c.Close()
			return true
		}
		next(t, w)
		return false
	})
}

func TestControlSocket(t *testing.T) {
	h := startProxy(t, 1, "")
	fi, err := os.Stat(h.ctlPath)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("control socket %v %v; want a 0600 socket", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Dir(h.ctlPath)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("control directory %v %v; want 0700", fi.Mode(), err)
	}
	// A runtime that breaks the protocol gets an error as the last word.
	conn, err := net.Dial("unix", h.ctlPath)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(waitLimit))
	if _, err := io.WriteString(conn, `{"applied":1}`+"\n"); err != nil {
		t.Fatal(err)
	}
	lr := egress.NewLineReader(conn)
	var kinds []egress.Kind
	for {
		l, err := lr.ReadLine()
		if err != nil {
			break
		}
		m, err := egress.ParseMessage(l)
		if err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, m.Kind)
		if m.Kind == egress.KindError && m.Error != "protocol: egress: protocol violation: a applied message from the runtime" {
			t.Errorf("last word %q", m.Error)
		}
	}
	if len(kinds) != 2 || kinds[0] != egress.KindHello || kinds[1] != egress.KindError {
		t.Errorf("the proxy sent %v; want hello and an error", kinds)
	}
}

func TestSplitTarget(t *testing.T) {
	cases := []struct {
		in   string
		def  uint16
		host string
		port uint16
	}{
		{"example.com:443", 0, "example.com", 443},
		{"Example.COM.:443", 0, "example.com", 443},
		{"[::1]:8080", 0, "::1", 8080},
		{"example.com", 80, "example.com", 80},
		{"[2001:db8::1]", 80, "2001:db8::1", 80},
		{"127.0.0.1:8080", 80, "127.0.0.1", 8080},
		{"example.com", 0, "", 0},
		{"example.com:", 80, "", 0},
		{"example.com:65536", 0, "", 0},
		{"example.com:-1", 0, "", 0},
		{"::1:80", 0, "", 0},
		{"[::1]", 0, "", 0},
		{"a b:80", 0, "", 0},
	}
	for _, tc := range cases {
		host, port, err := splitTarget(tc.in, tc.def)
		if host != tc.host || port != tc.port || (err != nil) != (tc.host == "") {
			t.Errorf("splitTarget(%q, %d) = %q, %d, %v; want %q, %d", tc.in, tc.def, host, port, err, tc.host, tc.port)
		}
	}
}

func TestProxyUser(t *testing.T) {
	cases := map[string]string{
		"":                        "",
		"Basic " + b64("p1:pw"):   "p1",
		"basic " + b64("p1"):      "p1",
		"Basic " + b64(":pw"):     "",
		"Bearer " + b64("p1:pw"):  "",
		"Basic !!!":               "",
		"Basic " + b64("a:b:c"):   "a",
		"Basic  " + b64("sp:ace"): "sp",
	}
	for in, want := range cases {
		h := http.Header{}
		if in != "" {
			h.Set("Proxy-Authorization", in)
		}
		if got := proxyUser(h); got != want {
			t.Errorf("proxyUser(%q) = %q, want %q", in, got, want)
		}
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestClip(t *testing.T) {
	if got := clip("héllo", 2); got != "h" {
		t.Errorf("clip split a rune: %q", got)
	}
	if got := clip("a\xffb", 10); got != "a?b" {
		t.Errorf("clip kept a bad byte: %q", got)
	}
}
