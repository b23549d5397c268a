package egress

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// gatedLink plays the proxy for FuzzControl: it serves the fuzz input as
// the proxy's output, the first line at once and the rest only after the
// runtime has written two lines (its resume and its rules), so that every
// run sees the same order of events. Close ends it like a closed socket.
type gatedLink struct {
	mu      sync.Mutex
	data    []byte
	first   int // bytes served before the gate opens
	lines   int // newlines the runtime wrote
	gate    chan struct{}
	gated   sync.Once
	closed  chan struct{}
	closing sync.Once
}

func newGatedLink(data []byte) *gatedLink {
	first := bytes.IndexByte(data, '\n') + 1
	if first == 0 {
		first = len(data)
	}
	return &gatedLink{data: data, first: first, gate: make(chan struct{}), closed: make(chan struct{})}
}

func (g *gatedLink) Read(p []byte) (int, error) {
	g.mu.Lock()
	if g.first == 0 && len(g.data) > 0 {
		g.mu.Unlock()
		select {
		case <-g.gate:
		case <-g.closed:
		}
		g.mu.Lock()
		g.first = -1
	}
	defer g.mu.Unlock()
	select {
	case <-g.closed:
		return 0, io.ErrClosedPipe
	default:
	}
	if len(g.data) == 0 {
		return 0, io.EOF
	}
	n := len(p)
	if g.first > 0 {
		n = min(n, g.first)
	}
	n = copy(p, g.data[:min(n, len(g.data))])
	g.data = g.data[n:]
	if g.first > 0 {
		g.first -= n
	}
	return n, nil
}

func (g *gatedLink) Write(p []byte) (int, error) {
	select {
	case <-g.closed:
		return 0, io.ErrClosedPipe
	default:
	}
	g.mu.Lock()
	g.lines += bytes.Count(p, []byte("\n"))
	open := g.lines >= 2
	g.mu.Unlock()
	if open {
		g.gated.Do(func() { close(g.gate) })
	}
	return len(p), nil
}

func (g *gatedLink) Close() error {
	g.closing.Do(func() { close(g.closed) })
	return nil
}

// FuzzControl: arbitrary bytes as everything the proxy says, against a
// runtime that resumes after seq 2, applies rules and reads decisions. No
// input makes the Control panic or hang, decisions come out in strictly
// increasing seq order after the resume point, and each is well formed.
func FuzzControl(f *testing.F) {
	hello := `{"hello":{"version":"1","rules_version":0,"next":3,"oldest":1}}`
	dec := func(seq string) string {
		return `{"decision":{"seq":` + seq + `,"time":"2025-03-01T12:00:00Z","process":"p","client":"10.0.0.2:5000","method":"CONNECT","host":"example.com","port":443,"addr":"93.184.216.34","verdict":"allow","rule":"example.com:443","up":1,"down":2,"ms":3}}`
	}
	for _, s := range []string{
		"",
		hello,
		lines(hello),
		lines(hello, dec("3"), `{"applied":1}`, dec("4")),
		lines(hello, `{"error":"rule 0: bad"}`, dec("3")),
		lines(hello, dec("2")),
		lines(hello, dec("4"), dec("3")),
		lines(hello, `{"applied":1}`, `{"applied":2}`),
		lines(hello, `{"applied":1}`, `{"error":"bye"}`),
		lines(hello, `{"applied":0}`),
		lines(hello, hello),
		lines(hello, `{"resume":1}`),
		lines(hello, `{"rules":[],"rules_version":1}`),
		lines(hello, `{"applied":1,"error":"x"}`),
		lines(hello, `{}`, dec("3")),
		lines(hello, "\x00\xff"),
		lines(hello) + dec("3"),
		lines(`{"hello":{"version":"2","rules_version":0,"next":1,"oldest":1}}`),
		lines(`{"hello":{"version":"1","rules_version":0,"next":1,"oldest":2}}`),
		lines(`{"applied":1}`),
		lines(hello, strings.Repeat("x", 70000)),
	} {
		f.Add([]byte(s))
	}
	rs := rules(f, "example.com:443,10.0.0.0/8")
	f.Fuzz(func(t *testing.T, data []byte) {
		link := newGatedLink(data)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := Open(ctx, link, link, link)
		if ctx.Err() != nil {
			t.Fatal("Open hung")
		}
		if err != nil {
			return
		}
		defer func() { _ = c.Close() }()
		// Fuzzed answers may end the link here; what follows must still
		// not hang.
		_ = c.Resume(2)
		applied := make(chan error, 1)
		go func() { applied <- c.Apply(ctx, 1, rs, nil) }()
		last := uint64(2)
		for {
			d, err := c.Next(ctx)
			if ctx.Err() != nil {
				t.Fatal("Next hung")
			}
			if err != nil {
				if c.Err() == nil {
					t.Fatalf("Next failed with %v on a live link", err)
				}
				break
			}
			if d.Seq <= last {
				t.Fatalf("decision %d after %d", d.Seq, last)
			}
			last = d.Seq
			b, err := Message{Kind: KindDecision, Decision: d}.AppendLine(nil)
			if err != nil {
				t.Fatalf("a delivered decision does not encode: %v", err)
			}
			if len(b) > MaxLine {
				t.Fatalf("decision of %d bytes", len(b))
			}
		}
		<-applied //nolint:errcheck // fuzzed answers may fail Apply: that it returns at all is what counts
		if ctx.Err() != nil {
			t.Fatal("Apply hung")
		}
	})
}
