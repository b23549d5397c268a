// Package faultproxy is a fault-injecting reverse proxy for the Docker Engine
// API, for tests of how a client behaves when the daemon misbehaves. It
// listens on a unix socket in a temporary directory (point a client at it
// with client.WithHost(p.Host()) or DOCKER_HOST) and forwards HTTP/1.1
// requests, one upstream connection per client connection, to the real
// daemon's socket. Hijacked streams (an exec or attach start, which Docker
// answers with 101 UPGRADED, or 200 with Connection: Upgrade, followed by
// raw bytes both ways) are relayed byte for byte, half-closes included. It
// uses the standard library only.
//
// # Faults
//
// A Rule matches requests on method and a substring of the request URI
// (Match: "POST /containers/create", "/exec/", "GET /events"), and
// optionally on a substring of the request body (Body) or, for an
// /exec/{id}/... request, of the body that created that exec (Exec: the
// proxy remembers every exec created through it, so a rule can pick one
// process's exec out of the helper execs around it). Its Action says what
// happens to a matching request:
//
//   - Reset closes the client's connection before the request is
//     forwarded: the daemon never sees it.
//   - ResetAfter forwards it and closes the client's connection after N
//     bytes of the response, its head included (N inside the head cuts
//     the status line or a header).
//   - Delay forwards it and holds the response for D before relaying it
//     (a client that gives up meanwhile ends the exchange).
//   - Truncate forwards it, relays the head and N bytes of the body (or of
//     a hijacked stream), then closes the connection.
//   - Stall forwards it and, after N bytes of the body or stream, relays
//     nothing more from the daemon while keeping both connections open;
//     the stall lasts until the client closes its side or the fault is
//     removed (then relaying resumes).
//   - CorruptStream and CorruptLength act on a hijacked stream in Docker's
//     multiplex format (8-byte headers: stream id, 3 zero bytes, a
//     big-endian payload length): the first frame header that starts at or
//     after byte N of the stream gets its stream id flipped to an invalid
//     value (id ^ 0x80) and the stream goes on, or gets a length Extra
//     bytes longer than its payload, which is relayed before the
//     connection closes (a torn frame).
//   - Pass forwards it untouched (a rule that only counts).
//
// Rules are checked in the order they were added; the first whose filters
// match, whose Skip is used up and whose Times is not, fires. Rules can be
// added and removed at any time from any goroutine; each counts the
// requests it matched (Seen) and the times it fired (Hits), and Fired is
// closed the first time it fires, so a test waits for a fault rather than
// sleeping. A rule with Open set also applies to the matching hijacked
// streams already open when it is added: N then counts from the moment it
// is added, and Reset closes them at once.
//
// The proxy counts its own goroutines (Goroutines), so a test that checks
// the client for leaked goroutines can subtract the proxy's.
package faultproxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultUpstream is the daemon socket the proxy forwards to by default.
const DefaultUpstream = "/var/run/docker.sock"

// Options configure New.
type Options struct {
	// Upstream is the daemon's unix socket; "" is DefaultUpstream.
	Upstream string
	// Dir is where the proxy's socket is made; "" makes a fresh temporary
	// directory, removed by Close.
	Dir string
	// Logf, if set, is told each fault that fires.
	Logf func(format string, args ...any)
}

// Proxy is a running fault-injecting proxy. Its methods are safe for
// concurrent use.
type Proxy struct {
	upstream string
	dir      string
	ownDir   bool
	socket   string
	ln       net.Listener
	logf     func(string, ...any)

	mu       sync.Mutex
	faults   []*Fault
	sessions map[*session]struct{}
	execs    map[string]string // exec id → the body that created it
	execFIFO []string
	closed   bool

	routines atomic.Int64
	wg       sync.WaitGroup
	requests atomic.Int64
}

// New starts a proxy listening on a unix socket (named docker.sock) in
// opts.Dir or a fresh temporary directory.
func New(opts Options) (*Proxy, error) {
	p := &Proxy{upstream: opts.Upstream, dir: opts.Dir, logf: opts.Logf, sessions: map[*session]struct{}{}, execs: map[string]string{}}
	if p.upstream == "" {
		p.upstream = DefaultUpstream
	}
	if p.logf == nil {
		p.logf = func(string, ...any) {}
	}
	if p.dir == "" {
		d, err := os.MkdirTemp("", "faultproxy-")
		if err != nil {
			return nil, err
		}
		p.dir, p.ownDir = d, true
	}
	p.socket = filepath.Join(p.dir, "docker.sock")
	ln, err := net.Listen("unix", p.socket)
	if err != nil {
		if p.ownDir {
			_ = os.RemoveAll(p.dir) // the Listen error is the one to report
		}
		return nil, err
	}
	p.ln = ln
	p.spawn(p.accept)
	return p, nil
}

// Socket is the path of the proxy's unix socket.
func (p *Proxy) Socket() string { return p.socket }

// Host is the proxy's address as DOCKER_HOST spells it (unix://...).
func (p *Proxy) Host() string { return "unix://" + p.socket }

// Requests counts the requests read from clients so far.
func (p *Proxy) Requests() int64 { return p.requests.Load() }

// Goroutines is the number of the proxy's own goroutines still running.
func (p *Proxy) Goroutines() int { return int(p.routines.Load()) }

// Conns is the number of client connections open.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.sessions)
}

// Streams is the number of hijacked streams being relayed.
func (p *Proxy) Streams() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for s := range p.sessions {
		if s.stream.Load() != nil {
			n++
		}
	}
	return n
}

// spawn runs f in a goroutine the proxy counts and Close waits for.
func (p *Proxy) spawn(f func()) {
	p.routines.Add(1)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer p.routines.Add(-1)
		f()
	}()
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	err := p.ln.Close()
	p.mu.Unlock()
	p.CloseConns()
	p.wg.Wait()
	if p.ownDir {
		_ = os.RemoveAll(p.dir) // a temp dir of ours: a leftover is the OS's to clear
	}
	return err
}

// CloseConns closes every open client connection (and its upstream
// connection), stalled streams included. The proxy goes on accepting.
func (p *Proxy) CloseConns() {
	p.mu.Lock()
	ss := make([]*session, 0, len(p.sessions))
	for s := range p.sessions {
		ss = append(ss, s)
	}
	p.mu.Unlock()
	for _, s := range ss {
		s.abort()
	}
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s := &session{p: p, c: c, cbr: bufio.NewReaderSize(c, 32<<10), done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close() // closing down: refused
			return
		}
		p.sessions[s] = struct{}{}
		p.mu.Unlock()
		p.spawn(func() {
			defer func() {
				s.abort()
				p.mu.Lock()
				delete(p.sessions, s)
				p.mu.Unlock()
			}()
			s.serve()
		})
	}
}

// maxExecs bounds the remembered exec create bodies.
const maxExecs = 4096

// maxBuffered is the largest request body read into memory before the
// request is forwarded (so Body and Exec can match it); larger bodies, and
// bodies of unknown length, stream through and match no Body filter.
const maxBuffered = 1 << 20

var (
	execCreatePath = regexp.MustCompile(`/containers/[^/]+/exec$`)
	execIDPath     = regexp.MustCompile(`/exec/([0-9a-fA-F]+)(/|$)`)
)

func (p *Proxy) rememberExec(id, body string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.execs[id]; !ok {
		p.execFIFO = append(p.execFIFO, id)
	}
	p.execs[id] = body
	for len(p.execFIFO) > maxExecs {
		delete(p.execs, p.execFIFO[0])
		p.execFIFO = p.execFIFO[1:]
	}
}

func (p *Proxy) execBody(uri string) string {
	m := execIDPath.FindStringSubmatch(uri)
	if m == nil {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.execs[m[1]]
}

// errCut ends a relay the fault cut.
var errCut = errors.New("faultproxy: cut by a fault")

// session is one client connection and its upstream connection.
type session struct {
	p    *Proxy
	c    net.Conn
	cbr  *bufio.Reader
	done chan struct{}
	once sync.Once

	mu sync.Mutex
	d  net.Conn

	stream atomic.Pointer[stream] // the hijacked stream, once there is one
}

// abort closes both connections (a reset, as far as a unix socket has one).
func (s *session) abort() {
	s.once.Do(func() {
		close(s.done)
		if tc, ok := s.c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset, not a FIN, where the socket allows it
		}
		// Ending the session is the point: their close errors carry
		// nothing to act on.
		_ = s.c.Close()
		s.mu.Lock()
		if s.d != nil {
			_ = s.d.Close()
		}
		s.mu.Unlock()
	})
}

func (s *session) dial() (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.d != nil {
		return s.d, nil
	}
	select {
	case <-s.done:
		return nil, net.ErrClosed
	default:
	}
	d, err := net.Dial("unix", s.p.upstream)
	if err != nil {
		return nil, err
	}
	s.d = d
	return d, nil
}

// reqInfo is what rules match a request on.
type reqInfo struct {
	method, uri string
	body        []byte // nil when not buffered
	exec        string // the create body of the exec the URI names
}

func (s *session) serve() {
	var dbr *bufio.Reader
	for {
		if _, err := s.cbr.Peek(1); err != nil {
			return
		}
		req, err := http.ReadRequest(s.cbr)
		if err != nil {
			return
		}
		s.p.requests.Add(1)
		info := reqInfo{method: req.Method, uri: req.URL.RequestURI()}
		if req.ContentLength > 0 && req.ContentLength <= maxBuffered {
			b, err := io.ReadAll(req.Body)
			_ = req.Body.Close() // read to its end above
			if err != nil {
				return
			}
			info.body = b
			req.Body = io.NopCloser(bytes.NewReader(b))
		}
		info.exec = s.p.execBody(info.uri)
		a := s.p.fire(info)
		if a.action() == Reset {
			return // serve's caller aborts the session
		}
		d, err := s.dial()
		if err != nil {
			return
		}
		if dbr == nil {
			dbr = bufio.NewReaderSize(d, 32<<10)
		}
		if err := req.Write(d); err != nil {
			return
		}
		watching := s.watch()
		resp, err := http.ReadResponse(dbr, req)
		if err != nil {
			return
		}
		if execCreatePath.MatchString(req.URL.Path) && req.Method == http.MethodPost && resp.StatusCode == http.StatusCreated {
			b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			_ = resp.Body.Close() // read above; a close error changes nothing
			if err != nil {
				return
			}
			var created struct{ Id string }
			if json.Unmarshal(b, &created) == nil && created.Id != "" {
				s.p.rememberExec(created.Id, string(info.body))
			}
			resp.Body = io.NopCloser(bytes.NewReader(b))
		}
		if a.action() == Delay && !s.sleep(a.f.rule.D) {
			return
		}
		if hijacked(req, resp) {
			if !watching() {
				return
			}
			s.hijack(info, a, resp, d, dbr)
			return
		}
		keep := s.respond(req, resp, a)
		if !watching() || !keep {
			return
		}
	}
}

// watch watches the client's connection while a response is out: a client
// that goes away ends the exchange (and the upstream connection) at once.
// The returned function stops watching; false means the client is gone.
func (s *session) watch() func() bool {
	res := make(chan error, 1)
	s.p.spawn(func() {
		_, err := s.cbr.Peek(1)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			s.abort()
		}
		res <- err
	})
	return func() bool {
		// On a closed connection these fail, and so does the read they
		// wake, which the result below reports.
		_ = s.c.SetReadDeadline(time.Now())
		err := <-res
		_ = s.c.SetReadDeadline(time.Time{})
		return err == nil || errors.Is(err, os.ErrDeadlineExceeded)
	}
}

// sleep waits d; false if the session ended first.
func (s *session) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.done:
		return false
	}
}

// hijacked reports whether the response switched the connection to a raw
// stream: a 101, or a 200 that says Connection: Upgrade, or a 200 of
// unbounded length (no Content-Length, not chunked) to an exec start or an
// attach, which Docker hijacks whether or not the client asked to upgrade.
func hijacked(req *http.Request, resp *http.Response) bool {
	switch {
	case resp.StatusCode == http.StatusSwitchingProtocols:
		return true
	case resp.StatusCode != http.StatusOK:
		return false
	case headerHas(resp.Header, "Connection", "upgrade"):
		return true
	}
	unbounded := resp.ContentLength < 0 && len(resp.TransferEncoding) == 0
	return unbounded && req.Method == http.MethodPost && hijackPath.MatchString(req.URL.Path)
}

var hijackPath = regexp.MustCompile(`/exec/[^/]+/start$|/containers/[^/]+/attach$`)

func headerHas(h http.Header, key, token string) bool {
	for _, v := range h.Values(key) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// respond relays an ordinary response with the fault armed for it; keep
// says the connection may serve another request.
func (s *session) respond(req *http.Request, resp *http.Response, a armed) bool {
	var w io.Writer = s.c
	var body io.Reader = resp.Body
	switch a.action() {
	case ResetAfter:
		w = &limitWriter{w: s.c, left: a.f.rule.N}
	case Truncate:
		body = &cutReader{r: body, left: a.f.rule.N}
	case Stall:
		body = &stallReader{r: body, left: a.f.rule.N, s: s, f: a.f}
	case Pass, Reset, Delay, CorruptStream, CorruptLength:
		// Relayed as it is: Reset and Delay acted before the response
		// (serve), the corruptions act on hijacked streams only.
	}
	bw := bufio.NewWriterSize(w, 32<<10)
	// Flushed before each read of the body: a streaming response (events,
	// logs) reaches the client as it comes.
	resp.Body = &flushReader{r: body, w: bw}
	// Write only: bufio.Writer's ReadFrom reads into its own buffer, which
	// the flush before each read would pull from under it.
	err := resp.Write(struct{ io.Writer }{bw})
	if err == nil {
		err = bw.Flush()
	} else {
		_ = bw.Flush() // what was buffered goes out; the Write error decides
	}
	if err != nil {
		return false
	}
	return !resp.Close && !req.Close
}

// limitWriter passes left bytes, then fails with errCut.
type limitWriter struct {
	w    io.Writer
	left int64
}

func (l *limitWriter) Write(b []byte) (int, error) {
	if l.left <= 0 {
		return 0, errCut
	}
	if int64(len(b)) > l.left {
		n, err := l.w.Write(b[:l.left])
		l.left -= int64(n)
		if err == nil {
			err = errCut
		}
		return n, err
	}
	n, err := l.w.Write(b)
	l.left -= int64(n)
	return n, err
}

// cutReader reads left bytes, then fails with errCut.
type cutReader struct {
	r    io.Reader
	left int64
}

func (c *cutReader) Read(b []byte) (int, error) {
	if c.left <= 0 {
		return 0, errCut
	}
	if int64(len(b)) > c.left {
		b = b[:c.left]
	}
	n, err := c.r.Read(b)
	c.left -= int64(n)
	return n, err
}

// stallReader reads left bytes, then blocks until the session ends or the
// fault is removed (then it reads on).
type stallReader struct {
	r    io.Reader
	left int64
	s    *session
	f    *Fault
}

func (st *stallReader) Read(b []byte) (int, error) {
	if st.left <= 0 && st.f != nil {
		select {
		case <-st.s.done:
			return 0, errCut
		case <-st.f.removed:
			st.f = nil
		}
	}
	if st.f != nil && int64(len(b)) > st.left {
		b = b[:st.left]
	}
	n, err := st.r.Read(b)
	st.left -= int64(n)
	return n, err
}

// flushReader flushes w before each read of r.
type flushReader struct {
	r io.Reader
	w *bufio.Writer
}

func (f *flushReader) Read(b []byte) (int, error) {
	if err := f.w.Flush(); err != nil {
		return 0, err
	}
	return f.r.Read(b)
}

func (f *flushReader) Close() error { return nil }

// fire finds the rule a request sets off, counts it and returns it armed
// (zero: none).
func (p *Proxy) fire(info reqInfo) armed {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.faults {
		if f.take(info) {
			p.logf("faultproxy: %s %s: %s", info.method, info.uri, f.rule.describe())
			return armed{f: f, at: f.rule.N}
		}
	}
	return armed{}
}

func (r Rule) describe() string {
	s := fmt.Sprintf("%v", r.Action)
	switch r.Action {
	case Delay:
		s += " " + r.D.String()
	case Pass, Reset:
	default:
		s += fmt.Sprintf(" N=%d", r.N)
	}
	if r.Match != "" {
		s += fmt.Sprintf(" on %q", r.Match)
	}
	return s
}
