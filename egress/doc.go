// Package egress is the egress proxy's rules engine and control protocol,
// used by both sides (the proxy binary and the runtime).
//
// # Rules
//
// A sandbox with the allowlist network reaches the outside only through its
// egress proxy, which admits a connection to host:port when Decide says so.
// Rules are spec.EgressRule values: host names (exact or "*.suffix"),
// addresses and CIDRs, each with an optional port. Addresses in the ranges
// Special lists (private, loopback, link-local, the cloud metadata address,
// multicast, ...) are refused unless an address rule at least as specific as
// the range names them: 0.0.0.0/0 does not open 10.0.0.1, 10.0.0.0/8 does;
// a name rule never opens a special address, so a public name that resolves
// to 127.0.0.1 or 169.254.169.254 stays closed.
//
// The proxy resolves a name once, asks Decide which of its addresses (if
// any) may be used, and connects to exactly that address: it never looks the
// name up again, so a name cannot be rebound to another address between the
// check and the connection.
//
// # Control protocol
//
// The runtime talks to the proxy over one byte stream (a unix socket in the
// proxy's container, bridged by `stockade-egress control SOCKET`). Every
// message is one JSON object on one line ending in "\n", at most MaxLine
// bytes including the newline. Each object holds exactly one kind:
//
//	proxy → runtime
//	{"hello":{"version":"1","rules_version":N,"next":S,"oldest":O}}   first, once
//	{"decision":{"seq":S,"time":...,"method":...,"host":...,...}}     see Decision
//	{"applied":N}              rules version N is in force
//	{"error":"text"}           the rules message this answers was refused
//
//	runtime → proxy
//	{"rules":["r1","r2"],"rules_version":N}   replace the rules (all of them)
//	{"resume":S}                              stream decisions with seq > S
//
// Every rules message gets exactly one answer, applied or error, in the
// order the rules were sent; a refused rules message leaves the old rules in
// force. An error with no rules message pending is the proxy's last word
// before it closes the link.
//
// The proxy keeps its last RingSize decisions, numbered from 1. It sends no
// decision until the runtime sends resume: then every kept decision with a
// greater seq, in order, and each new one as it is made. Hello tells the
// runtime where the ring stands (Next is the seq the next decision will get,
// Oldest the oldest one kept), so it can tell how many it missed. Sequence
// numbers restart at 1 when the proxy restarts: a runtime holding a seq at
// or beyond Hello.Next is talking to a new proxy and resumes from 0.
//
// A reader refuses a line that is too long, not one JSON object, names an
// unknown kind or two kinds, lacks a required field, or holds a value out of
// range, with a *ProtocolError: the peer broke the protocol and the link
// ends. The stream ending between lines is a clean end (io.EOF); ending
// inside a line is io.ErrUnexpectedEOF.
//
// # Caveats
//
// Rules admit destinations, not content: a broad rule (a CDN, "*.example")
// can still carry data out, and virtual hosting at an admitted address can
// serve other names. A name is looked up only when some rule could admit it
// (NeedsLookup), so a sandbox with name rules only cannot use the proxy's
// resolver to send arbitrary names out through DNS; with an address rule for
// the port it can.
package egress
