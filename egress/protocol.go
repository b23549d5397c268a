package egress

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/stockade/stockade/spec"
)

// ProtocolVersion is the control protocol's version, sent in Hello.
const ProtocolVersion = "1"

// Protocol limits.
const (
	// MaxLine is the longest line, its newline included.
	MaxLine = 1 << 20
	// MaxField is the longest string a Decision field or an error message
	// may hold; the proxy clips what it records to fit.
	MaxField = 4096
	// RingSize is how many decisions the proxy keeps for a runtime that
	// resumes.
	RingSize = 4096
)

// Decision is one connection the proxy decided on. Deny decisions are sent
// when made; allow decisions when the connection ends, with its bytes and
// duration.
type Decision struct {
	// Seq numbers decisions from 1, one more for each decision.
	Seq uint64 `json:"seq"`
	// Time is when the decision was made.
	Time time.Time `json:"time"`
	// Process is the user name the client sent in Proxy-Authorization
	// (Basic), as claimed: the sandbox's processes get it in their proxy
	// URL, nothing authenticates it.
	Process string `json:"process,omitempty"`
	// Client is the client's source ip:port.
	Client string `json:"client,omitempty"`
	// Method is CONNECT or the HTTP method; empty when the request could
	// not be read.
	Method string `json:"method"`
	Host   string `json:"host"`
	Port   uint16 `json:"port"`
	// Addr is the address connected to (allow) or refused (deny).
	Addr string `json:"addr,omitempty"`
	// Verdict is "allow" or "deny" from the proxy; the runtime's decision
	// log also marks a range of decisions it never received "lost".
	Verdict string `json:"verdict"`
	// Rule is the admitting rule as written.
	Rule string `json:"rule,omitempty"`
	// Reason says why a connection was denied, or why an allowed one
	// failed or was cut.
	Reason string `json:"reason,omitempty"`
	// Up and Down count bytes client→upstream and upstream→client.
	Up   int64 `json:"up"`
	Down int64 `json:"down"`
	// Millis is how long the connection lasted.
	Millis int64 `json:"ms,omitempty"`
}

// Verdicts. VerdictLost is the runtime's, never the proxy's (a decision
// carrying it is refused on the control link).
const (
	VerdictAllow = "allow"
	VerdictDeny  = "deny"
	VerdictLost  = "lost"
)

// Hello is the proxy's first message on a link.
type Hello struct {
	// Version is ProtocolVersion as the proxy knows it.
	Version string `json:"version"`
	// RulesVersion is the version of the rules in force.
	RulesVersion uint64 `json:"rules_version"`
	// Next is the seq the next decision will get (1 when there was none).
	Next uint64 `json:"next"`
	// Oldest is the seq of the oldest decision kept (Next when none is).
	Oldest uint64 `json:"oldest"`
}

// Kind names a message's kind: the one key of its JSON object.
type Kind string

const (
	KindHello    Kind = "hello"    // proxy → runtime: Message.Hello
	KindDecision Kind = "decision" // proxy → runtime: Message.Decision
	KindApplied  Kind = "applied"  // proxy → runtime: Message.Applied
	KindError    Kind = "error"    // proxy → runtime: Message.Error
	KindRules    Kind = "rules"    // runtime → proxy: Message.Rules, Message.RulesVersion
	KindResume   Kind = "resume"   // runtime → proxy: Message.Resume
)

// FromProxy reports whether the proxy sends messages of kind k (the runtime
// sends the others).
func (k Kind) FromProxy() bool {
	return k == KindHello || k == KindDecision || k == KindApplied || k == KindError
}

// Message is one line of the control protocol. Kind says which of the other
// fields it carries.
type Message struct {
	Kind     Kind
	Hello    Hello
	Decision Decision
	Applied  uint64
	Error    string
	// Rules are the rules as written (spec.EgressRule.String), all of
	// them; RulesVersion numbers this set.
	Rules        []string
	RulesVersion uint64
	// Self, in a rules message, are the host's own addresses (JSON
	// "host"), which only an explicit host rule admits (DecideFor); nil
	// (the key absent) keeps the set the proxy holds.
	Self   []netip.Addr
	Resume uint64
}

// MaxSelf bounds the host addresses one rules message carries.
const MaxSelf = 1024

// AppendLine appends m as one protocol line (JSON and "\n") to dst. It
// refuses a message ParseMessage would refuse.
func (m Message) AppendLine(dst []byte) ([]byte, error) {
	if err := m.check(); err != nil {
		return dst, err
	}
	var v any
	switch m.Kind {
	case KindHello:
		v = struct {
			Hello Hello `json:"hello"`
		}{m.Hello}
	case KindDecision:
		v = struct {
			Decision Decision `json:"decision"`
		}{m.Decision}
	case KindApplied:
		v = struct {
			Applied uint64 `json:"applied"`
		}{m.Applied}
	case KindError:
		v = struct {
			Error string `json:"error"`
		}{m.Error}
	case KindRules:
		rules := m.Rules
		if rules == nil {
			rules = []string{} // an empty set, not a missing one
		}
		v = struct {
			Rules        []string     `json:"rules"`
			RulesVersion uint64       `json:"rules_version"`
			Self         []netip.Addr `json:"host,omitempty"`
		}{rules, m.RulesVersion, m.Self}
	case KindResume:
		v = struct {
			Resume uint64 `json:"resume"`
		}{m.Resume}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return dst, &ProtocolError{Msg: "encoding " + string(m.Kind), Err: err}
	}
	if len(b)+1 > MaxLine {
		return dst, &ProtocolError{Msg: fmt.Sprintf("%s message of %d bytes", m.Kind, len(b)+1), Err: ErrLineTooLong}
	}
	return append(append(dst, b...), '\n'), nil
}

// WriteMessage writes m to w as one line, in one Write call.
func WriteMessage(w io.Writer, m Message) error {
	b, err := m.AppendLine(nil)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// ParseMessage decodes one line (without its newline) and checks its shape:
// a JSON object with exactly one kind, every required field present and in
// range, no unknown key. Errors are *ProtocolError (Line 0).
func ParseMessage(line []byte) (Message, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(line, &obj); err != nil || obj == nil {
		return Message{}, &ProtocolError{Msg: "not a JSON object", Err: err}
	}
	var kinds []string
	for k := range obj {
		switch Kind(k) {
		case KindHello, KindDecision, KindApplied, KindError, KindRules, KindResume:
			kinds = append(kinds, k)
		default:
			if k != "rules_version" && k != "host" {
				return Message{}, &ProtocolError{Msg: fmt.Sprintf("unknown kind %q", clip(k))}
			}
		}
	}
	switch len(kinds) {
	case 0:
		return Message{}, &ProtocolError{Msg: "no kind"}
	case 1:
	default:
		slices.Sort(kinds)
		return Message{}, &ProtocolError{Msg: "two kinds in one message: " + strings.Join(kinds, ", ")}
	}
	m := Message{Kind: Kind(kinds[0])}
	if _, ok := obj["rules_version"]; ok != (m.Kind == KindRules) {
		if ok {
			return Message{}, &ProtocolError{Msg: "rules_version in a " + kinds[0] + " message"}
		}
		return Message{}, &ProtocolError{Msg: "rules without rules_version"}
	}
	if _, ok := obj["host"]; ok && m.Kind != KindRules {
		return Message{}, &ProtocolError{Msg: "host in a " + kinds[0] + " message"}
	}
	raw := obj[kinds[0]]
	var err error
	switch m.Kind {
	case KindHello:
		err = decodeObject(raw, &m.Hello, helloKeys, helloRequired)
	case KindDecision:
		err = decodeObject(raw, &m.Decision, decisionKeys, decisionRequired)
	case KindApplied:
		err = decodeValue(raw, &m.Applied)
	case KindError:
		err = decodeValue(raw, &m.Error)
	case KindRules:
		if err = decodeValue(raw, &m.Rules); err == nil {
			err = decodeValue(obj["rules_version"], &m.RulesVersion)
		}
		if h, ok := obj["host"]; ok && err == nil {
			err = decodeValue(h, &m.Self)
		}
	case KindResume:
		err = decodeValue(raw, &m.Resume)
	}
	if err != nil {
		return Message{}, &ProtocolError{Msg: "malformed " + kinds[0], Err: err}
	}
	if err := m.check(); err != nil {
		return Message{}, err
	}
	return m, nil
}

var (
	helloKeys        = []string{"version", "rules_version", "next", "oldest"}
	helloRequired    = helloKeys
	decisionKeys     = []string{"seq", "time", "process", "client", "method", "host", "port", "addr", "verdict", "rule", "reason", "up", "down", "ms"}
	decisionRequired = []string{"seq", "time", "method", "host", "port", "verdict", "up", "down"}
)

// decodeValue decodes a JSON value that must not be null (json leaves the
// target untouched for null, which would read as a zero sent on purpose).
func decodeValue(raw json.RawMessage, v any) error {
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return fmt.Errorf("null")
	}
	return json.Unmarshal(raw, v)
}

// decodeObject decodes a JSON object whose keys are exactly among allowed
// (encoding/json would take unknown and differently cased keys) and include
// every required one.
func decodeObject(raw json.RawMessage, v any, allowed, required []string) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return err
	}
	if fields == nil {
		return fmt.Errorf("null")
	}
	for k := range fields {
		if !slices.Contains(allowed, k) {
			return fmt.Errorf("unknown field %q", clip(k))
		}
	}
	for _, k := range required {
		f, ok := fields[k]
		if !ok {
			return fmt.Errorf("missing field %q", k)
		}
		if bytes.Equal(bytes.TrimSpace(f), []byte("null")) {
			return fmt.Errorf("field %q is null", k)
		}
	}
	return json.Unmarshal(raw, v)
}

// check holds the value rules both sides enforce.
func (m Message) check() error {
	bad := func(format string, args ...any) error {
		return &ProtocolError{Msg: string(m.Kind) + ": " + fmt.Sprintf(format, args...)}
	}
	switch m.Kind {
	case KindHello:
		h := m.Hello
		switch {
		case h.Version == "" || len(h.Version) > 64:
			return bad("version %q is not 1..64 bytes", clip(h.Version))
		case h.Next == 0:
			return bad("next is 0")
		case h.Oldest == 0 || h.Oldest > h.Next:
			return bad("oldest %d is not 1..next (%d)", h.Oldest, h.Next)
		}
	case KindDecision:
		return m.Decision.check(bad)
	case KindApplied, KindResume:
	case KindError:
		if m.Error == "" || len(m.Error) > MaxField {
			return bad("%d bytes, not 1..%d", len(m.Error), MaxField)
		}
	case KindRules:
		if len(m.Rules) > spec.MaxEgressRules {
			return bad("%d rules, over %d", len(m.Rules), spec.MaxEgressRules)
		}
		for i, r := range m.Rules {
			if r == "" || len(r) > spec.MaxEgressRuleBytes {
				return bad("rule %d is %d bytes, not 1..%d", i, len(r), spec.MaxEgressRuleBytes)
			}
		}
		if len(m.Self) > MaxSelf {
			return bad("%d host addresses, over %d", len(m.Self), MaxSelf)
		}
		for i, a := range m.Self {
			if !a.IsValid() || a.Zone() != "" {
				return bad("host address %d is not an address without a zone", i)
			}
		}
	default:
		return &ProtocolError{Msg: fmt.Sprintf("unknown kind %q", clip(string(m.Kind)))}
	}
	return nil
}

func (d Decision) check(bad func(string, ...any) error) error {
	switch {
	case d.Seq == 0:
		return bad("seq is 0")
	case d.Time.IsZero():
		return bad("no time")
	case d.Verdict != VerdictAllow && d.Verdict != VerdictDeny:
		return bad("verdict %q is not allow or deny", clip(d.Verdict))
	case d.Up < 0 || d.Down < 0 || d.Millis < 0:
		return bad("negative count (up %d, down %d, ms %d)", d.Up, d.Down, d.Millis)
	}
	for _, f := range []struct{ name, v string }{
		{"process", d.Process}, {"client", d.Client}, {"method", d.Method}, {"host", d.Host},
		{"addr", d.Addr}, {"rule", d.Rule}, {"reason", d.Reason},
	} {
		if len(f.v) > MaxField {
			return bad("%s of %d bytes, over %d", f.name, len(f.v), MaxField)
		}
	}
	if d.Addr != "" {
		if _, err := netip.ParseAddr(d.Addr); err != nil {
			return bad("addr %q is not an IP address", clip(d.Addr))
		}
	}
	if d.Client != "" {
		if _, err := netip.ParseAddrPort(d.Client); err != nil {
			return bad("client %q is not ip:port", clip(d.Client))
		}
	}
	return nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// LineReader reads protocol lines from a byte stream, each at most MaxLine
// bytes; it never holds more than one line.
type LineReader struct {
	br   *bufio.Reader
	buf  []byte
	line int64
}

// NewLineReader returns a LineReader reading r.
func NewLineReader(r io.Reader) *LineReader {
	return &LineReader{br: bufio.NewReaderSize(r, 64<<10)}
}

// ReadLine returns the next line without its newline; it is valid until the
// next call. At the stream's end between lines it returns io.EOF; inside a
// line, an error wrapping io.ErrUnexpectedEOF; for a line over MaxLine, a
// *ProtocolError wrapping ErrLineTooLong (the rest of that line is left
// unread). Other read errors are returned as they are.
func (l *LineReader) ReadLine() ([]byte, error) {
	l.buf = l.buf[:0]
	for {
		frag, err := l.br.ReadSlice('\n')
		if len(l.buf)+len(frag) > MaxLine {
			return nil, &ProtocolError{Line: l.line + 1, Msg: fmt.Sprintf("a line over %d bytes", MaxLine), Err: ErrLineTooLong}
		}
		switch {
		case err == nil:
			l.line++
			if len(l.buf) == 0 {
				return frag[:len(frag)-1], nil
			}
			l.buf = append(l.buf, frag...)
			return l.buf[:len(l.buf)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			l.buf = append(l.buf, frag...)
		// ReadSlice hands on the reader's error: io.EOF itself is the end
		// (io.Reader's contract); any other, one wrapping io.EOF included,
		// is returned as it is (default).
		case err == io.EOF: //nolint:errorlint // exact, as said above
			if n := len(l.buf) + len(frag); n > 0 {
				return nil, fmt.Errorf("egress: line %d ends after %d bytes: %w", l.line+1, n, io.ErrUnexpectedEOF)
			}
			return nil, io.EOF
		default:
			return nil, err
		}
	}
}

// Line returns the number of lines read so far.
func (l *LineReader) Line() int64 { return l.line }
