package egress

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/stockade/stockade/spec"
)

// specialRanges are the ranges refused unless a rule names them, most
// specific first (the metadata address sits inside link-local). The names
// appear in denial reasons.
var specialRanges = []struct {
	prefix netip.Prefix
	name   string
}{
	{netip.MustParsePrefix("169.254.169.254/32"), "metadata"},
	{netip.MustParsePrefix("0.0.0.0/8"), "this-network"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared (CGNAT)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.0.0.0/24"), "ietf"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmark"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("::/96"), "ipv4-compatible"},
	{netip.MustParsePrefix("64:ff9b::/96"), "nat64"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "nat64"},
	{netip.MustParsePrefix("2002::/16"), "6to4"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
	{netip.MustParsePrefix("fc00::/7"), "unique-local"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// Special reports whether a lies in a range the proxy refuses unless a rule
// names it (private, loopback, link-local, metadata, multicast, ...), and
// that range's name. An IPv4-mapped IPv6 address is judged as the IPv4
// address it carries; a zone is ignored.
func Special(a netip.Addr) (string, bool) {
	_, name, ok := specialRange(a)
	return name, ok
}

// hostRange is the name of the host's own addresses in denial reasons.
const hostRange = "the host's own address"

func specialRange(a netip.Addr, self ...netip.Addr) (netip.Prefix, string, bool) {
	a = a.Unmap().WithZone("")
	// The host's own addresses come first, each a range of one address:
	// only a rule naming that very address (a /32 or /128) admits it, not
	// a wider prefix that holds it (0.0.0.0/0, or the host's private
	// subnet).
	for _, h := range self {
		if h.Unmap().WithZone("") == a {
			return netip.PrefixFrom(a, a.BitLen()), hostRange, true
		}
	}
	for _, s := range specialRanges {
		if s.prefix.Contains(a) {
			return s.prefix, s.name, true
		}
	}
	return netip.Prefix{}, "", false
}

// Verdict is Decide's answer.
type Verdict struct {
	// Allow is true when Addr may be connected to.
	Allow bool
	// Addr is the address to connect to (allowed) or the one the denial
	// is about; invalid when there was none.
	Addr netip.Addr
	// Rule is the admitting rule as written (EgressRule.String); empty on
	// denial.
	Rule string
	// Reason says in one line why the connection was denied; empty when
	// allowed.
	Reason string
}

// Decide says whether a connection to host:port may be made, and to which
// address. host is an IP literal or a name (lowercase, no trailing dot:
// NormalizeHost's output; Decide lowercases and trims again so a careless
// caller cannot slip past a name rule); addrs are the name's addresses as
// resolved, in the resolver's order, and are ignored for a literal.
//
// An address A is admissible for port P when
//   - an address or CIDR rule holds A and admits P, and, if A is Special, the
//     rule's prefix lies inside A's special range (0.0.0.0/0 does not admit
//     10.0.0.1; 10.0.0.0/8 and 10.0.0.1 do), or
//   - host is a name, a name rule matches it and admits P, and A is not
//     Special.
//
// The first admissible address in order is chosen. Decide does no I/O.
func Decide(rules []spec.EgressRule, host string, port uint16, addrs []netip.Addr) Verdict {
	return DecideFor(rules, nil, host, port, addrs)
}

// DecideFor is Decide on a host whose own addresses are self: each is
// special on its own (a range of one address), so only an explicit host
// rule, an address rule naming exactly that address (a /32 or /128),
// admits it; a wider prefix (0.0.0.0/0, the host's subnet) or a name rule
// does not.
func DecideFor(rules []spec.EgressRule, self []netip.Addr, host string, port uint16, addrs []netip.Addr) Verdict {
	if lit, err := netip.ParseAddr(host); err == nil {
		return decide(rules, self, host, port, []netip.Addr{lit}, false)
	}
	return decide(rules, self, strings.TrimSuffix(strings.ToLower(host), "."), port, addrs, true)
}

func decide(rules []spec.EgressRule, self []netip.Addr, host string, port uint16, addrs []netip.Addr, isName bool) Verdict {
	nameRule := ""
	if isName {
		for _, r := range rules {
			if r.MatchesName(host, port) {
				nameRule = r.String()
				break
			}
		}
	}
	// refused is the first special address some rule would have admitted
	// had it not been special: the most useful thing to tell the user.
	// Otherwise the reason is that no rule admits host:port.
	var first, refused netip.Addr
	refusedRange := ""
	for _, a := range addrs {
		n := a.Unmap().WithZone("")
		if !n.IsValid() {
			continue
		}
		if !first.IsValid() {
			first = a
		}
		rng, rangeName, special := specialRange(n, self...)
		for _, r := range rules {
			if !r.MatchesAddr(n, port) {
				continue
			}
			// Prefixes nest or are disjoint, and this one holds n:
			// it lies inside rng exactly when it is at least as long.
			if special && r.Prefix.Bits() < rng.Bits() {
				if !refused.IsValid() {
					refused, refusedRange = a, rangeName
				}
				continue
			}
			return Verdict{Allow: true, Addr: a, Rule: r.String()}
		}
		if nameRule != "" {
			if !special {
				return Verdict{Allow: true, Addr: a, Rule: nameRule}
			}
			if !refused.IsValid() {
				refused, refusedRange = a, rangeName
			}
		}
	}
	switch {
	case !first.IsValid():
		return Verdict{Reason: "no address for " + host}
	case refused.IsValid():
		return Verdict{Addr: refused, Reason: fmt.Sprintf("%s is %s: refused unless a rule names it", refused, refusedRange)}
	}
	return Verdict{Addr: first, Reason: "no rule admits " + net.JoinHostPort(host, strconv.Itoa(int(port)))}
}

// NeedsLookup reports whether looking host up could lead to an allowed
// connection to port: a name rule matches it, or an address rule admits the
// port. The proxy resolves nothing else, so a name no rule can admit never
// reaches a DNS server (a sandbox could otherwise send data out in the
// names it asks for).
func NeedsLookup(rules []spec.EgressRule, host string, port uint16) bool {
	for _, r := range rules {
		if r.MatchesName(host, port) || (r.Host == "" && r.Prefix.IsValid() && (r.Port == 0 || r.Port == port)) {
			return true
		}
	}
	return false
}

// NormalizeHost checks the host of a request target (brackets already
// removed) and returns it as Decide takes it: an IP literal in its canonical
// form, or a lowercase name without its trailing dot. Literals with a zone,
// names with characters outside letters, digits, '-' and '_', and dotted
// digits that are not an address are refused (invalid_argument).
func NormalizeHost(h string) (string, error) {
	bad := func(why string) (string, error) {
		if len(h) > 64 {
			h = h[:64] + "…"
		}
		return "", spec.Errorf(spec.CodeInvalidArgument, "egress", "host %q: %s", h, why)
	}
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Zone() != "" {
			return bad("a zone is not allowed")
		}
		return a.String(), nil
	}
	if strings.ContainsAny(h, ":%") {
		return bad("not an IP address")
	}
	name := strings.TrimSuffix(strings.ToLower(h), ".")
	if name == "" || len(name) > 253 {
		return bad("not 1..253 bytes")
	}
	digits := true
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || len(label) > 63 {
			return bad("a label is not 1..63 bytes")
		}
		for _, c := range []byte(label) {
			switch {
			case '0' <= c && c <= '9':
			case 'a' <= c && c <= 'z', c == '-', c == '_':
				digits = false
			default:
				return bad(fmt.Sprintf("holds %q", c))
			}
		}
	}
	if digits {
		// "127.1" and the like: some resolvers read them as addresses.
		return bad("dotted digits that are not an IP address")
	}
	return name, nil
}
