package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/spec"
)

// listenControl listens on the control socket at path, readable and
// writable by this user only. Its directory is created 0700 if missing; a
// socket left by an earlier run is replaced.
func listenControl(path string) (*net.UnixListener, error) {
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		_ = os.Remove(path) // a stale socket; if it stays, Listen below fails and says so
	}
	// The umask makes the socket 0600 from its first instant; the chmod
	// covers a filesystem that ignores it. Nothing else creates files at
	// this point, so changing the process's umask is safe.
	old := syscall.Umask(0o177)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	syscall.Umask(old)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = l.Close()
		return nil, err
	}
	return l, nil
}

// streamPace is the least time between two writes of decisions to the
// control client (see writeSession).
const streamPace = 20 * time.Millisecond

// session is one control client's link. A new client replaces the old one,
// whose session is closed.
type session struct {
	conn net.Conn
	done chan struct{}
	once sync.Once
}

func (s *session) close() {
	s.once.Do(func() {
		close(s.done)
		_ = s.conn.Close()
	})
}

// outMsg is a message for the session's writer; last ends the session once
// it is written (msg may then be nil).
type outMsg struct {
	msg  *egress.Message
	last bool
}

// serveControl accepts control clients on l until l is closed, one at a
// time.
func (p *proxy) serveControl(l net.Listener) {
	var backoff time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			p.logRate("control accept: %v", err)
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		s := &session{conn: c, done: make(chan struct{})}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			_ = c.Close()
			return
		}
		old := p.ctl
		p.ctl = s
		p.wg.Add(2)
		p.mu.Unlock()
		if old != nil {
			old.close()
		}
		// Answers wait here while the writer is busy; the reader stops
		// reading when they back up, so nothing grows.
		out := make(chan outMsg, 1)
		resume := make(chan uint64, 1)
		go p.writeSession(s, out, resume)
		go p.readSession(s, out, resume)
	}
}

// writeSession is a session's only writer: the hello, then answers, and
// after a resume the ring's decisions. It never holds up the connections
// being served: when it falls behind, the ring drops the oldest decisions
// and it goes on from the oldest kept.
func (p *proxy) writeSession(s *session, out <-chan outMsg, resume <-chan uint64) {
	defer p.wg.Done()
	defer s.close()
	bw := bufio.NewWriterSize(s.conn, 64<<10)
	var line []byte
	write := func(m egress.Message) bool {
		var err error
		if line, err = m.AppendLine(line[:0]); err != nil {
			// Only a bug makes an invalid message: drop it, keep the link.
			p.logRate("control: %v", err)
			return true
		}
		_, err = bw.Write(line)
		return err == nil
	}
	oldest, next := p.ring.bounds()
	hello := egress.Hello{Version: egress.ProtocolVersion, RulesVersion: p.rules.Load().version, Next: next, Oldest: oldest}
	if !write(egress.Message{Kind: egress.KindHello, Hello: hello}) || bw.Flush() != nil {
		return
	}
	var cursor uint64
	streaming := false
	batch := make([]egress.Decision, 0, 256)
	// Decisions are paced: after a write of decisions the next waits
	// streamPace, so a burst of short connections costs the link (an exec
	// stream through the daemon to the runtime: several processes woken per
	// write, on the CPUs the connections need) one write, not one each. The
	// first decision after a quiet spell goes at once; answers are never
	// held.
	var sent time.Time // the last flush that carried decisions
	wrote := false     // decisions written since the last flush
	pace := time.NewTimer(time.Hour)
	pace.Stop()
	defer pace.Stop()
	// take handles a message from the reader; false ends the session.
	take := func(o outMsg) bool {
		if o.msg != nil && !write(*o.msg) {
			return false
		}
		if o.last {
			_ = bw.Flush() // the session ends either way: a client gone is nothing to report
			return false
		}
		return true
	}
	for {
		var wake <-chan struct{}
		var paced <-chan time.Time
		if streaming {
			if wait := streamPace - time.Since(sent); wait > 0 {
				pace.Reset(wait)
				paced = pace.C
			} else {
				batch, wake = p.ring.after(cursor, batch[:0], cap(batch))
				for _, d := range batch {
					if !write(egress.Message{Kind: egress.KindDecision, Decision: d}) {
						return
					}
				}
			}
		}
		if len(batch) > 0 {
			wrote = true
			cursor = batch[len(batch)-1].Seq
			batch = batch[:0]
			// More may be waiting: look at the reader's messages
			// without blocking, then go on.
			select {
			case o := <-out:
				if !take(o) {
					return
				}
			case cursor = <-resume:
			case <-s.done:
				return
			default:
			}
			continue
		}
		if bw.Flush() != nil {
			return
		}
		if wrote {
			sent, wrote = time.Now(), false
		}
		select {
		case o := <-out:
			if !take(o) {
				return
			}
		case cursor = <-resume:
			streaming = true
		case <-wake:
		case <-paced:
		case <-s.done:
			return
		}
		pace.Stop()
	}
}

// readSession reads the runtime's messages: rules are applied and
// answered (through the writer, in order), resume moves the writer's
// cursor. The runtime's end of the link ends the session; a protocol
// violation ends it with an error as the last word.
func (p *proxy) readSession(s *session, out chan<- outMsg, resume chan uint64) {
	defer p.wg.Done()
	send := func(o outMsg) bool {
		select {
		case out <- o:
			return true
		case <-s.done:
			return false
		}
	}
	lr := egress.NewLineReader(s.conn)
	for {
		line, err := lr.ReadLine()
		if err != nil {
			if egress.IsProtocol(err) || errors.Is(err, io.ErrUnexpectedEOF) {
				p.logRate("control: %v", err)
				send(lastWord(err))
				return
			}
			send(outMsg{last: true}) // flush the answers, then close
			return
		}
		m, err := egress.ParseMessage(line)
		if err == nil && m.Kind.FromProxy() {
			err = &egress.ProtocolError{Msg: fmt.Sprintf("a %s message from the runtime", m.Kind)}
		}
		if err != nil {
			p.logRate("control: line %d: %v", lr.Line(), err)
			send(lastWord(err))
			return
		}
		switch m.Kind {
		case egress.KindRules:
			a := p.apply(m.RulesVersion, m.Rules, m.Self)
			if !send(outMsg{msg: &a}) {
				return
			}
		case egress.KindResume:
			// The latest resume wins: replace one not yet taken.
			select {
			case <-resume:
			default:
			}
			resume <- m.Resume
		case egress.KindHello, egress.KindDecision, egress.KindApplied, egress.KindError:
			// The proxy's own kinds: refused above (FromProxy).
		}
	}
}

func lastWord(err error) outMsg {
	m := egress.Message{Kind: egress.KindError, Error: clip("protocol: "+err.Error(), egress.MaxField)}
	return outMsg{msg: &m, last: true}
}

// apply parses and puts in force one rules message, and returns its answer.
// A bad rule leaves the old rules in force.
func (p *proxy) apply(version uint64, texts []string, self []netip.Addr) egress.Message {
	rules := make([]spec.EgressRule, 0, len(texts))
	for i, t := range texts {
		r, err := spec.ParseEgressRule(t)
		if err != nil {
			return egress.Message{Kind: egress.KindError, Error: clip(fmt.Sprintf("rule %d: %v", i, err), egress.MaxField)}
		}
		rules = append(rules, r)
	}
	return egress.Message{Kind: egress.KindApplied, Applied: p.setRules(version, rules, self)}
}
