package spec

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Egress limits: a policy holds at most MaxEgressRules rules, each at most
// MaxEgressRuleBytes long as written.
const (
	MaxEgressRules     = 256
	MaxEgressRuleBytes = 300
)

// EgressRule is one allowlist entry: a host name (exact, or "*.suffix" for
// any name under suffix but not suffix itself), an IP address or a CIDR, each
// with an optional port (0: any port). It is written and journaled as text:
//
//	example.com  example.com:443  *.pypi.org:443
//	203.0.113.7  203.0.113.0/24:80  2001:db8::1  [2001:db8::1]:443  [2001:db8::/32]:443
type EgressRule struct {
	// Host is a lowercase name without a trailing dot; "*.x" is a wildcard.
	// Empty when the rule is an address or a prefix.
	Host string
	// Prefix is the address (as a full-length prefix) or CIDR; invalid when
	// the rule is a host name.
	Prefix netip.Prefix
	// Port is the one port admitted; 0 admits every port.
	Port uint16
}

// ParseEgressRule parses one rule as written on a command line or in a
// policy. Errors are invalid_argument and quote the rule.
func ParseEgressRule(s string) (EgressRule, error) {
	bad := func(format string, args ...any) error {
		return Errorf(CodeInvalidArgument, "policy", "egress rule %q: %s", clip(s), fmt.Sprintf(format, args...))
	}
	if s == "" {
		return EgressRule{}, bad("empty")
	}
	if len(s) > MaxEgressRuleBytes {
		return EgressRule{}, bad("%d bytes, over the limit of %d", len(s), MaxEgressRuleBytes)
	}
	if scheme, _, ok := strings.Cut(s, "://"); ok && scheme != "" && !strings.ContainsAny(scheme, "/[]:") {
		// A URL is the likeliest slip: say what a rule is, not that its
		// "port" is not a number.
		return EgressRule{}, bad("a rule is HOST[:PORT], CIDR[:PORT] or *.DOMAIN[:PORT], not a URL (for %s, say the host and its port, e.g. example.com:443)", scheme)
	}
	target, port, err := splitRulePort(s)
	if err != nil {
		return EgressRule{}, bad("%v", err)
	}
	r := EgressRule{Port: port}
	switch {
	case strings.Contains(target, "/"):
		p, err := netip.ParsePrefix(target)
		if err != nil {
			return EgressRule{}, bad("not a CIDR: %v", err)
		}
		if p.Addr().Zone() != "" {
			return EgressRule{}, bad("a zone is not allowed")
		}
		if p.Addr().Is4In6() {
			// Addresses are matched unmapped: so is the prefix.
			if p.Bits() < 96 {
				return EgressRule{}, bad("an IPv4-mapped prefix shorter than /96 reaches beyond IPv4")
			}
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		r.Prefix = p.Masked()
	case isAddrLike(target):
		a, err := netip.ParseAddr(target)
		if err != nil {
			return EgressRule{}, bad("not an IP address: %v", err)
		}
		if a.Zone() != "" {
			return EgressRule{}, bad("a zone is not allowed")
		}
		a = a.Unmap()
		r.Prefix = netip.PrefixFrom(a, a.BitLen())
	default:
		h, err := normalizeRuleHost(target)
		if err != nil {
			return EgressRule{}, bad("%v", err)
		}
		r.Host = h
	}
	return r, nil
}

// ParseEgressRules parses a comma-separated list of rules (spaces around
// commas are allowed). An empty list is valid: an allowlist that admits
// nothing.
func ParseEgressRules(s string) ([]EgressRule, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	if len(parts) > MaxEgressRules {
		return nil, Errorf(CodeInvalidArgument, "policy", "egress: %d rules, over the limit of %d", len(parts), MaxEgressRules)
	}
	rules := make([]EgressRule, 0, len(parts))
	for _, p := range parts {
		r, err := ParseEgressRule(strings.TrimSpace(p))
		if err != nil {
			return nil, err
		}
		rules = append(rules, r)
	}
	return rules, nil
}

// ParseNetwork parses the CLI's and API's network words: "isolated", "open"
// (or its old name "bridge"), "allowlist" (no rules) or "allow=RULE[,RULE…]".
func ParseNetwork(s string) (NetworkKind, []EgressRule, error) {
	switch {
	case s == string(NetworkIsolated) || s == "none":
		return NetworkIsolated, nil, nil
	case s == string(NetworkOpen) || s == string(NetworkBridge):
		return NetworkOpen, nil, nil
	case s == string(NetworkAllowlist):
		return NetworkAllowlist, nil, nil
	case strings.HasPrefix(s, "allow="):
		rules, err := ParseEgressRules(strings.TrimPrefix(s, "allow="))
		return NetworkAllowlist, rules, err
	}
	return "", nil, Errorf(CodeInvalidArgument, "policy", "network %q is not isolated, open or allow=RULE[,RULE...]", clip(s))
}

// FormatEgressRules writes rules as ParseEgressRules reads them.
func FormatEgressRules(rules []EgressRule) string {
	parts := make([]string, len(rules))
	for i, r := range rules {
		parts[i] = r.String()
	}
	return strings.Join(parts, ",")
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// splitRulePort splits "target[:port]". A bare IPv6 address or prefix (two
// or more colons, no brackets) has no port; "[v6]:port" and "[v6/n]:port"
// do.
func splitRulePort(s string) (string, uint16, error) {
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]")
		if end < 0 {
			return "", 0, fmt.Errorf("unclosed [")
		}
		target, rest := s[1:end], s[end+1:]
		if !strings.Contains(target, ":") {
			return "", 0, fmt.Errorf("brackets are for IPv6 only")
		}
		if rest == "" {
			return target, 0, nil
		}
		if !strings.HasPrefix(rest, ":") {
			return "", 0, fmt.Errorf("%q after ]", rest)
		}
		port, err := parseRulePort(rest[1:])
		return target, port, err
	}
	if strings.Count(s, ":") > 1 {
		return s, 0, nil
	}
	target, portText, ok := strings.Cut(s, ":")
	if !ok {
		return s, 0, nil
	}
	port, err := parseRulePort(portText)
	return target, port, err
}

func parseRulePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 || s[0] == '+' || (len(s) > 1 && s[0] == '0') {
		return 0, fmt.Errorf("port %q is not 1..65535", s)
	}
	return uint16(n), nil
}

// isAddrLike tells an address from a name: a colon (IPv6) or only digits
// and dots.
func isAddrLike(s string) bool {
	if strings.Contains(s, ":") {
		return true
	}
	if s == "" {
		return false
	}
	for _, c := range s {
		if c != '.' && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// normalizeRuleHost checks a host name (or "*.suffix") and lowercases it.
func normalizeRuleHost(h string) (string, error) {
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	name := h
	if strings.HasPrefix(h, "*.") {
		name = h[2:]
	}
	if err := checkHostName(name); err != nil {
		return "", err
	}
	return h, nil
}

// checkHostName accepts an RFC 1123 name: labels of letters, digits and
// hyphens (and underscores, which real names carry), 1..63 bytes, not
// starting or ending with a hyphen, 253 bytes in all.
func checkHostName(name string) error {
	if name == "" {
		return fmt.Errorf("no host name")
	}
	if len(name) > 253 {
		return fmt.Errorf("host name of %d bytes, over 253", len(name))
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("label %q is not 1..63 bytes", label)
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("label %q starts or ends with a hyphen", label)
		}
		for _, c := range label {
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("label %q holds %q", label, c)
			}
		}
	}
	return nil
}

// String writes the rule as ParseEgressRule reads it.
func (r EgressRule) String() string {
	var target string
	v6 := false
	switch {
	case r.Host != "":
		target = r.Host
	case r.Prefix.IsValid() && r.Prefix.IsSingleIP():
		target, v6 = r.Prefix.Addr().String(), r.Prefix.Addr().Is6()
	case r.Prefix.IsValid():
		target, v6 = r.Prefix.String(), r.Prefix.Addr().Is6()
	default:
		return ""
	}
	if r.Port == 0 {
		return target
	}
	if v6 {
		target = "[" + target + "]"
	}
	return target + ":" + strconv.Itoa(int(r.Port))
}

// MarshalText and UnmarshalText make a rule its text in JSON (the journal).
func (r EgressRule) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

func (r *EgressRule) UnmarshalText(b []byte) error {
	p, err := ParseEgressRule(string(b))
	if err != nil {
		return err
	}
	*r = p
	return nil
}

// MatchesName reports whether the rule names host (lowercase, no trailing
// dot) and admits port.
func (r EgressRule) MatchesName(host string, port uint16) bool {
	if r.Host == "" || !r.admitsPort(port) {
		return false
	}
	if suffix, ok := strings.CutPrefix(r.Host, "*."); ok {
		return strings.HasSuffix(host, "."+suffix)
	}
	return host == r.Host
}

// MatchesAddr reports whether the rule is an address or CIDR holding a and
// admits port.
func (r EgressRule) MatchesAddr(a netip.Addr, port uint16) bool {
	return r.Host == "" && r.Prefix.IsValid() && r.admitsPort(port) && r.Prefix.Contains(a.Unmap())
}

func (r EgressRule) admitsPort(port uint16) bool { return r.Port == 0 || r.Port == port }

// validateEgress checks a policy's rules against its network kind.
func validateEgress(kind NetworkKind, rules []EgressRule) error {
	if len(rules) > 0 && kind != NetworkAllowlist {
		return Errorf(CodeInvalidArgument, "policy", "egress: %d rules given for network %q; rules need the allowlist network", len(rules), kind)
	}
	if len(rules) > MaxEgressRules {
		return Errorf(CodeInvalidArgument, "policy", "egress: %d rules, over the limit of %d", len(rules), MaxEgressRules)
	}
	for i, r := range rules {
		if r.Host == "" && !r.Prefix.IsValid() {
			return Errorf(CodeInvalidArgument, "policy", "egress rule %d is empty", i)
		}
		if r.Host != "" && r.Prefix.IsValid() {
			return Errorf(CodeInvalidArgument, "policy", "egress rule %d has both a host (%q) and a prefix (%s): a rule is one of them", i, r.Host, r.Prefix)
		}
		// A rule built in Go, not parsed, is held to what ParseEgressRule
		// accepts: a URL, a port inside Host, a name in upper case.
		back, err := ParseEgressRule(r.String())
		if err != nil {
			return err
		}
		if back != r {
			return Errorf(CodeInvalidArgument, "policy", "egress rule %d (%s) reads back as %s: give the rule as ParseEgressRule makes it (host in lower case, the port in Port)", i, r.String(), back.String())
		}
	}
	return nil
}
