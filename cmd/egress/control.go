package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"sync"

	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/spec"
)

// ctlConn is the runtime's control connection: one at a time (a new one
// replaces the old, whose runtime is gone or gave up on it).
type ctlConn struct {
	c      net.Conn
	wmu    sync.Mutex
	closed chan struct{}
	once   sync.Once
	// resumed and cursor (guarded by proxy.mu): decisions go out only after
	// the runtime said from where.
	resumed bool
	cursor  uint64
}

func (cc *ctlConn) close() {
	cc.once.Do(func() {
		close(cc.closed)
		cc.c.Close()
	})
}

func (cc *ctlConn) send(m egress.Message) error {
	cc.wmu.Lock()
	defer cc.wmu.Unlock()
	return egress.WriteMessage(cc.c, m)
}

func (p *proxy) acceptControl(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		cc := &ctlConn{c: c, closed: make(chan struct{})}
		p.mu.Lock()
		old := p.ctl
		p.ctl = cc
		hello := egress.Hello{Version: egress.ProtocolVersion, RulesVersion: p.rules.Load().version, Next: p.next, Oldest: p.next}
		if len(p.ring) > 0 {
			hello.Oldest = p.ring[0].Seq
		}
		p.mu.Unlock()
		if old != nil {
			old.close()
		}
		if err := cc.send(egress.Message{Kind: egress.KindHello, Hello: hello}); err != nil {
			cc.close()
			continue
		}
		go p.readControl(cc)
		go p.writeDecisions(cc)
	}
}

// readControl takes the runtime's messages: new rules, where to resume.
func (p *proxy) readControl(cc *ctlConn) {
	defer cc.close()
	lr := egress.NewLineReader(cc.c)
	for {
		line, err := lr.ReadLine()
		if err != nil {
			return
		}
		m, err := egress.ParseMessage(line)
		if err != nil || m.Kind.FromProxy() {
			cc.send(egress.Message{Kind: egress.KindError, Error: fmt.Sprintf("bad control message: %v", err)})
			return
		}
		switch m.Kind {
		case egress.KindRules:
			rules := make([]spec.EgressRule, 0, len(m.Rules))
			var bad error
			for _, r := range m.Rules {
				rule, err := spec.ParseEgressRule(r)
				if err != nil {
					bad = err
					break
				}
				rules = append(rules, rule)
			}
			if bad != nil {
				cc.send(egress.Message{Kind: egress.KindError, Error: bad.Error()})
				continue
			}
			p.rules.Store(&ruleSet{rules: rules, version: m.RulesVersion})
			if err := cc.send(egress.Message{Kind: egress.KindApplied, Applied: m.RulesVersion}); err != nil {
				return
			}
		case egress.KindResume:
			p.mu.Lock()
			cc.resumed, cc.cursor = true, m.Resume
			close(p.notify)
			p.notify = make(chan struct{})
			p.mu.Unlock()
		}
	}
}

// writeDecisions sends the ring's decisions after the cursor, then each new
// one, until the connection ends. The ring is read under the lock; lines
// are written outside it.
func (p *proxy) writeDecisions(cc *ctlConn) {
	defer cc.close()
	for {
		p.mu.Lock()
		var batch []egress.Decision
		if cc.resumed {
			for _, d := range p.ring {
				if d.Seq > cc.cursor {
					batch = append(batch, d)
				}
			}
		}
		wake := p.notify
		p.mu.Unlock()
		for _, d := range batch {
			if err := cc.send(egress.Message{Kind: egress.KindDecision, Decision: d}); err != nil {
				return
			}
			p.mu.Lock()
			cc.cursor = d.Seq
			p.mu.Unlock()
		}
		if len(batch) > 0 {
			continue
		}
		select {
		case <-wake:
		case <-cc.closed:
			return
		}
	}
}

// bridge is `stockade-egress control SOCKET`: the runtime's exec copies its
// stdin to the control socket and the socket to its stdout.
func bridge(path string) int {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		fmt.Fprintf(os.Stderr, "stockade-egress control: %v\n", err)
		return 1
	}
	go func() {
		io.Copy(c, os.Stdin)
		c.CloseWrite()
	}()
	if _, err := io.Copy(os.Stdout, c); err != nil {
		fmt.Fprintf(os.Stderr, "stockade-egress control: %v\n", err)
		return 1
	}
	return 0
}
