// Package warden proves the in-sandbox process server, stockade-warden, as
// the runtime drives it on the real daemon: spawns and exit codes, stdin
// half-close, per-process backpressure, terminals, the delivered binary
// protected, a warden killed, stopped or forged at from inside, a runtime
// closed and reopened mid-stream, a sandbox's warden reattached at launch
// (processes_test.go); a server killed -9 mid-stream (crash_test.go); output
// that reaches the link's end delivered (output_at_link_end_test.go).
//
// It needs Docker and the sandbox image (make image).
package warden
