package egress

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stockade/stockade/spec"
)

func TestSpecial(t *testing.T) {
	cases := []struct {
		addr string
		name string // "" when not special
	}{
		{"0.0.0.0", "this-network"},
		{"0.255.255.255", "this-network"},
		{"1.0.0.0", ""},
		{"9.255.255.255", ""},
		{"10.0.0.0", "private"},
		{"10.255.255.255", "private"},
		{"11.0.0.0", ""},
		{"100.63.255.255", ""},
		{"100.64.0.0", "shared (CGNAT)"},
		{"100.127.255.255", "shared (CGNAT)"},
		{"100.128.0.0", ""},
		{"127.0.0.1", "loopback"},
		{"127.255.255.255", "loopback"},
		{"169.254.0.1", "link-local"},
		{"169.254.169.254", "metadata"},
		{"169.254.169.253", "link-local"},
		{"169.255.0.0", ""},
		{"172.15.255.255", ""},
		{"172.16.0.0", "private"},
		{"172.17.0.1", "private"},
		{"172.31.255.255", "private"},
		{"172.32.0.0", ""},
		{"192.0.0.8", "ietf"},
		{"192.0.1.0", ""},
		{"192.0.2.1", ""}, // TEST-NET-1 is not in the list
		{"192.168.1.1", "private"},
		{"192.169.0.0", ""},
		{"198.17.255.255", ""},
		{"198.18.0.0", "benchmark"},
		{"198.19.255.255", "benchmark"},
		{"198.20.0.0", ""},
		{"203.0.113.7", ""},
		{"8.8.8.8", ""},
		{"223.255.255.255", ""},
		{"224.0.0.1", "multicast"},
		{"239.255.255.255", "multicast"},
		{"240.0.0.1", "reserved"},
		{"255.255.255.255", "reserved"},
		{"::", "unspecified"},
		{"::1", "loopback"},
		{"::2", "ipv4-compatible"},
		{"fc00::1", "unique-local"},
		{"fd12:3456::1", "unique-local"},
		{"fe80::1", "link-local"},
		{"fe80::1%eth0", "link-local"},
		{"febf::1", "link-local"},
		{"fec0::1", ""},
		{"ff02::1", "multicast"},
		{"64:ff9b::a00:1", "nat64"},
		{"64:ff9b:1::1", "nat64"},
		{"2002:a00:1::1", "6to4"},
		{"::a00:1", "ipv4-compatible"},
		{"2001:db8::1", "documentation"},
		{"2001:db9::1", ""},
		{"2606:4700::1111", ""},
		{"::ffff:10.0.0.1", "private"},
		{"::ffff:169.254.169.254", "metadata"},
		{"::ffff:8.8.8.8", ""},
	}
	for _, tc := range cases {
		t.Run(tc.addr, func(t *testing.T) {
			name, ok := Special(netip.MustParseAddr(tc.addr))
			if ok != (tc.name != "") || name != tc.name {
				t.Errorf("Special(%s) = %q, %v; want %q", tc.addr, name, ok, tc.name)
			}
		})
	}
	if _, ok := Special(netip.Addr{}); ok {
		t.Error("the zero Addr is special")
	}
}

func rules(t testing.TB, s string) []spec.EgressRule {
	t.Helper()
	r, err := spec.ParseEgressRules(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func TestDecide(t *testing.T) {
	cases := []struct {
		name   string
		rules  string
		host   string
		port   uint16
		addrs  []netip.Addr
		allow  bool
		addr   string // the verdict's Addr ("" for none)
		rule   string
		reason string // a substring of the reason
	}{
		{name: "no rules", host: "example.com", port: 443, addrs: addrs("93.184.216.34"),
			addr: "93.184.216.34", reason: "no rule admits example.com:443"},
		{name: "name rule", rules: "example.com:443", host: "example.com", port: 443, addrs: addrs("93.184.216.34"),
			allow: true, addr: "93.184.216.34", rule: "example.com:443"},
		{name: "name rule, other port", rules: "example.com:443", host: "example.com", port: 22, addrs: addrs("93.184.216.34"),
			addr: "93.184.216.34", reason: "no rule admits example.com:22"},
		{name: "name rule, any port", rules: "example.com", host: "example.com", port: 22, addrs: addrs("93.184.216.34"),
			allow: true, addr: "93.184.216.34", rule: "example.com"},
		{name: "name normalized", rules: "example.com", host: "Example.COM.", port: 80, addrs: addrs("93.184.216.34"),
			allow: true, addr: "93.184.216.34", rule: "example.com"},
		{name: "wildcard", rules: "*.pypi.org:443", host: "files.pypi.org", port: 443, addrs: addrs("151.101.0.223"),
			allow: true, addr: "151.101.0.223", rule: "*.pypi.org:443"},
		{name: "wildcard not the apex", rules: "*.pypi.org:443", host: "pypi.org", port: 443, addrs: addrs("151.101.0.223"),
			addr: "151.101.0.223", reason: "no rule admits pypi.org:443"},
		{name: "name to a private address", rules: "internal.example", host: "internal.example", port: 80, addrs: addrs("10.0.0.5"),
			addr: "10.0.0.5", reason: "10.0.0.5 is private: refused unless a rule names it"},
		{name: "name to the metadata address", rules: "evil.example", host: "evil.example", port: 80, addrs: addrs("169.254.169.254"),
			addr: "169.254.169.254", reason: "169.254.169.254 is metadata"},
		{name: "name to loopback v6 mapped", rules: "evil.example", host: "evil.example", port: 80, addrs: addrs("::ffff:127.0.0.1"),
			addr: "::ffff:127.0.0.1", reason: "is loopback"},
		{name: "name: the first public address", rules: "mixed.example", host: "mixed.example", port: 80, addrs: addrs("10.0.0.5", "203.0.113.9", "203.0.113.10"),
			allow: true, addr: "203.0.113.9", rule: "mixed.example"},
		{name: "name to private, an address rule names it", rules: "internal.example,10.0.0.5:80", host: "internal.example", port: 80, addrs: addrs("10.0.0.5"),
			allow: true, addr: "10.0.0.5", rule: "10.0.0.5:80"},
		{name: "name with no rule, address rule holds it", rules: "203.0.113.0/24", host: "cdn.example", port: 443, addrs: addrs("203.0.113.77"),
			allow: true, addr: "203.0.113.77", rule: "203.0.113.0/24"},
		{name: "name, no address", rules: "example.com", host: "example.com", port: 443,
			reason: "no address for example.com"},
		{name: "literal, no rules", host: "203.0.113.7", port: 80,
			addr: "203.0.113.7", reason: "no rule admits 203.0.113.7:80"},
		{name: "literal admitted", rules: "203.0.113.7:80", host: "203.0.113.7", port: 80,
			allow: true, addr: "203.0.113.7", rule: "203.0.113.7:80"},
		{name: "literal, addrs ignored", rules: "203.0.113.8", host: "203.0.113.7", port: 80, addrs: addrs("203.0.113.8"),
			addr: "203.0.113.7", reason: "no rule admits 203.0.113.7:80"},
		{name: "literal, wrong port", rules: "203.0.113.7:80", host: "203.0.113.7", port: 81,
			addr: "203.0.113.7", reason: "no rule admits 203.0.113.7:81"},
		{name: "everything does not admit private", rules: "0.0.0.0/0", host: "10.0.0.1", port: 80,
			addr: "10.0.0.1", reason: "10.0.0.1 is private: refused unless a rule names it"},
		{name: "everything admits public", rules: "0.0.0.0/0", host: "8.8.8.8", port: 53,
			allow: true, addr: "8.8.8.8", rule: "0.0.0.0/0"},
		{name: "the private range admits", rules: "10.0.0.0/8", host: "10.0.0.1", port: 80,
			allow: true, addr: "10.0.0.1", rule: "10.0.0.0/8"},
		{name: "a narrower prefix admits", rules: "10.1.0.0/16:80", host: "10.1.2.3", port: 80,
			allow: true, addr: "10.1.2.3", rule: "10.1.0.0/16:80"},
		{name: "the bridge gateway", rules: "172.17.0.1:8080", host: "172.17.0.1", port: 8080,
			allow: true, addr: "172.17.0.1", rule: "172.17.0.1:8080"},
		{name: "a broader prefix than the range", rules: "172.0.0.0/8", host: "172.17.0.1", port: 80,
			addr: "172.17.0.1", reason: "is private"},
		{name: "link-local range does not admit metadata", rules: "169.254.0.0/16", host: "169.254.169.254", port: 80,
			addr: "169.254.169.254", reason: "169.254.169.254 is metadata"},
		{name: "metadata named", rules: "169.254.169.254:80", host: "169.254.169.254", port: 80,
			allow: true, addr: "169.254.169.254", rule: "169.254.169.254:80"},
		{name: "metadata, no rules", host: "169.254.169.254", port: 80,
			addr: "169.254.169.254", reason: "no rule admits 169.254.169.254:80"},
		{name: "later rule is specific enough", rules: "0.0.0.0/0,127.0.0.1:8080", host: "127.0.0.1", port: 8080,
			allow: true, addr: "127.0.0.1", rule: "127.0.0.1:8080"},
		{name: "v6 everything does not admit ula", rules: "::/0", host: "fd00::1", port: 443,
			addr: "fd00::1", reason: "fd00::1 is unique-local"},
		{name: "v6 everything admits public", rules: "::/0", host: "2606:4700::1111", port: 443,
			allow: true, addr: "2606:4700::1111", rule: "::/0"},
		{name: "v6 loopback named", rules: "[::1]:80", host: "::1", port: 80,
			allow: true, addr: "::1", rule: "[::1]:80"},
		{name: "mapped literal judged as v4", rules: "0.0.0.0/0", host: "::ffff:10.0.0.1", port: 80,
			addr: "::ffff:10.0.0.1", reason: "is private"},
		{name: "mapped literal admitted by its v4 rule", rules: "10.0.0.1", host: "::ffff:10.0.0.1", port: 80,
			allow: true, addr: "::ffff:10.0.0.1", rule: "10.0.0.1"},
		{name: "v4 rule does not hold v6", rules: "0.0.0.0/0", host: "2606:4700::1111", port: 443,
			addr: "2606:4700::1111", reason: "no rule admits [2606:4700::1111]:443"},
		{name: "zoned link-local named", rules: "fe80::1", host: "fe80::1%eth0", port: 80,
			allow: true, addr: "fe80::1%eth0", rule: "fe80::1"},
		{name: "loopback, another port named", rules: "127.0.0.1:8080", host: "127.0.0.1", port: 22,
			addr: "127.0.0.1", reason: "no rule admits 127.0.0.1:22"},
		{name: "nat64 needs naming", rules: "::/0", host: "64:ff9b::a00:1", port: 80,
			addr: "64:ff9b::a00:1", reason: "is nat64"},
		{name: "name rule and a broad CIDR both refused for loopback", rules: "localhost,0.0.0.0/0", host: "localhost", port: 80, addrs: addrs("127.0.0.1"),
			addr: "127.0.0.1", reason: "127.0.0.1 is loopback"},
		{name: "localhost named by address", rules: "localhost,127.0.0.1", host: "localhost", port: 80, addrs: addrs("::1", "127.0.0.1"),
			allow: true, addr: "127.0.0.1", rule: "127.0.0.1"},
		{name: "invalid addresses skipped", rules: "example.com", host: "example.com", port: 80, addrs: []netip.Addr{{}, netip.MustParseAddr("203.0.113.1")},
			allow: true, addr: "203.0.113.1", rule: "example.com"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := Decide(rules(t, tc.rules), tc.host, tc.port, tc.addrs)
			addr := ""
			if v.Addr.IsValid() {
				addr = v.Addr.String()
			}
			if v.Allow != tc.allow || addr != tc.addr || v.Rule != tc.rule || !strings.Contains(v.Reason, tc.reason) {
				t.Errorf("Decide = %+v; want allow %v addr %q rule %q reason containing %q", v, tc.allow, tc.addr, tc.rule, tc.reason)
			}
			if v.Allow != (v.Reason == "") {
				t.Errorf("Decide = %+v: a reason exactly when denied", v)
			}
		})
	}
}

func TestNeedsLookup(t *testing.T) {
	cases := []struct {
		rules string
		host  string
		port  uint16
		want  bool
	}{
		{"", "example.com", 443, false},
		{"example.com:443", "example.com", 443, true},
		{"example.com:443", "example.com", 80, false},
		{"example.com", "other.com", 443, false},
		{"*.example.com", "a.example.com", 1, true},
		{"203.0.113.0/24:443", "anything.example", 443, true},
		{"203.0.113.0/24:443", "anything.example", 80, false},
		{"203.0.113.7", "anything.example", 80, true},
	}
	for _, tc := range cases {
		if got := NeedsLookup(rules(t, tc.rules), tc.host, tc.port); got != tc.want {
			t.Errorf("NeedsLookup(%q, %s:%d) = %v, want %v", tc.rules, tc.host, tc.port, got, tc.want)
		}
	}
}

func TestNormalizeHost(t *testing.T) {
	cases := []struct {
		in, want string // want "" for an error
	}{
		{"example.com", "example.com"},
		{"Example.COM.", "example.com"},
		{"a_b.example", "a_b.example"},
		{"127.0.0.1", "127.0.0.1"},
		{"::1", "::1"},
		{"2001:DB8::1", "2001:db8::1"},
		{"::ffff:10.0.0.1", "::ffff:10.0.0.1"},
		{"fe80::1%eth0", ""},
		{"127.1", ""},
		{"1.2.3", ""},
		{"", ""},
		{".", ""},
		{"a..b", ""},
		{"exa mple.com", ""},
		{"exämple.com", ""},
		{"a:b", ""},
		{strings.Repeat("a", 64) + ".com", ""},
		{strings.Repeat("a.", 127) + "a", ""},
		{"8x.example", "8x.example"},
	}
	for _, tc := range cases {
		got, err := NormalizeHost(tc.in)
		if got != tc.want || (err != nil) != (tc.want == "") {
			t.Errorf("NormalizeHost(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
		if err != nil && !spec.IsCode(err, spec.CodeInvalidArgument) {
			t.Errorf("NormalizeHost(%q): %v is not invalid_argument", tc.in, err)
		}
	}
}

// FuzzDecide: no input panics Decide; an allowed verdict names one of the
// candidates and a rule that admits it, and a special address is allowed
// only through an address rule inside its range.
func FuzzDecide(f *testing.F) {
	f.Add("example.com:443", "example.com", uint16(443), []byte{4, 93, 184, 216, 34})
	f.Add("0.0.0.0/0", "10.0.0.1", uint16(80), []byte{})
	f.Add("10.0.0.0/8,example.com", "example.com", uint16(80), []byte{4, 10, 0, 0, 1, 4, 8, 8, 8, 8})
	f.Add("169.254.0.0/16", "169.254.169.254", uint16(80), []byte{})
	f.Add("*.example.com,::/0", "a.example.com", uint16(1), []byte{16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1})
	f.Add("fe80::/10", "fe80::1%eth0", uint16(80), []byte{})
	f.Add("localhost,127.0.0.1:8080", "localhost", uint16(8080), []byte{4, 127, 0, 0, 1, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, ruleText, host string, port uint16, raw []byte) {
		rs, err := spec.ParseEgressRules(ruleText)
		if err != nil {
			return
		}
		// raw is a run of addresses, each a length byte (4 or 16, or
		// anything else for an invalid one) and its bytes.
		var cands []netip.Addr
		for len(raw) > 0 {
			n := int(raw[0])
			raw = raw[1:]
			switch {
			case n == 4 && len(raw) >= 4:
				cands = append(cands, netip.AddrFrom4([4]byte(raw[:4])))
			case n == 16 && len(raw) >= 16:
				cands = append(cands, netip.AddrFrom16([16]byte(raw[:16])))
			default:
				cands = append(cands, netip.Addr{})
				n = 0
			}
			raw = raw[min(n, len(raw)):]
		}
		v := Decide(rs, host, port, cands)
		if !v.Allow {
			if v.Reason == "" || v.Rule != "" {
				t.Fatalf("denied without a reason or with a rule: %+v", v)
			}
			return
		}
		lit, err := netip.ParseAddr(host)
		if err == nil {
			if v.Addr != lit {
				t.Fatalf("allowed %v for literal %s", v.Addr, host)
			}
		} else if !containsAddr(cands, v.Addr) {
			t.Fatalf("allowed %v, not among %v", v.Addr, cands)
		}
		r, err := spec.ParseEgressRule(v.Rule)
		if err != nil {
			t.Fatalf("allowed by %q: %v", v.Rule, err)
		}
		name := strings.TrimSuffix(strings.ToLower(host), ".")
		a := v.Addr.WithZone("") // rules never hold a zoned address
		if !r.MatchesAddr(a, port) && !(lit == netip.Addr{} && r.MatchesName(name, port)) {
			t.Fatalf("rule %q does not admit %s (%v) port %d", v.Rule, host, v.Addr, port)
		}
		if rng, _, special := specialRange(v.Addr); special {
			if r.Host != "" || !r.MatchesAddr(a, port) || r.Prefix.Bits() < rng.Bits() || !rng.Contains(r.Prefix.Addr()) {
				t.Fatalf("special %v allowed by %q, not an address rule inside %v", v.Addr, v.Rule, rng)
			}
		}
	})
}

func containsAddr(list []netip.Addr, a netip.Addr) bool {
	for _, b := range list {
		if b == a {
			return true
		}
	}
	return false
}
