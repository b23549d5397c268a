package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/spec"
)

// Bounds of one client connection.
const (
	maxConns    = 1024
	maxHead     = 64 << 10
	headTimeout = 30 * time.Second
	lookupLimit = 5 * time.Second
	dialLimit   = 10 * time.Second
)

// ruleSet is the rules in force and their version; swapped whole.
type ruleSet struct {
	rules   []spec.EgressRule
	version uint64
}

// proxy is the forward proxy and its decision ring.
type proxy struct {
	rules atomic.Pointer[ruleSet]
	sem   chan struct{}

	mu     sync.Mutex
	ring   []egress.Decision // oldest first, at most egress.RingSize
	next   uint64            // the next decision's seq
	notify chan struct{}     // closed (and replaced) at each new decision
	ctl    *ctlConn          // the control client, if any
}

func newProxy(rules []spec.EgressRule, version uint64) *proxy {
	p := &proxy{sem: make(chan struct{}, maxConns), next: 1, notify: make(chan struct{})}
	p.rules.Store(&ruleSet{rules: rules, version: version})
	return p
}

// serve listens for clients on listen and for the runtime on the control
// socket, until a listener fails.
func (p *proxy) serve(listen, control string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	cl, err := listenControl(control)
	if err != nil {
		ln.Close()
		return err
	}
	fmt.Fprintf(os.Stderr, "stockade-egress: serving on %s, control %s, rules version %d\n", listen, control, p.rules.Load().version)
	errc := make(chan error, 2)
	go func() { errc <- p.acceptControl(cl) }()
	go func() { errc <- p.acceptClients(ln) }()
	return <-errc
}

func (p *proxy) acceptClients(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		select {
		case p.sem <- struct{}{}:
			go func() {
				defer func() { <-p.sem }()
				p.handle(c)
			}()
		default:
			go p.refuse(c, http.StatusServiceUnavailable, "too many connections")
		}
	}
}

// record numbers a decision and keeps it in the ring, the oldest dropped
// when full, and wakes the control writer.
func (p *proxy) record(d egress.Decision) {
	clipField := func(s string) string {
		if len(s) > egress.MaxField {
			return s[:egress.MaxField]
		}
		return s
	}
	d.Process, d.Reason, d.Host = clipField(d.Process), clipField(d.Reason), clipField(d.Host)
	p.mu.Lock()
	d.Seq = p.next
	p.next++
	if len(p.ring) == egress.RingSize {
		copy(p.ring, p.ring[1:])
		p.ring = p.ring[:len(p.ring)-1]
	}
	p.ring = append(p.ring, d)
	close(p.notify)
	p.notify = make(chan struct{})
	p.mu.Unlock()
}

// refuse answers a connection that is not served, and records it.
func (p *proxy) refuse(c net.Conn, status int, reason string) {
	defer c.Close()
	p.record(egress.Decision{Time: time.Now(), Client: c.RemoteAddr().String(), Verdict: egress.VerdictDeny, Reason: reason})
	writeStatus(c, status, reason)
}

func writeStatus(w io.Writer, status int, reason string) {
	body := reason + "\n"
	fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nX-Stockade-Egress: denied\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
}

// handle serves one client connection: one request.
func (p *proxy) handle(c net.Conn) {
	defer c.Close()
	start := time.Now()
	d := egress.Decision{Time: start, Client: c.RemoteAddr().String()}
	deny := func(status int, reason string) {
		d.Verdict, d.Reason = egress.VerdictDeny, reason
		p.record(d)
		writeStatus(c, status, reason)
	}
	c.SetReadDeadline(start.Add(headTimeout))
	head := &io.LimitedReader{R: c, N: maxHead}
	br := bufio.NewReaderSize(head, 16<<10)
	req, err := http.ReadRequest(br)
	if err != nil {
		deny(http.StatusBadRequest, "unreadable request: "+err.Error())
		return
	}
	c.SetReadDeadline(time.Time{})
	head.N = math.MaxInt64
	d.Method, d.Process = req.Method, proxyUser(req)
	var hostport string
	switch {
	case req.Method == http.MethodConnect:
		hostport = req.RequestURI
	case req.URL.IsAbs() && req.URL.Scheme == "http":
		hostport = req.URL.Host
		if req.URL.Port() == "" {
			hostport = net.JoinHostPort(req.URL.Hostname(), "80")
		}
	case req.URL.IsAbs():
		deny(http.StatusBadRequest, "scheme "+req.URL.Scheme+" needs CONNECT")
		return
	default:
		deny(http.StatusBadRequest, "not a proxy request (no absolute URI, no CONNECT)")
		return
	}
	h, portText, err := net.SplitHostPort(hostport)
	port, perr := strconv.ParseUint(portText, 10, 16)
	if err != nil || perr != nil || port == 0 {
		d.Host = hostport
		deny(http.StatusBadRequest, "target "+hostport+" is not host:port")
		return
	}
	d.Port = uint16(port)
	host, err := egress.NormalizeHost(h)
	if err != nil {
		d.Host = h
		deny(http.StatusBadRequest, err.Error())
		return
	}
	d.Host = host
	rs := p.rules.Load()
	var addrs []netip.Addr
	if _, lerr := netip.ParseAddr(host); lerr != nil && egress.NeedsLookup(rs.rules, host, d.Port) {
		ctx, cancel := context.WithTimeout(context.Background(), lookupLimit)
		addrs, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		cancel()
		if err != nil {
			deny(http.StatusBadGateway, "lookup of "+host+" failed: "+err.Error())
			return
		}
	}
	v := egress.Decide(rs.rules, host, d.Port, addrs)
	if v.Addr.IsValid() {
		d.Addr = v.Addr.String()
	}
	if !v.Allow {
		deny(http.StatusForbidden, v.Reason)
		return
	}
	d.Verdict, d.Rule = egress.VerdictAllow, v.Rule
	defer func() {
		d.Millis = time.Since(start).Milliseconds()
		p.record(d)
	}()
	up, err := net.DialTimeout("tcp", netip.AddrPortFrom(v.Addr, d.Port).String(), dialLimit)
	if err != nil {
		d.Reason = "dial failed: " + err.Error()
		writeStatus(c, http.StatusBadGateway, d.Reason)
		return
	}
	defer up.Close()
	if req.Method == http.MethodConnect {
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			d.Reason = err.Error()
			return
		}
		// Bytes the client sent after its CONNECT head are already read.
		if n := br.Buffered(); n > 0 {
			b, _ := br.Peek(n)
			w, err := up.Write(b)
			d.Up += int64(w)
			if err != nil {
				d.Reason = err.Error()
				return
			}
		}
		d.Up, d.Down = relay(c, up, d.Up)
		return
	}
	for _, k := range []string{"Proxy-Authorization", "Proxy-Connection", "Connection", "Keep-Alive", "Te", "Trailer", "Upgrade"} {
		req.Header.Del(k)
	}
	req.Close = true
	cw := &countWriter{w: up}
	if err := req.Write(cw); err != nil {
		d.Up, d.Reason = cw.n, "forwarding the request: "+err.Error()
		return
	}
	d.Up = cw.n
	if tc, ok := up.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	n, err := io.Copy(c, up)
	d.Down = n
	if err != nil {
		d.Reason = err.Error()
	}
}

// relay copies both ways until both ends are done, half-closing each
// direction as its source ends. Between two TCP connections io.Copy
// splices (no copy through user space).
func relay(client, up net.Conn, upSoFar int64) (int64, int64) {
	var upN, downN int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		upN, _ = io.Copy(up, client)
		if tc, ok := up.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	}()
	downN, _ = io.Copy(client, up)
	if tc, ok := client.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	wg.Wait()
	return upSoFar + upN, downN
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// proxyUser is the user name of a Basic Proxy-Authorization: the process
// id the runtime put in the process's proxy URL (a claim, not a proof).
func proxyUser(req *http.Request) string {
	auth := req.Header.Get("Proxy-Authorization")
	enc, ok := strings.CutPrefix(auth, "Basic ")
	if !ok {
		return ""
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	if err != nil {
		return ""
	}
	user, _, _ := strings.Cut(string(b), ":")
	return user
}

// listenControl makes the control socket: 0600 in a 0700 directory.
func listenControl(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}
