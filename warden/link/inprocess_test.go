package link

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/warden"
	"github.com/stockade/stockade/warden/wire"
)

// inProcessWarden starts the warden library in-process with prog as every
// child and returns it with a link to it.
func inProcessWarden(t *testing.T, start func(c *warden.Child) (warden.Program, error)) (*warden.Server, *Link, wire.Hello) {
	t.Helper()
	srv := warden.NewInProcess(warden.InProcess{Start: start, PID: 7, Socket: "/tmp/.stockade-warden-7.sock"})
	t.Cleanup(srv.Stop)
	rt, wd := net.Pipe()
	go func() { _ = srv.Serve(wd) }()
	l, h, err := Open(context.Background(), rt, rt, rt, Handshake{Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return srv, l, h
}

// drain drains p's output, stream by stream.
func drain(t *testing.T, p *Proc) (stdout, stderr string) {
	t.Helper()
	var out, errOut strings.Builder
	for {
		stream, data, err := p.Next()
		if err == io.EOF { //nolint:errorlint // Next's end, never wrapped
			return out.String(), errOut.String()
		}
		if err != nil {
			t.Fatalf("output: %v", err)
		}
		if stream == 2 {
			errOut.Write(data)
		} else {
			out.Write(data)
		}
	}
}

// TestInProcessWarden: the warden library run in-process (the Fake
// engine's warden) speaks the protocol this package speaks: Hello with its
// pid and socket, a spawn's output and exit, a refused start as a failed
// spawn, a signal to a group, and a reattach with Resume after the first
// link is lost.
func TestInProcessWarden(t *testing.T) {
	release := make(chan struct{})
	start := func(c *warden.Child) (warden.Program, error) {
		switch c.Argv[0] {
		case "missing":
			return nil, &warden.StartError{Code: 127, Text: "missing: not found"}
		case "echo":
			return func(c *warden.Child) warden.Status {
				_, _ = io.WriteString(c.Stdout, strings.Join(c.Argv[1:], " "))
				_, _ = io.WriteString(c.Stderr, "to stderr")
				return warden.Status{Code: 3}
			}, nil
		case "wait":
			return func(c *warden.Child) warden.Status {
				_, _ = io.WriteString(c.Stdout, "waiting")
				select {
				case sig := <-c.Signals:
					return warden.Status{Signal: sig}
				case <-release:
					_, _ = io.WriteString(c.Stdout, " released")
					return warden.Status{}
				}
			}, nil
		}
		return nil, errors.New("no such program")
	}
	srv, l, h := inProcessWarden(t, start)
	if h.PID != 7 || h.Socket != "/tmp/.stockade-warden-7.sock" {
		t.Fatalf("hello %+v", h)
	}
	ctx := context.Background()

	p, err := l.Spawn(ctx, wire.Spawn{ID: "p1", Argv: []string{"echo", "a", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if out, errOut := drain(t, p); out != "a b" || errOut != "to stderr" {
		t.Fatalf("output %q %q", out, errOut)
	}
	<-p.Exited()
	if x, ok := p.Exit(); !ok || x.Code != 3 || x.Output != 12 {
		t.Fatalf("exit %+v %v", x, ok)
	}

	var se *SpawnError
	if _, err := l.Spawn(ctx, wire.Spawn{ID: "p2", Argv: []string{"missing"}}); !errors.As(err, &se) || se.Code != 127 {
		t.Fatalf("spawn of a missing program: %v", err)
	}

	p3, err := l.Spawn(ctx, wire.Spawn{ID: "p3", Argv: []string{"wait"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p3.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	drain(t, p3)
	<-p3.Exited()
	if x, _ := p3.Exit(); x.Signal != int(syscall.SIGTERM) {
		t.Fatalf("signalled exit %+v", x)
	}

	// The first link is lost with a child running; a reattach resumes
	// its output from the offset the runtime had, and its end.
	p4, err := l.Spawn(ctx, wire.Spawn{ID: "p4", Argv: []string{"wait"}})
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Close()
	rt, wd := net.Pipe()
	go srv.Reattach(wd)
	l2, h2, err := Open(ctx, rt, rt, rt, Handshake{Secret: testSecret, Reattach: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l2.Close() }()
	if h2.PID != 7 {
		t.Fatalf("reattach hello %+v", h2)
	}
	table, err := l2.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var e *wire.Entry
	for i := range table {
		if table[i].ID == "p4" {
			e = &table[i]
		}
	}
	if e == nil || !e.Running {
		t.Fatalf("table %+v has no running p4", table)
	}
	close(release)
	r4, err := l2.Resume(ctx, *e, 0)
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := drain(t, r4); out != "waiting released" {
		t.Fatalf("resumed output %q", out)
	}
	select {
	case <-r4.Exited():
	case <-time.After(time.Minute):
		t.Fatal("no exit after the resume")
	}
	_ = p4
}
