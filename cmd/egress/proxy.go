package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/spec"
)

const (
	// maxHead bounds a request's line and headers.
	maxHead = 64 << 10
	// headTimeout bounds the wait for a request's head.
	headTimeout   = 30 * time.Second
	lookupTimeout = 5 * time.Second
	dialTimeout   = 10 * time.Second
	// defaultMaxConns caps the client connections served at once.
	defaultMaxConns = 1024
	// maxProcess clips the claimed process name; egress.MaxField bounds
	// every other recorded string.
	maxProcess = 256
)

// ruleSet is the rules in force and their version, with the host's own
// addresses (which only an explicit host rule admits); it is replaced
// whole.
type ruleSet struct {
	version uint64
	rules   []spec.EgressRule
	self    []netip.Addr
}

// proxy is the forward proxy: it serves client connections (serve), keeps
// its decisions in a ring, and takes its rules from a control client
// (serveControl).
type proxy struct {
	rules   atomic.Pointer[ruleSet]
	applyMu sync.Mutex // serializes rule changes with their cuts
	ring    *ring
	slots   chan struct{} // one token per connection being served
	logger  *log.Logger
	// resolve looks a name up; the default is net.DefaultResolver.
	resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	ctx     context.Context // ended by shutdown: ends lookups and dials
	cancel  context.CancelFunc

	mu      sync.Mutex
	conns   map[*conn]struct{} // every client connection being served
	ctl     *session           // the control client, if one is connected
	down    bool
	lastLog time.Time // rate-limits accept error lines

	wg sync.WaitGroup // connection handlers and control sessions
}

// conn is one client connection. The fields after client are set (under
// proxy.mu) once it relays, so that a rule change can re-check it.
//
// The errors of Close, CloseWrite and Set*Deadline on the proxy's
// connections and listeners are dropped (`_ =`) in this command: they fail
// only on a connection already closed, whose next read or write (or the
// relay's end) tells it, and the proxy has nobody to report them to but
// the decision already recorded.
type conn struct {
	client *net.TCPConn
	up     *net.TCPConn
	host   string
	port   uint16
	addr   netip.Addr
	cut    string // why a rule change cut it
}

func newProxy(maxConns int, version uint64, rules []spec.EgressRule, logw io.Writer) *proxy {
	ctx, cancel := context.WithCancel(context.Background())
	p := &proxy{
		ring:   newRing(egress.RingSize),
		slots:  make(chan struct{}, maxConns),
		logger: log.New(logw, "stockade-egress: ", 0),
		resolve: func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		},
		ctx:    ctx,
		cancel: cancel,
		conns:  make(map[*conn]struct{}),
	}
	p.rules.Store(&ruleSet{version: version, rules: rules})
	return p
}

// serve accepts client connections on l until l is closed.
func (p *proxy) serve(l net.Listener) {
	var backoff time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: wait a little
			// rather than spin, and say so at most once a second.
			p.logRate("accept: %v", err)
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		c, ok := nc.(*net.TCPConn)
		if !ok {
			_ = nc.Close()
			continue
		}
		select {
		case p.slots <- struct{}{}:
		default:
			p.refuse(c)
			continue
		}
		cc := &conn{client: c}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			_ = c.Close()
			<-p.slots
			return
		}
		p.conns[cc] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go func() {
			defer func() {
				p.mu.Lock()
				delete(p.conns, cc)
				p.mu.Unlock()
				<-p.slots
				p.wg.Done()
			}()
			p.handle(cc)
		}()
	}
}

// refuse answers a connection over the cap without reading it: the accept
// loop must not wait on a client.
func (p *proxy) refuse(c *net.TCPConn) {
	reason := fmt.Sprintf("over the limit of %d connections", cap(p.slots))
	p.record(egress.Decision{Time: time.Now(), Client: c.RemoteAddr().String(), Verdict: egress.VerdictDeny, Reason: reason})
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_ = writeAnswer(c, http.StatusServiceUnavailable, "denied", reason) // best effort: the refusal is recorded
	_ = c.Close()
}

// shutdown ends every connection and the control session and waits for
// their goroutines. The listeners are the caller's to close.
func (p *proxy) shutdown() {
	p.cancel()
	p.mu.Lock()
	p.down = true
	for cc := range p.conns {
		_ = cc.client.Close()
		if cc.up != nil {
			_ = cc.up.Close()
		}
	}
	s := p.ctl
	p.mu.Unlock()
	if s != nil {
		s.close()
	}
	p.wg.Wait()
}

// handle serves one client connection: one request, then the relay.
func (p *proxy) handle(cc *conn) {
	c := cc.client
	defer func() { _ = c.Close() }()
	start := time.Now()
	d := egress.Decision{Time: start, Client: c.RemoteAddr().String()}
	_ = c.SetReadDeadline(start.Add(headTimeout))
	head := &io.LimitedReader{R: c, N: maxHead}
	br := bufio.NewReader(head)
	req, err := http.ReadRequest(br)
	if err != nil {
		reason := "malformed request: " + err.Error()
		switch {
		case head.N == 0:
			reason = fmt.Sprintf("request head over %d bytes", maxHead)
		case errors.Is(err, io.EOF):
			return // closed without asking anything: nothing to record
		case isTimeout(err):
			reason = fmt.Sprintf("no request within %v", headTimeout)
		}
		p.deny(c, &d, http.StatusBadRequest, reason)
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	head.N = math.MaxInt64 // a plain request's body is read through br
	d.Method = req.Method
	d.Process = proxyUser(req.Header)
	if req.Method == http.MethodConnect {
		p.connect(cc, br, req, d)
	} else {
		p.forward(cc, br, req, d)
	}
}

// connect serves CONNECT host:port: decide, dial the chosen address, answer
// 200 and relay both ways.
func (p *proxy) connect(cc *conn, br *bufio.Reader, req *http.Request, d egress.Decision) {
	c := cc.client
	host, port, err := splitTarget(req.RequestURI, 0)
	if err != nil {
		d.Host = req.RequestURI
		p.deny(c, &d, http.StatusBadRequest, err.Error())
		return
	}
	d.Host, d.Port = host, port
	up := p.dial(cc, &d)
	if up == nil {
		return
	}
	defer func() { _ = up.Close() }()
	// Bytes the client sent behind its request (a TLS hello, a whole
	// request) sit in br: they go upstream before the client has its
	// answer, so the server works on them while the answer travels; then
	// the connections are spliced. If they cannot be written the client
	// still learns the tunnel was made, and sees it close.
	var earlyErr error
	if n := br.Buffered(); n > 0 {
		early, _ := br.Peek(n)
		var k int
		k, earlyErr = up.Write(early)
		d.Up = int64(k)
	}
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err == nil && earlyErr == nil {
		upN, downN := relay(c, up)
		d.Up += upN
		d.Down = downN
	}
	p.finish(cc, &d)
}

// forward serves a plain HTTP request with an absolute URI: decide, dial,
// send the request in origin form with Connection: close, and relay the
// response until the upstream closes.
func (p *proxy) forward(cc *conn, br *bufio.Reader, req *http.Request, d egress.Decision) {
	c := cc.client
	d.Host = req.URL.Host
	switch {
	case req.URL.Scheme == "https":
		p.deny(c, &d, http.StatusBadRequest, "https:// needs CONNECT")
		return
	case req.URL.Scheme != "http" || req.URL.Host == "":
		d.Host = ""
		p.deny(c, &d, http.StatusBadRequest, "not a proxy request: want CONNECT host:port or an absolute http:// URI")
		return
	}
	host, port, err := splitTarget(req.URL.Host, 80)
	if err != nil {
		p.deny(c, &d, http.StatusBadRequest, err.Error())
		return
	}
	d.Host, d.Port = host, port
	up := p.dial(cc, &d)
	if up == nil {
		return
	}
	defer func() { _ = up.Close() }()

	if strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
		// Answer it here: the upstream cannot see the request before its
		// body is read, and the client may wait for this before sending
		// the body.
		// A client gone shows in the relay below.
		_, _ = io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n")
		req.Header.Del("Expect")
	}
	removeHopHeaders(req.Header)
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = []string{""} // Request.Write adds Go's otherwise
	}
	req.RequestURI = ""
	req.Close = true // Connection: close; one request per connection
	w := &counter{w: up}
	// A write error (the upstream answered early and closed) still leaves
	// its answer to relay.
	_ = req.Write(w)
	d.Up = w.n
	d.Down, _ = io.Copy(c, up)
	p.finish(cc, &d)
}

// hopHeaders are the headers of one hop, never forwarded (RFC 9110 7.6.1,
// and the proxy's own).
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func removeHopHeaders(h http.Header) {
	for _, v := range h["Connection"] {
		for name := range strings.SplitSeq(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

// dial decides on d.Host:d.Port and connects to exactly the address
// chosen (never looking the name up again). On denial or failure it
// answers the client, records the decision and returns nil; otherwise the
// connection is tracked for rule changes.
func (p *proxy) dial(cc *conn, d *egress.Decision) *net.TCPConn {
	c := cc.client
	v, status, rs := p.decide(d.Host, d.Port)
	if v.Addr.IsValid() {
		d.Addr = v.Addr.String()
	}
	if !v.Allow {
		p.deny(c, d, status, v.Reason)
		return nil
	}
	d.Verdict, d.Rule = egress.VerdictAllow, v.Rule
	ctx, cancel := context.WithTimeout(p.ctx, dialTimeout)
	defer cancel()
	var dialer net.Dialer
	nc, err := dialer.DialContext(ctx, "tcp", netip.AddrPortFrom(v.Addr, d.Port).String())
	if err != nil {
		d.Reason = "dial: " + err.Error()
		d.Millis = time.Since(d.Time).Milliseconds()
		p.record(*d)
		answer(c, http.StatusBadGateway, "error", d.Reason)
		return nil
	}
	up := nc.(*net.TCPConn)
	p.track(cc, up, v.Addr, d, rs)
	return up
}

// decide applies the rules in force to host:port, looking a name up only
// when a rule could admit it. The status is the answer for a denial.
func (p *proxy) decide(host string, port uint16) (egress.Verdict, int, *ruleSet) {
	rs := p.rules.Load()
	var addrs []netip.Addr
	if _, err := netip.ParseAddr(host); err != nil {
		if !egress.NeedsLookup(rs.rules, host, port) {
			return egress.Verdict{Reason: "no rule admits " + net.JoinHostPort(host, strconv.Itoa(int(port)))}, http.StatusForbidden, rs
		}
		ctx, cancel := context.WithTimeout(p.ctx, lookupTimeout)
		defer cancel()
		addrs, err = p.resolve(ctx, host)
		if err != nil {
			return egress.Verdict{Reason: "resolve: " + err.Error()}, http.StatusBadGateway, rs
		}
		if len(addrs) == 0 {
			return egress.Verdict{Reason: "no address for " + host}, http.StatusBadGateway, rs
		}
		// The resolver may give IPv4 addresses in their IPv6-mapped form:
		// record and dial them as IPv4.
		for i, a := range addrs {
			addrs[i] = a.Unmap()
		}
	}
	return egress.DecideFor(rs.rules, rs.self, host, port, addrs), http.StatusForbidden, rs
}

// track registers a relaying connection so that a rule change re-checks
// it. rs is the rule set the decision used: if it was replaced meanwhile,
// the connection is checked against the new one here (setRules, which
// stores before it looks, may have missed it).
func (p *proxy) track(cc *conn, up *net.TCPConn, addr netip.Addr, d *egress.Decision, rs *ruleSet) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cc.up, cc.host, cc.port, cc.addr = up, d.Host, d.Port, addr
	if p.down {
		_ = cc.client.Close()
		_ = up.Close()
		return
	}
	if now := p.rules.Load(); now != rs {
		p.recheck(cc, now)
	}
}

// recheck cuts cc if rs no longer admits it (p.mu held).
func (p *proxy) recheck(cc *conn, rs *ruleSet) {
	if cc.up == nil || cc.cut != "" {
		return
	}
	if v := egress.DecideFor(rs.rules, rs.self, cc.host, cc.port, []netip.Addr{cc.addr}); !v.Allow {
		cc.cut = fmt.Sprintf("cut by rules version %d: %s", rs.version, v.Reason)
		_ = cc.client.Close()
		_ = cc.up.Close()
	}
}

// setRules puts rules in force and cuts the connections they no longer
// admit. Connections still admitted go on. Versions only move forward: an
// older set (two changes whose applies crossed on the way) is not put back
// in force; the version in force is returned either way. A nil self keeps
// the host addresses in force; the same version may come again with new
// ones (the host's addresses changed, the rules did not).
func (p *proxy) setRules(version uint64, rules []spec.EgressRule, self []netip.Addr) uint64 {
	p.applyMu.Lock()
	defer p.applyMu.Unlock()
	cur := p.rules.Load()
	if cur != nil && version < cur.version {
		return cur.version
	}
	if self == nil && cur != nil {
		self = cur.self
	}
	rs := &ruleSet{version: version, rules: rules, self: self}
	p.rules.Store(rs)
	p.mu.Lock()
	defer p.mu.Unlock()
	for cc := range p.conns {
		p.recheck(cc, rs)
	}
	return version
}

// finish records an allowed connection's decision when it ends.
func (p *proxy) finish(cc *conn, d *egress.Decision) {
	p.mu.Lock()
	if cc.cut != "" {
		d.Reason = cc.cut
	}
	p.mu.Unlock()
	d.Millis = time.Since(d.Time).Milliseconds()
	p.record(*d)
}

// deny records a denial and answers it.
func (p *proxy) deny(c *net.TCPConn, d *egress.Decision, status int, reason string) {
	d.Verdict, d.Reason = egress.VerdictDeny, reason
	p.record(*d)
	answer(c, status, "denied", reason)
}

// record clips what the client controls to the protocol's limits and
// keeps the decision.
func (p *proxy) record(d egress.Decision) {
	d.Process = clip(d.Process, maxProcess)
	d.Method = clip(d.Method, 64)
	d.Host = clip(d.Host, 300)
	d.Reason = clip(d.Reason, 1024)
	d.Rule = clip(d.Rule, egress.MaxField)
	p.ring.add(d)
}

// clip cuts s to at most n bytes of valid UTF-8 (JSON would otherwise
// replace bad bytes with longer runes).
func clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// answer writes a short plain-text answer and closes the client's side
// gently: the client may still be sending, and closing with unread input
// would reset the connection and could discard the answer.
func answer(c *net.TCPConn, status int, tag, reason string) {
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if writeAnswer(c, status, tag, reason) != nil {
		return
	}
	_ = c.CloseWrite()
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	_, _ = io.CopyN(io.Discard, c, maxHead) // a best-effort drain: the answer is written
}

func writeAnswer(c net.Conn, status int, tag, reason string) error {
	body := reason + "\n"
	_, err := fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nX-Stockade-Egress: %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), tag, len(body), body)
	return err
}

// relay copies both ways between client and up until both directions end,
// half-closing each when its source ends, and returns the bytes each way.
// Both are *net.TCPConn, unwrapped, so that io.Copy splices on Linux.
func relay(client, up *net.TCPConn) (upN, downN int64) {
	done := make(chan int64, 1)
	go func() {
		n, err := io.Copy(up, client)
		if err != nil {
			// A reset, or a cut: end the other direction too.
			_ = client.Close()
			_ = up.Close()
		} else {
			_ = up.CloseWrite()
		}
		done <- n
	}()
	downN, err := io.Copy(client, up)
	if err != nil {
		_ = client.Close()
		_ = up.Close()
	} else {
		_ = client.CloseWrite()
	}
	return <-done, downN
}

// splitTarget splits a request's host[:port] (CONNECT's authority, or an
// absolute URI's host) and normalizes the host. defPort 0 means a port is
// required.
func splitTarget(hostport string, defPort uint16) (string, uint16, error) {
	var host, portText string
	switch {
	case defPort != 0 && !strings.Contains(hostport, ":"):
		host, portText = hostport, strconv.Itoa(int(defPort))
	case defPort != 0 && strings.HasPrefix(hostport, "[") && strings.HasSuffix(hostport, "]"):
		host, portText = hostport[1:len(hostport)-1], strconv.Itoa(int(defPort))
	default:
		var err error
		if host, portText, err = net.SplitHostPort(hostport); err != nil {
			return "", 0, fmt.Errorf("target %q is not host:port", clip(hostport, 64))
		}
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil || port == 0 {
		return "", 0, fmt.Errorf("port %q is not 1..65535", clip(portText, 16))
	}
	host, err = egress.NormalizeHost(host)
	if err != nil {
		return "", 0, err
	}
	return host, uint16(port), nil
}

// proxyUser returns the user name of a Basic Proxy-Authorization, as
// claimed (nothing checks the password).
func proxyUser(h http.Header) string {
	scheme, cred, ok := strings.Cut(h.Get("Proxy-Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "basic") {
		return ""
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return ""
	}
	user, _, _ := strings.Cut(string(raw), ":")
	return user
}

// counter counts the bytes written through it.
type counter struct {
	w io.Writer
	n int64
}

func (c *counter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// logRate logs at most one line a second.
func (p *proxy) logRate(format string, args ...any) {
	p.mu.Lock()
	now := time.Now()
	if now.Sub(p.lastLog) < time.Second {
		p.mu.Unlock()
		return
	}
	p.lastLog = now
	p.mu.Unlock()
	p.logger.Printf(format, args...)
}
