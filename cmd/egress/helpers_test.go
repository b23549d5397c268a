package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/spec"
)

// waitLimit only fails a hung test; no test asserts on time.
const waitLimit = 30 * time.Second

// harness is a proxy served in-process on 127.0.0.1, with its control
// socket.
type harness struct {
	t       testing.TB
	p       *proxy
	addr    string // the proxy's listen address
	ctlPath string
}

// startProxy serves a proxy with rules (as written) at version 1 and the
// given connection cap; it is shut down when the test ends.
func startProxy(t testing.TB, maxConns int, rules string) *harness {
	t.Helper()
	rs, err := spec.ParseEgressRules(rules)
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(maxConns, 1, rs, io.Discard)
	l, err := listenClients("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// A short path: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "egress")
	if err != nil {
		t.Fatal(err)
	}
	ctlPath := filepath.Join(dir, "ctl", "egress.sock")
	cl, err := listenControl(ctlPath)
	if err != nil {
		t.Fatal(err)
	}
	go p.serve(l)
	go p.serveControl(cl)
	t.Cleanup(func() {
		_ = l.Close()
		_ = cl.Close()
		p.shutdown()
		_ = os.RemoveAll(dir)
	})
	return &harness{t: t, p: p, addr: l.Addr().String(), ctlPath: ctlPath}
}

// control opens a control link (the runtime's side) to the proxy.
func (h *harness) control() *egress.Control {
	h.t.Helper()
	conn, err := net.Dial("unix", h.ctlPath)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	c, err := egress.Open(ctx, conn, conn, conn)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = c.Close() })
	return c
}

// watch opens a control link resumed after seq 0 whose Next the test uses
// to wait for decisions.
func (h *harness) watch() *egress.Control {
	h.t.Helper()
	c := h.control()
	if err := c.Resume(0); err != nil {
		h.t.Fatal(err)
	}
	return c
}

func next(t testing.TB, c *egress.Control) egress.Decision {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	d, err := c.Next(ctx)
	if err != nil {
		t.Fatalf("waiting for a decision: %v", err)
	}
	return d
}

// apply puts rules in force through a control link.
func apply(t testing.TB, c *egress.Control, version uint64, rules string) {
	t.Helper()
	rs, err := spec.ParseEgressRules(rules)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := c.Apply(ctx, version, rs, nil); err != nil {
		t.Fatalf("apply %q: %v", rules, err)
	}
}

// dialProxy connects to the proxy; the connection is closed at the test's
// end.
func (h *harness) dial() net.Conn {
	h.t.Helper()
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		h.t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(waitLimit))
	h.t.Cleanup(func() { _ = c.Close() })
	return c
}

// connect sends CONNECT target (with extra header lines) and reads the
// answer. After a 200 the returned reader carries the tunnel.
func (h *harness) connect(target, extra string) (net.Conn, *bufio.Reader, *http.Response) {
	h.t.Helper()
	c := h.dial()
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", target, target, extra); err != nil {
		h.t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		h.t.Fatalf("CONNECT %s: %v", target, err)
	}
	return c, br, resp
}

func basicAuth(user, pass string) string {
	return "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass)) + "\r\n"
}

// echoServer accepts connections on 127.0.0.1 and echoes each back until
// its client half-closes, then half-closes too. It returns its port.
func echoServer(t testing.TB) uint16 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				_, _ = io.Copy(c, c)
				_ = c.(*net.TCPConn).CloseWrite()
			}()
		}
	}()
	return port(t, l.Addr())
}

// closedPort returns a port on 127.0.0.1 nothing listens on.
func closedPort(t testing.TB) uint16 {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return port(t, l.Addr())
}

func port(t testing.TB, a net.Addr) uint16 {
	_, p, err := net.SplitHostPort(a.String())
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return uint16(n)
}

func hostPort(port uint16) string { return "127.0.0.1:" + strconv.Itoa(int(port)) }
