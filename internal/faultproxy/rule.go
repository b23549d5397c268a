package faultproxy

import (
	"bytes"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Action is what a rule does to a request it matches.
type Action int

const (
	// Pass forwards the request untouched; the rule only counts.
	Pass Action = iota
	// Reset closes the client's connection before the request is
	// forwarded.
	Reset
	// ResetAfter closes the client's connection after N bytes of the
	// response, its head included.
	ResetAfter
	// Delay holds the response for D before relaying it.
	Delay
	// Truncate relays the head and N bytes of the body or stream, then
	// closes the connection.
	Truncate
	// Stall relays N bytes of the body or stream, then nothing more from
	// the daemon, keeping the connections open until the client closes or
	// the fault is removed.
	Stall
	// CorruptStream flips the stream id of the first multiplex frame
	// header at or after byte N of a hijacked stream to an invalid value
	// (id ^ 0x80); the stream goes on.
	CorruptStream
	// CorruptLength makes the first multiplex frame header at or after
	// byte N of a hijacked stream declare Extra more bytes than its
	// payload; the payload is relayed, then the connection closes.
	CorruptLength
)

var actionNames = [...]string{"pass", "reset", "reset-after", "delay", "truncate", "stall", "corrupt-stream", "corrupt-length"}

func (a Action) String() string {
	if a >= 0 && int(a) < len(actionNames) {
		return actionNames[a]
	}
	return "action(?)"
}

// Rule is a fault: which requests it matches, and what it does to them.
type Rule struct {
	// Match is "METHOD substring" or a substring alone, matched against
	// the request's method and URI (path and query): "POST
	// /containers/create", "/exec/". "" matches every request.
	Match string
	// Body, if set, must occur in the request body (bodies over 1 MiB or
	// of unknown length never match).
	Body string
	// Exec, if set, must occur in the body that created the exec an
	// /exec/{id}/... request names (its Cmd, Env, User...): one process's
	// exec among the helper execs around it. Only execs created through
	// this proxy are known.
	Exec string
	// Skip lets this many matching requests pass before the rule fires.
	Skip int
	// Times is how many times the rule fires; 0 is every time.
	Times int
	// Open also applies the rule to matching hijacked streams already
	// open when it is added (N counting from then; Reset closes them at
	// once). Only Reset and the actions on a body or stream (ResetAfter,
	// Truncate, Stall, CorruptStream, CorruptLength) apply to an open
	// stream; a stream takes at most one such rule in its life.
	Open bool

	Action Action
	// N is the byte offset the action takes effect at (see Action).
	N int64
	// D is Delay's hold.
	D time.Duration
	// Extra is how much CorruptLength overstates a frame (0: 4096).
	Extra uint32
}

func (r Rule) method() (method, substr string) {
	m, rest, ok := strings.Cut(r.Match, " ")
	if ok && m != "" && strings.ToUpper(m) == m && !strings.Contains(m, "/") {
		return m, rest
	}
	return "", r.Match
}

func (r Rule) matches(info reqInfo) bool {
	m, sub := r.method()
	switch {
	case m != "" && m != info.method:
		return false
	case sub != "" && !strings.Contains(info.uri, sub):
		return false
	case r.Body != "" && !bytes.Contains(info.body, []byte(r.Body)):
		return false
	case r.Exec != "" && !strings.Contains(info.exec, r.Exec):
		return false
	}
	return true
}

// Fault is a rule in force: its counts, and how to wait for it or remove
// it.
type Fault struct {
	p    *Proxy
	rule Rule

	seen, hits atomic.Int64
	fired      chan struct{}
	removed    chan struct{}
	fireOnce   sync.Once
	removeOnce sync.Once
	skipLeft   int // guarded by p.mu
	timesLeft  int // guarded by p.mu; -1: unlimited
}

// Rule returns the fault's rule.
func (f *Fault) Rule() Rule { return f.rule }

// Seen counts the requests (or open streams) the rule matched.
func (f *Fault) Seen() int { return int(f.seen.Load()) }

// Hits counts the times the rule fired.
func (f *Fault) Hits() int { return int(f.hits.Load()) }

// Fired is closed the first time the rule fires.
func (f *Fault) Fired() <-chan struct{} { return f.fired }

// Removed is closed once the fault is removed.
func (f *Fault) Removed() <-chan struct{} { return f.removed }

// Remove takes the rule out: it fires no more, and the streams it stalls
// resume. Corrupted or cut streams stay as they are.
func (f *Fault) Remove() {
	f.p.mu.Lock()
	for i, g := range f.p.faults {
		if g == f {
			f.p.faults = append(f.p.faults[:i:i], f.p.faults[i+1:]...)
			break
		}
	}
	f.p.mu.Unlock()
	f.removeOnce.Do(func() { close(f.removed) })
}

// take counts a match and reports whether the rule fires for it. The
// caller holds p.mu.
func (f *Fault) take(info reqInfo) bool {
	select {
	case <-f.removed:
		return false
	default:
	}
	if !f.rule.matches(info) {
		return false
	}
	f.seen.Add(1)
	if f.skipLeft > 0 {
		f.skipLeft--
		return false
	}
	if f.timesLeft == 0 {
		return false
	}
	if f.timesLeft > 0 {
		f.timesLeft--
	}
	f.hits.Add(1)
	f.fireOnce.Do(func() { close(f.fired) })
	return true
}

// Add puts a rule in force, after the rules already there.
func (p *Proxy) Add(r Rule) *Fault {
	f := &Fault{p: p, rule: r, fired: make(chan struct{}), removed: make(chan struct{}), skipLeft: r.Skip, timesLeft: r.Times}
	if r.Times <= 0 {
		f.timesLeft = -1
	}
	if r.Action == CorruptLength && f.rule.Extra == 0 {
		f.rule.Extra = 4096
	}
	p.mu.Lock()
	p.faults = append(p.faults, f)
	var resets []*session
	if r.Open && (r.Action == Reset || streamAction(r.Action)) {
		for s := range p.sessions {
			st := s.stream.Load()
			if st == nil || st.armed.Load() != nil || !f.take(st.info) {
				continue
			}
			p.logf("faultproxy: open stream %s %s: %s", st.info.method, st.info.uri, f.rule.describe())
			if r.Action == Reset {
				resets = append(resets, s)
				continue
			}
			st.armed.Store(&armed{f: f, at: st.off.Load() + r.N})
		}
	}
	p.mu.Unlock()
	for _, s := range resets {
		s.abort()
	}
	return f
}

// Clear removes every rule (see Fault.Remove).
func (p *Proxy) Clear() {
	p.mu.Lock()
	fs := p.faults
	p.faults = nil
	p.mu.Unlock()
	for _, f := range fs {
		f.removeOnce.Do(func() { close(f.removed) })
	}
}

// Faults lists the rules in force, in order.
func (p *Proxy) Faults() []*Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*Fault(nil), p.faults...)
}

// armed is a fault fired for one exchange: at is the offset it acts at
// (in the response for ResetAfter, else in the body or stream).
type armed struct {
	f  *Fault
	at int64
	// used: a corrupt action has corrupted its frame (owned by the
	// stream's relay goroutine).
	used bool
}

func (a armed) action() Action {
	if a.f == nil {
		return Pass
	}
	return a.f.rule.Action
}
