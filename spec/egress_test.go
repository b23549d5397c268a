package spec

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

func TestParseEgressRule(t *testing.T) {
	for _, tc := range []struct {
		in, want string // want "" means the rule is refused
		host     string
		port     uint16
	}{
		{"example.com", "example.com", "example.com", 0},
		{"Example.COM.", "example.com", "example.com", 0},
		{"example.com:443", "example.com:443", "example.com", 443},
		{"*.pypi.org:443", "*.pypi.org:443", "*.pypi.org", 443},
		{"files_1.example.com", "files_1.example.com", "files_1.example.com", 0},
		{"203.0.113.7", "203.0.113.7", "", 0},
		{"203.0.113.7:80", "203.0.113.7:80", "", 80},
		{"203.0.113.9/24:8080", "203.0.113.0/24:8080", "", 8080},
		{"2001:db8::1", "2001:db8::1", "", 0},
		{"[2001:db8::1]:443", "[2001:db8::1]:443", "", 443},
		{"[2001:db8::/32]:443", "[2001:db8::/32]:443", "", 443},
		{"2001:db8::/32", "2001:db8::/32", "", 0},
		{"::ffff:10.0.0.1", "10.0.0.1", "", 0},
		{"::ffff:10.0.0.0/104", "10.0.0.0/8", "", 0},
		{"::ffff:0:0/95", "", "", 0},
		{"", "", "", 0},
		{"example.com:0", "", "", 0},
		{"example.com:65536", "", "", 0},
		{"example.com:+80", "", "", 0},
		{"example.com:080", "", "", 0},
		{"example.com:", "", "", 0},
		{"*.", "", "", 0},
		{"*", "", "", 0},
		{"a..b", "", "", 0},
		{"-a.com", "", "", 0},
		{"a b.com", "", "", 0},
		{"exa*mple.com", "", "", 0},
		{"10.0.0.1/33", "", "", 0},
		{"999.1.1.1", "", "", 0},
		{"fe80::1%eth0", "", "", 0},
		{"[10.0.0.1]:80", "", "", 0},
		{"[2001:db8::1", "", "", 0},
		{"[2001:db8::1]x", "", "", 0},
		{strings.Repeat("a", 64) + ".com", "", "", 0},
		{strings.Repeat("a.", 200) + "com", "", "", 0},
	} {
		r, err := ParseEgressRule(tc.in)
		if tc.want == "" {
			if err == nil || !IsCode(err, CodeInvalidArgument) {
				t.Errorf("%q: %+v %v, want invalid_argument", tc.in, r, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if r.String() != tc.want || r.Host != tc.host || r.Port != tc.port {
			t.Errorf("%q: %q host %q port %d, want %q host %q port %d", tc.in, r.String(), r.Host, r.Port, tc.want, tc.host, tc.port)
		}
	}
}

// TestEgressRuleURL: a URL given as a rule is refused with what a rule
// is, not with a complaint about its "port".
func TestEgressRuleURL(t *testing.T) {
	for _, in := range []string{"https://example.com", "http://example.com:8080/x", "HTTPS://EXAMPLE.COM"} {
		_, err := ParseEgressRule(in)
		if !IsCode(err, CodeInvalidArgument) || !strings.Contains(err.Error(), "not a URL") || strings.Contains(err.Error(), "is not 1..65535") {
			t.Errorf("%q: %v, want invalid_argument saying a rule is not a URL", in, err)
		}
	}
	if _, _, err := ParseNetwork("allow=https://example.com"); !strings.Contains(fmt.Sprint(err), "not a URL") {
		t.Errorf("allow=https://example.com: %v, want it to say a rule is not a URL", err)
	}
}

func TestEgressRuleMatches(t *testing.T) {
	rule := func(s string) EgressRule {
		r, err := ParseEgressRule(s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, tc := range []struct {
		rule, host string
		port       uint16
		want       bool
	}{
		{"example.com", "example.com", 80, true},
		{"example.com", "www.example.com", 80, false},
		{"example.com:443", "example.com", 80, false},
		{"*.example.com", "www.example.com", 443, true},
		{"*.example.com", "a.b.example.com", 443, true},
		{"*.example.com", "example.com", 443, false},
		{"*.example.com", "badexample.com", 443, false},
		{"10.0.0.0/8", "example.com", 443, false},
	} {
		if got := rule(tc.rule).MatchesName(tc.host, tc.port); got != tc.want {
			t.Errorf("%s names %s:%d: %v, want %v", tc.rule, tc.host, tc.port, got, tc.want)
		}
	}
	for _, tc := range []struct {
		rule, addr string
		port       uint16
		want       bool
	}{
		{"10.0.0.0/8", "10.1.2.3", 22, true},
		{"10.0.0.0/8:443", "10.1.2.3", 22, false},
		{"10.0.0.1", "10.0.0.2", 22, false},
		{"10.0.0.1", "::ffff:10.0.0.1", 22, true},
		{"2001:db8::/32", "2001:db8::5", 1, true},
		{"example.com", "10.0.0.1", 80, false},
	} {
		if got := rule(tc.rule).MatchesAddr(netip.MustParseAddr(tc.addr), tc.port); got != tc.want {
			t.Errorf("%s holds %s:%d: %v, want %v", tc.rule, tc.addr, tc.port, got, tc.want)
		}
	}
}

func TestParseNetwork(t *testing.T) {
	for _, tc := range []struct {
		in    string
		kind  NetworkKind
		rules string
		bad   bool
	}{
		{"isolated", NetworkIsolated, "", false},
		{"none", NetworkIsolated, "", false},
		{"open", NetworkOpen, "", false},
		{"bridge", NetworkOpen, "", false},
		{"allowlist", NetworkAllowlist, "", false},
		{"allow=", NetworkAllowlist, "", false},
		{"allow=a.com, *.b.org:443 ,10.0.0.1", NetworkAllowlist, "a.com,*.b.org:443,10.0.0.1", false},
		{"allow=a.com,,b.com", "", "", true},
		{"allow=a b", "", "", true},
		{"host", "", "", true},
		{"", "", "", true},
	} {
		kind, rules, err := ParseNetwork(tc.in)
		if tc.bad {
			if !IsCode(err, CodeInvalidArgument) {
				t.Errorf("%q: %v %v %v, want invalid_argument", tc.in, kind, rules, err)
			}
			continue
		}
		if err != nil || kind != tc.kind || FormatEgressRules(rules) != tc.rules {
			t.Errorf("%q: %v %q %v, want %v %q", tc.in, kind, FormatEgressRules(rules), err, tc.kind, tc.rules)
		}
	}
	many := strings.Repeat("a.com,", MaxEgressRules) + "a.com"
	if _, _, err := ParseNetwork("allow=" + many); !IsCode(err, CodeInvalidArgument) {
		t.Errorf("%d rules: %v, want invalid_argument", MaxEgressRules+1, err)
	}
}

func TestPolicyEgressValidate(t *testing.T) {
	r, _ := ParseEgressRule("a.com")
	open := Policy{Network: NetworkOpen, Egress: []EgressRule{r}}.WithDefaults()
	if err := open.Validate(); !IsCode(err, CodeInvalidArgument) || !strings.Contains(err.Error(), "allowlist") {
		t.Errorf("rules on an open network: %v", err)
	}
	allow := Policy{Network: NetworkAllowlist, Egress: []EgressRule{r}}.WithDefaults()
	if err := allow.Validate(); err != nil {
		t.Errorf("an allowlist: %v", err)
	}
	empty := Policy{Network: NetworkAllowlist, Egress: []EgressRule{{}}}.WithDefaults()
	if err := empty.Validate(); !IsCode(err, CodeInvalidArgument) {
		t.Errorf("an empty rule: %v", err)
	}
	// Rules travel as text in the journal and come back the same.
	b, err := json.Marshal(allow)
	if err != nil || !strings.Contains(string(b), `"egress":["a.com"]`) {
		t.Fatalf("%s %v", b, err)
	}
	var back Policy
	if err := json.Unmarshal(b, &back); err != nil || FormatEgressRules(back.Egress) != "a.com" {
		t.Fatalf("%+v %v", back, err)
	}
	if err := json.Unmarshal([]byte(`{"egress":["a..b"]}`), &back); !IsCode(err, CodeInvalidArgument) {
		t.Errorf("a bad journaled rule: %v", err)
	}
}

// FuzzParseEgressRules: the parser never panics; what it accepts prints
// as text it parses back to the same rules, and each rule holds exactly
// one of a name or a prefix.
func FuzzParseEgressRules(f *testing.F) {
	for _, s := range []string{"", "example.com", "*.a.b:443", "10.0.0.0/8:22", "[::1]:80", "2001:db8::/32",
		"a.com, b.com", "[", "]:", "*.", "1.2.3.4/", "::ffff:1.2.3.4", "[fe80::1%x]:1", "a:b:c", "0.0.0.0/0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rules, err := ParseEgressRules(s)
		if err != nil {
			if !IsCode(err, CodeInvalidArgument) {
				t.Fatalf("%q: an error without invalid_argument: %v", s, err)
			}
			return
		}
		text := FormatEgressRules(rules)
		again, err := ParseEgressRules(text)
		if err != nil || FormatEgressRules(again) != text {
			t.Fatalf("%q printed as %q, which parses to %q %v", s, text, FormatEgressRules(again), err)
		}
		for _, r := range rules {
			if (r.Host == "") == !r.Prefix.IsValid() {
				t.Fatalf("%q: rule %+v holds both or neither of a name and a prefix", s, r)
			}
		}
	})
}
