// Package bench holds the benchmarks that need Docker, each measuring
// stockade beside its anchor (dockerio directly, the raw client or the
// docker CLI) in the same loop: the API (api_test.go), dockerio
// (dockerio_test.go), the server (serve_test.go, serve_output_test.go), the
// recorder, the warden, egress, checkpoints, change tracking, cold starts and
// time to first command. BENCHMARKS.md gives each one's command and figures.
//
// They are one package, not one per capability, so that they run one after
// another: go test runs the test binaries of several packages at once, and
// two benchmarks sharing the daemon and two cores would skew each other's
// figures. It has no tests; `make bench` runs it.
//
// It needs Docker and the sandbox image (make image); STOCKADE_PROFILE names
// the engine's profile (the Makefile exports this machine's).
package bench
