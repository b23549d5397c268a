// Package dockerio proves dockerio's Adapter against the real Docker daemon,
// below the runtime: the Engine conformance suite the Fake passes too
// (conformance_test.go), the named profile's preflight (smoke_test.go),
// what a sandbox is isolated from, its networks, readback of tampered
// containers, name collisions and bad policies (sandbox_test.go), exec
// (exec_test.go, events_test.go), archives with escaping or planted links
// (archive_test.go, rollback_test.go), the workspace seed (seed_test.go) and
// the raw plumbing the other suites stand on (plumbing_test.go).
// TestDockerioRecordInspect re-records dockerio/testdata when
// STOCKADE_RECORD=1.
//
// It needs Docker and the sandbox image (make image); STOCKADE_PROFILE names
// the engine's profile (the Makefile exports this machine's).
package dockerio
