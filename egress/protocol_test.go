package egress

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

var testTime = time.Date(2025, 3, 1, 12, 0, 0, 123000000, time.UTC)

// validMessages holds one message of each kind, with every field set.
func validMessages() []Message {
	return []Message{
		{Kind: KindHello, Hello: Hello{Version: ProtocolVersion, RulesVersion: 3, Next: 10, Oldest: 1}},
		{Kind: KindDecision, Decision: Decision{Seq: 7, Time: testTime, Process: "p1", Client: "172.18.0.3:41234",
			Method: "CONNECT", Host: "example.com", Port: 443, Addr: "93.184.216.34", Verdict: VerdictAllow,
			Rule: "example.com:443", Up: 100, Down: 2000, Millis: 15}},
		{Kind: KindDecision, Decision: Decision{Seq: 8, Time: testTime, Method: "", Host: "", Verdict: VerdictDeny, Reason: "bad request"}},
		{Kind: KindApplied, Applied: 4},
		{Kind: KindError, Error: "rule 0: bad"},
		{Kind: KindRules, Rules: []string{"example.com:443", "10.0.0.0/8"}, RulesVersion: 4},
		{Kind: KindRules, Rules: []string{}, RulesVersion: 5},
		{Kind: KindResume, Resume: 6},
	}
}

func TestMessageRoundTrip(t *testing.T) {
	for _, m := range validMessages() {
		b, err := m.AppendLine(nil)
		if err != nil {
			t.Fatalf("%s: %v", m.Kind, err)
		}
		if bytes.Count(b, []byte("\n")) != 1 || b[len(b)-1] != '\n' {
			t.Fatalf("%s: %q is not one line", m.Kind, b)
		}
		got, err := ParseMessage(b[:len(b)-1])
		if err != nil {
			t.Fatalf("%s: %q: %v", m.Kind, b, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("%s: round trip\n got %+v\nwant %+v", m.Kind, got, m)
		}
	}
	// A nil rule list is sent as an empty one (deny everything), never
	// as a missing field.
	b, _ := Message{Kind: KindRules, RulesVersion: 1}.AppendLine(nil)
	if string(b) != `{"rules":[],"rules_version":1}`+"\n" {
		t.Errorf("nil rules encode as %q", b)
	}
}

func TestParseMessageErrors(t *testing.T) {
	const dec = `"seq":1,"time":"2025-03-01T12:00:00Z","method":"GET","host":"h","port":80,"verdict":"deny","up":0,"down":0`
	cases := []struct {
		line string
		want string // substring of the *ProtocolError's text
	}{
		{``, "not a JSON object"},
		{`null`, "not a JSON object"},
		{`[]`, "not a JSON object"},
		{`"hello"`, "not a JSON object"},
		{`{"applied":1}x`, "not a JSON object"},
		{`{}`, "no kind"},
		{`{"bogus":1}`, `unknown kind "bogus"`},
		{`{"Applied":1}`, `unknown kind "Applied"`},
		{`{"applied":1,"resume":2}`, "two kinds in one message: applied, resume"},
		{`{"applied":1,"bogus":2}`, `unknown kind "bogus"`},
		{`{"applied":-1}`, "malformed applied"},
		{`{"applied":1.5}`, "malformed applied"},
		{`{"applied":"1"}`, "malformed applied"},
		{`{"applied":null}`, "malformed applied"},
		{`{"resume":18446744073709551616}`, "malformed resume"},
		{`{"error":""}`, "error: 0 bytes"},
		{`{"error":null}`, "malformed error"},
		{`{"error":"` + strings.Repeat("x", MaxField+1) + `"}`, "error: 4097 bytes"},
		{`{"rules":["a"]}`, "rules without rules_version"},
		{`{"rules_version":1}`, "no kind"},
		{`{"applied":1,"rules_version":1}`, "rules_version in a applied message"},
		{`{"rules":null,"rules_version":1}`, "malformed rules"},
		{`{"rules":"a","rules_version":1}`, "malformed rules"},
		{`{"rules":[""],"rules_version":1}`, "rule 0 is 0 bytes"},
		{`{"rules":["` + strings.Repeat("a", 301) + `"],"rules_version":1}`, "rule 0 is 301 bytes"},
		{`{"rules":[` + strings.Repeat(`"a",`, 256) + `"a"],"rules_version":1}`, "257 rules"},
		{`{"hello":{"version":"1","rules_version":0,"next":1}}`, `missing field "oldest"`},
		{`{"hello":{"version":"1","rules_version":0,"next":1,"oldest":1,"x":1}}`, `unknown field "x"`},
		{`{"hello":{"Version":"1","rules_version":0,"next":1,"oldest":1}}`, `unknown field "Version"`},
		{`{"hello":{"version":"","rules_version":0,"next":1,"oldest":1}}`, "version \"\" is not 1..64 bytes"},
		{`{"hello":{"version":"1","rules_version":0,"next":0,"oldest":0}}`, "next is 0"},
		{`{"hello":{"version":"1","rules_version":0,"next":5,"oldest":6}}`, "oldest 6 is not 1..next (5)"},
		{`{"hello":{"version":"1","rules_version":0,"next":null,"oldest":1}}`, `field "next" is null`},
		{`{"hello":null}`, "malformed hello"},
		{`{"hello":[]}`, "malformed hello"},
		{`{"decision":{` + dec + `}}`, ""},
		{`{"decision":{` + strings.Replace(dec, `"seq":1`, `"seq":0`, 1) + `}}`, "seq is 0"},
		{`{"decision":{` + strings.Replace(dec, `"verdict":"deny"`, `"verdict":"maybe"`, 1) + `}}`, `verdict "maybe"`},
		{`{"decision":{` + strings.Replace(dec, `"up":0`, `"up":-1`, 1) + `}}`, "negative count"},
		{`{"decision":{` + strings.Replace(dec, `"port":80`, `"port":65536`, 1) + `}}`, "malformed decision"},
		{`{"decision":{` + strings.Replace(dec, `,"method":"GET"`, ``, 1) + `}}`, `missing field "method"`},
		{`{"decision":{` + strings.Replace(dec, `"time":"2025-03-01T12:00:00Z"`, `"time":"yesterday"`, 1) + `}}`, "malformed decision"},
		{`{"decision":{` + strings.Replace(dec, `"time":"2025-03-01T12:00:00Z"`, `"time":"0001-01-01T00:00:00Z"`, 1) + `}}`, "no time"},
		{`{"decision":{` + dec + `,"addr":"nope"}}`, `addr "nope" is not an IP address`},
		{`{"decision":{` + dec + `,"client":"1.2.3.4"}}`, `client "1.2.3.4" is not ip:port`},
		{`{"decision":{` + dec + `,"reason":"` + strings.Repeat("r", MaxField+1) + `"}}`, "reason of 4097 bytes"},
		{`{"decision":{` + dec + `,"extra":1}}`, `unknown field "extra"`},
	}
	for _, tc := range cases {
		name := tc.line
		if len(name) > 60 {
			name = name[:60]
		}
		t.Run(name, func(t *testing.T) {
			_, err := ParseMessage([]byte(tc.line))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("ParseMessage: %v", err)
				}
				return
			}
			var pe *ProtocolError
			if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseMessage = %v; want a *ProtocolError containing %q", err, tc.want)
			}
		})
	}
}

func TestAppendLineRefuses(t *testing.T) {
	for _, m := range []Message{
		{},
		{Kind: "bogus"},
		{Kind: KindHello},
		{Kind: KindDecision, Decision: Decision{Seq: 1, Time: testTime, Verdict: "x"}},
		{Kind: KindError},
		{Kind: KindRules, Rules: []string{""}},
	} {
		if b, err := m.AppendLine(nil); err == nil || !IsProtocol(err) || len(b) != 0 {
			t.Errorf("AppendLine(%+v) = %q, %v; want a *ProtocolError", m, b, err)
		}
	}
}

// lines joins lines, each ended by "\n".
func lines(ls ...string) string { return strings.Join(ls, "\n") + "\n" }

func TestLineReader(t *testing.T) {
	long := strings.Repeat("x", MaxLine-1) // with its newline, exactly MaxLine
	readers := []struct {
		name string
		wrap func(io.Reader) io.Reader
	}{
		{"whole", func(r io.Reader) io.Reader { return r }},
		{"one byte", iotest.OneByteReader},
		{"half", iotest.HalfReader},
		{"data with error", iotest.DataErrReader},
	}
	cases := []struct {
		name  string
		input string
		want  []string
		err   error // after the lines: io.EOF, io.ErrUnexpectedEOF or ErrLineTooLong
	}{
		{"empty", "", nil, io.EOF},
		{"lines", lines("a", "", "bc"), []string{"a", "", "bc"}, io.EOF},
		{"torn", "a\nbc", []string{"a"}, io.ErrUnexpectedEOF},
		{"longest", lines(long, "y"), []string{long, "y"}, io.EOF},
		{"too long", lines("a", long+"x", "y"), []string{"a"}, ErrLineTooLong},
		{"too long torn", "a\n" + long + "xx", []string{"a"}, ErrLineTooLong},
	}
	for _, rd := range readers {
		for _, tc := range cases {
			t.Run(rd.name+"/"+tc.name, func(t *testing.T) {
				lr := NewLineReader(rd.wrap(strings.NewReader(tc.input)))
				var got []string
				var err error
				for {
					var l []byte
					if l, err = lr.ReadLine(); err != nil {
						break
					}
					got = append(got, string(l))
				}
				if !reflect.DeepEqual(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
					t.Errorf("lines %d, want %d", len(got), len(tc.want))
				}
				if !errors.Is(err, tc.err) {
					t.Errorf("error %v, want %v", err, tc.err)
				}
				if errors.Is(tc.err, ErrLineTooLong) {
					var pe *ProtocolError
					if !errors.As(err, &pe) || pe.Line != int64(len(tc.want)+1) {
						t.Errorf("error %v is not a *ProtocolError on line %d", err, len(tc.want)+1)
					}
				}
				if errors.Is(tc.err, io.EOF) && err != io.EOF { //nolint:errorlint // a clean end is io.EOF itself (ReadLine's doc): what this checks
					t.Errorf("a clean end is %v, not io.EOF itself", err)
				}
			})
		}
	}
	// A read error is returned as it is.
	boom := errors.New("boom")
	if _, err := NewLineReader(iotest.ErrReader(boom)).ReadLine(); err != boom { //nolint:errorlint // a read error is returned as it is (ReadLine's doc): what this checks
		t.Errorf("read error: %v", err)
	}
}

func ExampleParseMessage() {
	m, err := ParseMessage([]byte(`{"rules":["example.com:443","10.0.0.0/8"],"rules_version":2}`))
	fmt.Println(m.Kind, m.Rules, m.RulesVersion, err)
	_, err = ParseMessage([]byte(`{"applied":1,"resume":0}`))
	fmt.Println(err)
	// Output:
	// rules [example.com:443 10.0.0.0/8] 2 <nil>
	// egress: protocol violation: two kinds in one message: applied, resume
}
