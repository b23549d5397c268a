package faultproxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/testutil"
)

// upstream is a fake daemon on a unix socket: a few plain endpoints, an
// exec create that hands out ids, and an exec start that hijacks the
// connection and echoes each stdin line back as a stdout frame (and "bye"
// on stderr once stdin ends).
type upstream struct {
	socket   string
	srv      *http.Server
	hits     sync.Map // path → *atomic.Int64
	closed   atomic.Int64
	release  chan struct{}
	nextExec atomic.Int64
}

func (u *upstream) count(path string) int64 {
	v, _ := u.hits.LoadOrStore(path, new(atomic.Int64))
	return v.(*atomic.Int64).Load()
}

func newUpstream(t *testing.T) *upstream {
	t.Helper()
	dir, err := os.MkdirTemp("", "fpup-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	u := &upstream{socket: filepath.Join(dir, "d.sock"), release: make(chan struct{})}
	ln, err := net.Listen("unix", u.socket)
	if err != nil {
		t.Fatal(err)
	}
	// The fake daemon's writes fail whenever the proxy under test cuts a
	// stream on purpose: their errors are dropped, the client side checks.
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ping", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "OK") })
	mux.HandleFunc("GET /big", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100000")
		_, _ = w.Write(bytes.Repeat([]byte("x"), 100000))
	})
	mux.HandleFunc("GET /stream", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		select {
		case <-u.release:
			_, _ = io.WriteString(w, "second\n")
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("POST /containers/{id}/exec", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"Id":"%064x"}`, u.nextExec.Add(1))
	})
	mux.HandleFunc("POST /exec/{id}/start", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		c, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer func() { _ = c.Close() }()
		if r.Header.Get("Upgrade") != "" {
			_, _ = io.WriteString(c, "HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n")
		} else {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.docker.raw-stream\r\n\r\n")
		}
		for {
			line, err := brw.ReadString('\n')
			if err != nil {
				_, _ = c.Write(frame(2, "bye"))
				return
			}
			if _, err := c.Write(frame(1, line)); err != nil {
				return
			}
		}
	})
	u.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, _ := u.hits.LoadOrStore(r.URL.Path, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
		mux.ServeHTTP(w, r)
	}), ConnState: func(c net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			u.closed.Add(1)
		}
	}}
	go func() { _ = u.srv.Serve(ln) }() // ErrServerClosed at the cleanup
	t.Cleanup(func() { _ = u.srv.Close() })
	return u
}

func frame(id byte, payload string) []byte {
	b := make([]byte, 8+len(payload))
	b[0] = id
	binary.BigEndian.PutUint32(b[4:], uint32(len(payload)))
	copy(b[8:], payload)
	return b
}

func newProxy(t *testing.T, u *upstream) *Proxy {
	t.Helper()
	p, err := New(Options{Upstream: u.socket, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Close()
		if n := p.Goroutines(); n != 0 {
			t.Errorf("%d proxy goroutines left after Close", n)
		}
		if _, err := os.Stat(p.Socket()); err == nil {
			t.Errorf("the socket %s is left after Close", p.Socket())
		}
	})
	return p
}

func httpClient(p *Proxy) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", p.Socket())
		},
		DisableCompression: true,
	}}
}

func get(c *http.Client, path string) (string, error) {
	resp, err := c.Get("http://docker" + path)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func TestPassThroughKeepAlive(t *testing.T) {
	u := newUpstream(t)
	p := newProxy(t, u)
	c := httpClient(p)
	for i := range 3 {
		if got, err := get(c, "/ping"); err != nil || got != "OK" {
			t.Fatalf("request %d: %q %v", i, got, err)
		}
	}
	if got, err := get(c, "/big"); err != nil || len(got) != 100000 {
		t.Fatalf("big: %d bytes, %v", len(got), err)
	}
	if p.Requests() != 4 || p.Conns() != 1 {
		t.Fatalf("requests %d conns %d, want 4 on one connection", p.Requests(), p.Conns())
	}
	c.CloseIdleConnections()
	testutil.Eventually(t, "the connection closed", func() bool { return p.Conns() == 0 && p.Goroutines() == 1 })
}

func TestStreamingResponseAndClientGone(t *testing.T) {
	u := newUpstream(t)
	p := newProxy(t, u)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://docker/stream", nil)
	resp, err := httpClient(p).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "first\n" {
		t.Fatalf("first chunk: %q %v (a streaming response must be flushed as it comes)", line, err)
	}
	closed := u.closed.Load()
	cancel()
	_ = resp.Body.Close()
	testutil.Eventually(t, "the upstream connection closed after the client went away", func() bool { return u.closed.Load() > closed })
	testutil.Eventually(t, "the session ended", func() bool { return p.Conns() == 0 })
}

func TestResetBeforeForward(t *testing.T) {
	u := newUpstream(t)
	p := newProxy(t, u)
	f := p.Add(Rule{Match: "GET /ping", Action: Reset, Times: 1})
	c := httpClient(p)
	if _, err := get(c, "/ping"); err == nil {
		t.Fatal("a reset request succeeded")
	}
	select {
	case <-f.Fired():
	default:
		t.Fatal("Fired not closed")
	}
	if u.count("/ping") != 0 {
		t.Fatal("the daemon saw a request reset before forwarding")
	}
	if got, err := get(c, "/ping"); err != nil || got != "OK" {
		t.Fatalf("after the one reset: %q %v", got, err)
	}
	if f.Hits() != 1 || f.Seen() != 2 {
		t.Fatalf("hits %d seen %d, want 1 and 2", f.Hits(), f.Seen())
	}
}

func TestResetAfterAndTruncate(t *testing.T) {
	u := newUpstream(t)
	p := newProxy(t, u)
	c := httpClient(p)
	f := p.Add(Rule{Match: "/big", Action: ResetAfter, N: 5, Times: 1})
	if _, err := get(c, "/big"); err == nil {
		t.Fatal("a response cut in its status line read fine")
	}
	f.Remove()
	p.Add(Rule{Match: "/big", Action: ResetAfter, N: 300, Times: 1})
	got, err := get(c, "/big")
	if !errors.Is(err, io.ErrUnexpectedEOF) || len(got) == 0 || len(got) >= 300 {
		t.Fatalf("reset after 300 bytes: %d bytes, %v", len(got), err)
	}
	p.Clear()
	p.Add(Rule{Match: "/big", Action: Truncate, N: 1000, Times: 1})
	got, err = get(c, "/big")
	if !errors.Is(err, io.ErrUnexpectedEOF) || len(got) != 1000 {
		t.Fatalf("truncated at 1000 body bytes: %d bytes, %v", len(got), err)
	}
	// A chunked body is cut inside its chunks too.
	close(u.release)
	p.Add(Rule{Match: "/stream", Action: Truncate, N: 3, Times: 1})
	got, err = get(c, "/stream")
	if err == nil || got != "fir" {
		t.Fatalf("chunked, truncated at 3: %q %v", got, err)
	}
	if got, err := get(c, "/big"); err != nil || len(got) != 100000 {
		t.Fatalf("after the faults: %d bytes, %v", len(got), err)
	}
}

func TestDelay(t *testing.T) {
	u := newUpstream(t)
	p := newProxy(t, u)
	p.Add(Rule{Match: "GET /ping", Action: Delay, D: 200 * time.Millisecond, Times: 1})
	c := httpClient(p)
	// A delayed exchange is still answered (the hold itself is shown
	// below, with a delay no test outlives).
	if got, err := get(c, "/ping"); err != nil || got != "OK" {
		t.Fatalf("delayed: %q %v", got, err)
	}
	// A client that gives up during a delay ends the exchange upstream too.
	p.Add(Rule{Match: "GET /ping", Action: Delay, D: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	closed := u.closed.Load()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://docker/ping", nil)
	if _, err := c.Do(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a client deadline under the delay: %v", err)
	}
	testutil.Eventually(t, "the upstream connection closed", func() bool { return u.closed.Load() > closed })
	testutil.Eventually(t, "the session ended", func() bool { return p.Conns() == 0 })
}

func TestStallBodyUntilRemoved(t *testing.T) {
	u := newUpstream(t)
	p := newProxy(t, u)
	f := p.Add(Rule{Match: "/big", Action: Stall, N: 1000})
	resp, err := httpClient(p).Get("http://docker/big")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	buf := make([]byte, 1000)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	more := make(chan int, 1)
	go func() {
		n, _ := io.Copy(io.Discard, resp.Body)
		more <- int(n)
	}()
	select {
	case n := <-more:
		t.Fatalf("%d more bytes through a stall", n)
	case <-time.After(200 * time.Millisecond):
	}
	f.Remove()
	if n := <-more; n != 99000 {
		t.Fatalf("after the stall was lifted: %d bytes, want 99000", n)
	}
}

// hijackConn starts an exec through the proxy (created first, so Exec
// rules know it) and returns the raw stream past the response head.
func hijackConn(t *testing.T, p *Proxy, cmd string, upgrade bool) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	c := httpClient(p)
	resp, err := c.Post("http://docker/containers/c1/exec", "application/json", strings.NewReader(`{"Cmd":["`+cmd+`"]}`))
	if err != nil {
		t.Fatal(err)
	}
	var created struct{ Id string }
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err := jsonUnmarshal(b, &created); err != nil {
		t.Fatalf("exec create: %s: %v", b, err)
	}
	c.CloseIdleConnections()
	conn, err := net.Dial("unix", p.Socket())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	body := `{"Detach":false,"Tty":false}`
	hdr := ""
	if upgrade {
		hdr = "Connection: Upgrade\r\nUpgrade: tcp\r\n"
	}
	if _, err := fmt.Fprintf(conn, "POST /exec/%s/start HTTP/1.1\r\nHost: docker\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s", created.Id, len(body), hdr, body); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	hresp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	return conn, br, hresp
}

func readFrame(r io.Reader) (byte, string, error) {
	var h [8]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, "", err
	}
	b := make([]byte, binary.BigEndian.Uint32(h[4:]))
	_, err := io.ReadFull(r, b)
	return h[0], string(b), err
}

func TestHijackRelaysBothWays(t *testing.T) {
	for _, upgrade := range []bool{true, false} {
		t.Run(fmt.Sprintf("upgrade=%v", upgrade), func(t *testing.T) {
			u := newUpstream(t)
			p := newProxy(t, u)
			conn, br, resp := hijackConn(t, p, "echo", upgrade)
			want := 101
			if !upgrade {
				want = 200
			}
			if resp.StatusCode != want {
				t.Fatalf("status %d", resp.StatusCode)
			}
			for _, line := range []string{"one\n", "two\n"} {
				_, _ = io.WriteString(conn, line)
				if id, got, err := readFrame(br); err != nil || id != 1 || got != line {
					t.Fatalf("echo of %q: %d %q %v", line, id, got, err)
				}
			}
			testutil.Eventually(t, "the stream is listed", func() bool { return p.Streams() == 1 })
			if err := conn.(*net.UnixConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			if id, got, err := readFrame(br); err != nil || id != 2 || got != "bye" {
				t.Fatalf("after the half-close: %d %q %v", id, got, err)
			}
			if _, _, err := readFrame(br); !errors.Is(err, io.EOF) {
				t.Fatalf("the stream did not end cleanly: %v", err)
			}
			_ = conn.Close()
			testutil.Eventually(t, "the session ended", func() bool { return p.Conns() == 0 && p.Goroutines() == 1 })
		})
	}
}

func TestCorruptStreamID(t *testing.T) {
	u := newUpstream(t)
	p := newProxy(t, u)
	other := p.Add(Rule{Exec: "someone-else", Action: Reset})
	f := p.Add(Rule{Match: "POST /exec/", Exec: "MARK", Action: CorruptStream, N: 1})
	conn, br, _ := hijackConn(t, p, "MARK", true)
	if _, err := io.WriteString(conn, "one\n"); err != nil {
		t.Fatal(err)
	}
	if id, got, err := readFrame(br); err != nil || id != 1 || got != "one\n" {
		t.Fatalf("the frame at 0 must pass: %d %q %v", id, got, err)
	}
	if _, err := io.WriteString(conn, "two\n"); err != nil {
		t.Fatal(err)
	}
	if id, got, err := readFrame(br); err != nil || id != 0x81 || got != "two\n" {
		t.Fatalf("the frame at 12: %#x %q %v, want id 0x81", id, got, err)
	}
	if _, err := io.WriteString(conn, "three\n"); err != nil {
		t.Fatal(err)
	}
	if id, got, err := readFrame(br); err != nil || id != 1 || got != "three\n" {
		t.Fatalf("the stream goes on after the corrupt frame: %d %q %v", id, got, err)
	}
	if f.Hits() != 1 || other.Seen() != 0 {
		t.Fatalf("hits %d, the other exec's rule saw %d", f.Hits(), other.Seen())
	}
}

func TestCorruptLength(t *testing.T) {
	u := newUpstream(t)
	p := newProxy(t, u)
	p.Add(Rule{Exec: "MARK", Action: CorruptLength, N: 1, Extra: 100})
	conn, br, _ := hijackConn(t, p, "MARK", true)
	if _, err := io.WriteString(conn, "one\n"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readFrame(br); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, "two\n"); err != nil {
		t.Fatal(err)
	}
	var h [8]byte
	if _, err := io.ReadFull(br, h[:]); err != nil || h[0] != 1 || binary.BigEndian.Uint32(h[4:]) != 104 {
		t.Fatalf("header %x %v, want length 104", h, err)
	}
	rest, err := io.ReadAll(br)
	if string(rest) != "two\n" || err != nil {
		t.Fatalf("after the overlong header: %q %v, want the payload and the end", rest, err)
	}
}

func TestTruncateStreamMidFrame(t *testing.T) {
	u := newUpstream(t)
	p := newProxy(t, u)
	p.Add(Rule{Exec: "MARK", Action: Truncate, N: 15})
	conn, br, _ := hijackConn(t, p, "MARK", true)
	if _, err := io.WriteString(conn, "one\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, "two\n"); err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(br)
	if want := string(append(frame(1, "one\n"), frame(1, "two\n")[:3]...)); string(got) != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestOpenRulesOnALiveStream(t *testing.T) {
	u := newUpstream(t)
	p := newProxy(t, u)
	conn, br, _ := hijackConn(t, p, "MARK", true)
	if _, err := io.WriteString(conn, "one\n"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readFrame(br); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the stream is listed", func() bool { return p.Streams() == 1 })
	// A rule without Open leaves open streams alone.
	if f := p.Add(Rule{Exec: "MARK", Action: Stall}); f.Seen() != 0 {
		t.Fatal("a rule without Open matched an open stream")
	}
	// Nor does a rule whose action is not for a stream.
	if f := p.Add(Rule{Exec: "MARK", Action: Delay, D: time.Hour, Open: true}); f.Seen() != 0 {
		t.Fatal("a delay took an open stream")
	}
	p.Clear()
	stall := p.Add(Rule{Exec: "MARK", Action: Stall, Open: true})
	if stall.Hits() != 1 {
		t.Fatalf("the open stream was not stalled: hits %d", stall.Hits())
	}
	if _, err := io.WriteString(conn, "two\n"); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		_, s, _ := readFrame(br)
		got <- s
	}()
	select {
	case s := <-got:
		t.Fatalf("%q through a stall", s)
	case <-time.After(200 * time.Millisecond):
	}
	stall.Remove()
	if s := <-got; s != "two\n" {
		t.Fatalf("after the stall: %q", s)
	}
	reset := p.Add(Rule{Exec: "MARK", Action: Reset, Open: true})
	if reset.Hits() != 1 {
		t.Fatal("the open stream was not reset")
	}
	if _, err := io.ReadAll(br); err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("after the reset: %v", err)
	}
	testutil.Eventually(t, "the session ended", func() bool { return p.Conns() == 0 })
}

func TestStallThenClientCloses(t *testing.T) {
	u := newUpstream(t)
	p := newProxy(t, u)
	p.Add(Rule{Exec: "MARK", Action: Stall, N: 0})
	conn, _, _ := hijackConn(t, p, "MARK", true)
	if _, err := io.WriteString(conn, "one\n"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the stream is listed", func() bool { return p.Streams() == 1 })
	_ = conn.Close()
	testutil.Eventually(t, "a stalled session ends when its client closes", func() bool { return p.Conns() == 0 && p.Goroutines() == 1 })
}

func TestSkipTimesAndBody(t *testing.T) {
	u := newUpstream(t)
	p := newProxy(t, u)
	f := p.Add(Rule{Match: "POST /containers/", Body: `"wanted"`, Skip: 1, Times: 1, Action: Reset})
	c := httpClient(p)
	post := func(body string) error {
		resp, err := c.Post("http://docker/containers/x/exec", "application/json", strings.NewReader(body))
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
		return err
	}
	for i, tc := range []struct {
		body string
		fail bool
	}{{`{"Cmd":["other"]}`, false}, {`{"Cmd":["wanted"]}`, false}, {`{"Cmd":["wanted"]}`, true}, {`{"Cmd":["wanted"]}`, false}} {
		if err := post(tc.body); (err != nil) != tc.fail {
			t.Fatalf("request %d (%s): %v, want failure %v", i, tc.body, err, tc.fail)
		}
	}
	if f.Seen() != 3 || f.Hits() != 1 {
		t.Fatalf("seen %d hits %d", f.Seen(), f.Hits())
	}
}

func TestRulesChangeUnderLoad(t *testing.T) {
	u := newUpstream(t)
	p := newProxy(t, u)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := httpClient(p)
			defer c.CloseIdleConnections()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = get(c, "/ping")
			}
		}()
	}
	for i := range 200 {
		f := p.Add(Rule{Match: "/ping", Action: Action(i % 4), N: 3, D: time.Millisecond})
		if i%3 == 0 {
			p.Clear()
		} else {
			f.Remove()
		}
	}
	close(stop)
	wg.Wait()
	p.Clear()
	if got, err := get(httpClient(p), "/ping"); err != nil || got != "OK" {
		t.Fatalf("after the churn: %q %v", got, err)
	}
}

func TestMatchParsing(t *testing.T) {
	for _, tc := range []struct {
		match, method, uri string
		want               bool
	}{
		{"POST /containers/create", "POST", "/v1.41/containers/create?name=x", true},
		{"POST /containers/create", "GET", "/v1.41/containers/create", false},
		{"/exec/", "GET", "/v1.41/exec/abc/json", true},
		{"/exec/", "POST", "/v1.41/containers/abc/exec", false},
		{"", "DELETE", "/anything", true},
		{"GET", "GET", "/GET", true}, // one word: a substring
	} {
		if got := (Rule{Match: tc.match}).matches(reqInfo{method: tc.method, uri: tc.uri}); got != tc.want {
			t.Errorf("%q on %s %s: %v", tc.match, tc.method, tc.uri, got)
		}
	}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
