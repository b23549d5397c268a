package egress

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/spec"
)

// waitLimit only fails a hung test; no test asserts on time.
const waitLimit = 30 * time.Second

// fakeProxy is the proxy's end of a link, driven by the test.
type fakeProxy struct {
	t    testing.TB
	conn net.Conn
	lr   *LineReader
}

// newLink returns a fake proxy and the runtime's end of a link (net.Pipe:
// every write waits for its read, which makes back-pressure visible).
func newLink(t testing.TB) (*fakeProxy, net.Conn) {
	a, b := net.Pipe()
	t.Cleanup(func() {
		_ = a.Close()
		_ = b.Close()
	})
	return &fakeProxy{t: t, conn: a, lr: NewLineReader(a)}, b
}

func (p *fakeProxy) send(m Message) {
	p.t.Helper()
	if err := WriteMessage(p.conn, m); err != nil {
		p.t.Fatalf("proxy send %s: %v", m.Kind, err)
	}
}

func (p *fakeProxy) recv() Message {
	p.t.Helper()
	_ = p.conn.SetReadDeadline(time.Now().Add(waitLimit))
	l, err := p.lr.ReadLine()
	if err != nil {
		p.t.Fatalf("proxy recv: %v", err)
	}
	m, err := ParseMessage(l)
	if err != nil {
		p.t.Fatalf("proxy recv: %v", err)
	}
	return m
}

var testHello = Message{Kind: KindHello, Hello: Hello{Version: ProtocolVersion, RulesVersion: 1, Next: 6, Oldest: 1}}

func decision(seq uint64) Message {
	return Message{Kind: KindDecision, Decision: Decision{Seq: seq, Time: testTime, Method: "CONNECT",
		Host: "example.com", Port: 443, Verdict: VerdictDeny, Reason: "no rule admits example.com:443"}}
}

// open returns a Control on a fresh link whose proxy said testHello.
func open(t testing.TB) (*fakeProxy, *Control) {
	t.Helper()
	p, conn := newLink(t)
	go p.send(testHello)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	c, err := Open(ctx, conn, conn, conn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return p, c
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	return ctx
}

func TestControl(t *testing.T) {
	p, c := open(t)
	ctx := ctxT(t)
	if h := c.Hello(); h != testHello.Hello {
		t.Fatalf("Hello = %+v", h)
	}

	// Resume, then decisions in order.
	go func() { _ = c.Resume(5) }() // the fake proxy checks what it was sent
	if m := p.recv(); m.Kind != KindResume || m.Resume != 5 {
		t.Fatalf("proxy got %+v, want resume 5", m)
	}
	if err := c.Resume(5); !errors.Is(err, ErrResumed) {
		t.Errorf("second Resume: %v", err)
	}
	go func() { p.send(decision(6)); p.send(decision(9)) }()
	for _, want := range []uint64{6, 9} {
		d, err := c.Next(ctx)
		if err != nil || d.Seq != want || d.Host != "example.com" {
			t.Fatalf("Next = %+v, %v; want seq %d", d, err, want)
		}
	}

	// Apply: the proxy's answer ends it.
	rs := rules(t, "example.com:443,10.0.0.0/8")
	errc := make(chan error, 1)
	go func() { errc <- c.Apply(ctx, 2, rs, nil) }()
	m := p.recv()
	if m.Kind != KindRules || m.RulesVersion != 2 || strings.Join(m.Rules, ",") != "example.com:443,10.0.0.0/8" {
		t.Fatalf("proxy got %+v", m)
	}
	p.send(Message{Kind: KindApplied, Applied: 2})
	if err := <-errc; err != nil {
		t.Fatalf("Apply: %v", err)
	}

	// A refusal is invalid_argument with the proxy's text; the link lives.
	go func() { errc <- c.Apply(ctx, 3, nil, nil) }()
	if m := p.recv(); m.Kind != KindRules || len(m.Rules) != 0 {
		t.Fatalf("proxy got %+v", m)
	}
	p.send(Message{Kind: KindError, Error: "rule 0: nope"})
	err := <-errc
	var re *RemoteError
	if !spec.IsCode(err, spec.CodeInvalidArgument) || !errors.As(err, &re) || re.Msg != "rule 0: nope" {
		t.Fatalf("refused Apply: %v", err)
	}
	go p.send(decision(10))
	if d, err := c.Next(ctx); err != nil || d.Seq != 10 {
		t.Fatalf("Next after a refusal = %+v, %v", d, err)
	}
	if err := c.Err(); err != nil {
		t.Fatalf("Err on a live link: %v", err)
	}

	// Close: idempotent; everything after it is ErrClosed.
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := c.Next(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Next after Close: %v", err)
	}
	if err := c.Apply(ctx, 4, nil, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Apply after Close: %v", err)
	}
	if err := c.Err(); !errors.Is(err, ErrClosed) {
		t.Errorf("Err after Close: %v", err)
	}
	// The proxy sees the link end.
	if _, err := p.lr.ReadLine(); err == nil {
		t.Error("the link is still open after Close")
	}
}

func TestControlApplyOutOfStep(t *testing.T) {
	p, c := open(t)
	ctx := ctxT(t)
	// An Apply abandoned before its answer: the next Apply takes the next
	// answer, not the abandoned one's.
	short, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- c.Apply(short, 2, nil, nil) }()
	p.recv()
	cancel()
	if err := <-errc; !spec.IsCode(err, spec.CodeCancelled) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Apply: %v", err)
	}
	go func() { errc <- c.Apply(ctx, 3, nil, nil) }()
	p.recv()
	p.send(Message{Kind: KindError, Error: "version 2 refused"})
	p.send(Message{Kind: KindApplied, Applied: 3})
	if err := <-errc; err != nil {
		t.Fatalf("Apply took the abandoned Apply's answer: %v", err)
	}
	// An answer naming an older version than asked is an error.
	go func() { errc <- c.Apply(ctx, 5, nil, nil) }()
	p.recv()
	p.send(Message{Kind: KindApplied, Applied: 4})
	if err := <-errc; !spec.IsCode(err, spec.CodeEngine) {
		t.Fatalf("Apply answered with an older version: %v", err)
	}
	// A deadline is a timeout.
	dl, cancel2 := context.WithDeadline(ctx, time.Now())
	defer cancel2()
	if err := c.Apply(dl, 6, nil, nil); !spec.IsCode(err, spec.CodeTimeout) {
		t.Fatalf("Apply past its deadline: %v", err)
	}
	// Rules that do not encode are refused before anything is sent.
	if err := c.Apply(ctx, 7, []spec.EgressRule{{}}, nil); !spec.IsCode(err, spec.CodeInvalidArgument) {
		t.Fatalf("Apply with an empty rule: %v", err)
	}
}

func TestOpenErrors(t *testing.T) {
	cases := []struct {
		name   string
		input  string
		code   spec.Code
		target any // an error type the chain must hold, or a sentinel
	}{
		{"nothing", "", spec.CodeEngine, io.ErrUnexpectedEOF},
		{"torn hello", `{"hello":`, spec.CodeEngine, io.ErrUnexpectedEOF},
		{"not json", "hello\n", spec.CodeEngine, new(*ProtocolError)},
		{"decision first", lines(`{"decision":{"seq":1,"time":"2025-03-01T12:00:00Z","method":"","host":"","port":0,"verdict":"deny","up":0,"down":0}}`), spec.CodeEngine, new(*ProtocolError)},
		{"other version", lines(`{"hello":{"version":"2","rules_version":0,"next":1,"oldest":1}}`), spec.CodeUnsupported, new(*VersionError)},
		{"too long", strings.Repeat(" ", MaxLine+1), spec.CodeEngine, ErrLineTooLong},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cl := &closer{}
			_, err := Open(ctxT(t), strings.NewReader(tc.input), io.Discard, cl)
			if !spec.IsCode(err, tc.code) {
				t.Fatalf("Open: %v, want code %s", err, tc.code)
			}
			switch target := tc.target.(type) {
			case error:
				if !errors.Is(err, target) {
					t.Fatalf("Open: %v, want %v", err, target)
				}
			default:
				if !errors.As(err, target) {
					t.Fatalf("Open: %v, want a %T", err, target)
				}
			}
			if cl.n != 1 {
				t.Errorf("closer closed %d times", cl.n)
			}
		})
	}
	t.Run("silent proxy", func(t *testing.T) {
		_, conn := newLink(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		if _, err := Open(ctx, conn, conn, conn); !spec.IsCode(err, spec.CodeTimeout) {
			t.Fatalf("Open: %v", err)
		}
		if _, err := conn.Read(make([]byte, 1)); err == nil {
			t.Fatal("the link is still open")
		}
	})
}

type closer struct{ n int }

func (c *closer) Close() error { c.n++; return nil }

const validDecision = `{"decision":{"seq":7,"time":"2025-03-01T12:00:00Z","method":"GET","host":"h","port":80,"verdict":"deny","up":0,"down":0}}`

// TestControlEnds: what the proxy sends after hello (and the runtime's
// resume after seq 6 and one pending Apply) and how the link ends: the
// decisions before the end are delivered, then the error.
func TestControlEnds(t *testing.T) {
	cases := []struct {
		name      string
		resume    bool
		input     string
		decisions int
		eof       bool   // a clean end: Next returns io.EOF
		want      string // else a substring of the error
		protocol  bool   // a *ProtocolError
	}{
		{name: "clean end", resume: true, input: lines(validDecision), decisions: 1, eof: true},
		{name: "torn line", resume: true, input: validDecision, want: "unexpected EOF"},
		{name: "decision before resume", input: lines(validDecision), want: "a decision before resume", protocol: true},
		{name: "decision out of order", resume: true, input: lines(validDecision, validDecision), decisions: 1, want: "decision 7 after 7", protocol: true},
		{name: "decision at the resume point", resume: true, input: lines(strings.Replace(validDecision, `"seq":7`, `"seq":6`, 1)), want: "decision 6 after 6", protocol: true},
		{name: "second hello", resume: true, input: lines(`{"hello":{"version":"1","rules_version":0,"next":1,"oldest":1}}`), want: "a hello message from the proxy", protocol: true},
		{name: "runtime's kind", resume: true, input: lines(`{"resume":1}`), want: "a resume message from the proxy", protocol: true},
		{name: "unsolicited applied", resume: true, input: lines(`{"applied":1}`, `{"applied":1}`), want: "applied 1 with no rules pending", protocol: true},
		{name: "last word", resume: true, input: lines(`{"applied":1}`, `{"error":"shutting down"}`), want: "egress: proxy: shutting down"},
		{name: "garbage", resume: true, input: lines(validDecision, "]"), decisions: 1, want: "line 3: not a JSON object", protocol: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, c := open(t)
			ctx := ctxT(t)
			if tc.resume {
				go func() { _ = c.Resume(6) }() // the fake proxy checks what it was sent
				p.recv()
			}
			applied := make(chan error, 1)
			go func() { applied <- c.Apply(ctx, 1, nil, nil) }()
			p.recv()
			go func() {
				_, _ = io.WriteString(p.conn, tc.input)
				_ = p.conn.Close()
			}()
			for i := 0; i < tc.decisions; i++ {
				if _, err := c.Next(ctx); err != nil {
					t.Fatalf("decision %d: %v", i, err)
				}
			}
			_, err := c.Next(ctx)
			if tc.eof {
				if !errors.Is(err, io.EOF) {
					t.Fatalf("Next at the end: %v, want io.EOF", err)
				}
			} else if err == nil || !strings.Contains(err.Error(), tc.want) || IsProtocol(err) != tc.protocol || !spec.IsCode(err, spec.CodeEngine) {
				t.Fatalf("Next at the end: %v; want an engine error containing %q (protocol %v)", err, tc.want, tc.protocol)
			}
			if c.Err() == nil {
				t.Error("Err is nil after the link ended")
			}
			// The pending Apply ends too (unless it was answered).
			aerr := <-applied
			if strings.Contains(tc.input, `{"applied":1}`) {
				if aerr != nil {
					t.Errorf("answered Apply: %v", aerr)
				}
			} else if aerr == nil || !spec.IsCode(aerr, spec.CodeEngine) {
				t.Errorf("pending Apply at the link's end: %v", aerr)
			}
			if _, err := c.Next(ctx); err == nil {
				t.Error("Next after the end succeeded")
			}
			if err := c.Apply(ctx, 2, nil, nil); err == nil {
				t.Error("Apply after the end succeeded")
			}
		})
	}
}

// TestControlBackpressure: a consumer that does not call Next stops the
// reader after queueLen (+1 in hand) decisions instead of buffering more.
func TestControlBackpressure(t *testing.T) {
	p, c := open(t)
	ctx := ctxT(t)
	go func() { _ = c.Resume(0) }() // the fake proxy checks what it was sent
	p.recv()
	seq := uint64(0)
	for range queueLen + 1 {
		seq++
		p.send(decision(seq))
	}
	// Nothing reads the link now: the next write cannot complete.
	_ = p.conn.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	if err := WriteMessage(p.conn, decision(seq+1)); !isTimeout(err) {
		t.Fatalf("write with a full queue: %v, want a timeout", err)
	}
	_ = p.conn.SetWriteDeadline(time.Time{})
	for i := uint64(1); i <= seq; i++ {
		d, err := c.Next(ctx)
		if err != nil || d.Seq != i {
			t.Fatalf("Next = %d, %v; want %d", d.Seq, err, i)
		}
	}
	go p.send(decision(seq + 1))
	if d, err := c.Next(ctx); err != nil || d.Seq != seq+1 {
		t.Fatalf("Next after draining = %d, %v", d.Seq, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestControlCloseUnblocks(t *testing.T) {
	p, c := open(t)
	ctx := ctxT(t)
	go func() { _ = c.Resume(0) }() // the fake proxy checks what it was sent
	p.recv()
	nextErr := make(chan error, 1)
	applyErr := make(chan error, 1)
	go func() { _, err := c.Next(ctx); nextErr <- err }()
	go func() { applyErr <- c.Apply(ctx, 1, nil, nil) }()
	p.recv()
	_ = c.Close()
	if err := <-nextErr; !errors.Is(err, ErrClosed) {
		t.Errorf("Next blocked across Close: %v", err)
	}
	if err := <-applyErr; !errors.Is(err, ErrClosed) {
		t.Errorf("Apply blocked across Close: %v", err)
	}
}
