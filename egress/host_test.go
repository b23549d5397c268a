package egress

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

// TestDecideForHost: the host's own addresses are admitted only by a rule
// naming the address itself, whatever wider rule holds them.
func TestDecideForHost(t *testing.T) {
	self := addrs("203.0.113.7", "10.1.2.3", "2606:4700::7")
	cases := []struct {
		name  string
		rules string
		host  string
		addrs []netip.Addr
		allow bool
		rule  string
	}{
		{name: "all of IPv4", rules: "0.0.0.0/0:443", host: "203.0.113.7"},
		{name: "the host's public /24", rules: "203.0.113.0/24:443", host: "203.0.113.7"},
		{name: "the host's private subnet", rules: "10.0.0.0/8:443", host: "10.1.2.3"},
		{name: "all of IPv6", rules: "::/0", host: "2606:4700::7"},
		{name: "a name resolving to the host", rules: "box.example:443", host: "box.example", addrs: addrs("203.0.113.7")},
		{name: "mapped IPv4", rules: "0.0.0.0/0:443", host: "::ffff:203.0.113.7"},
		{name: "the address named", rules: "203.0.113.7:443", host: "203.0.113.7", allow: true, rule: "203.0.113.7:443"},
		{name: "the /32 named", rules: "203.0.113.7/32:443", host: "203.0.113.7", allow: true, rule: "203.0.113.7:443"},
		{name: "a private host address named", rules: "10.1.2.3:443", host: "10.1.2.3", allow: true, rule: "10.1.2.3:443"},
		{name: "another address of the range", rules: "0.0.0.0/0:443", host: "203.0.113.8", allow: true, rule: "0.0.0.0/0:443"},
		{name: "a name: the next address, not the host's", rules: "box.example:443", host: "box.example",
			addrs: addrs("203.0.113.7", "198.51.100.1"), allow: true, rule: "box.example:443"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := DecideFor(rules(t, tc.rules), self, tc.host, 443, tc.addrs)
			if v.Allow != tc.allow || v.Rule != tc.rule {
				t.Fatalf("DecideFor = %+v; want allow %v by %q", v, tc.allow, tc.rule)
			}
			if !tc.allow && !strings.Contains(v.Reason, hostRange) {
				t.Errorf("reason %q does not name the host", v.Reason)
			}
			// Without the host's addresses the same rules admit it
			// (the public ones), as before.
			if w := Decide(rules(t, tc.rules), tc.host, 443, tc.addrs); strings.HasPrefix(tc.host, "203.") && !w.Allow {
				t.Errorf("Decide without the host's addresses = %+v", w)
			}
		})
	}
}

// TestRulesMessageHost: the host's addresses ride on a rules message, and
// only there.
func TestRulesMessageHost(t *testing.T) {
	m := Message{Kind: KindRules, Rules: []string{"example.com"}, RulesVersion: 3, Self: addrs("203.0.113.7", "2001:db8::1")}
	b, err := m.AppendLine(nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"rules":["example.com"],"rules_version":3,"host":["203.0.113.7","2001:db8::1"]}` + "\n"; string(b) != want {
		t.Fatalf("encoded %q, want %q", b, want)
	}
	got, err := ParseMessage(b[:len(b)-1])
	if err != nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for _, tc := range []struct{ line, want string }{
		{`{"applied":1,"host":["1.2.3.4"]}`, "host in a applied message"},
		{`{"rules":[],"rules_version":1,"host":["nope"]}`, "malformed rules"},
		{`{"rules":[],"rules_version":1,"host":[""]}`, "host address 0"},
		{`{"rules":[],"rules_version":1,"host":null}`, "malformed rules"},
		{`{"rules":[],"rules_version":1,"host":["fe80::1%eth0"]}`, "host address 0"},
	} {
		if _, err := ParseMessage([]byte(tc.line)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.line, err, tc.want)
		}
	}
}
