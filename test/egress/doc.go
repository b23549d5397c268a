// Package egress proves the allowlist network on the real daemon: the
// per-sandbox proxy's rules (CONNECT and plain HTTP), its decisions
// journaled, recovery after kill -9 of the server and the command line's
// --network allow= (allowlist_test.go); the owner's outside network made and
// removed with its sandboxes, and the host reached only through a rule that
// names it (outside_network_test.go). There is no internet here: the
// "outside" is HTTP servers of the test on the host (testkit.OutsideServer).
//
// It needs Docker and the sandbox image (make image); the egress image is
// made by the runtime itself.
package egress
