// Package api proves the embedding API (package stockade) against the real
// Docker daemon: processes' exit codes, streams, stdin, backpressure, output
// quotas, timeouts, signals and stops (contract_test.go); how a process's
// end is told: the OOM killer, output closed before the exit, the caller's
// environment kept (process_edges_test.go); put and get, escaping links
// refused (put_links_test.go) and consistent copies journaled
// (consistent_copy_test.go); recorded output, the changes each process made
// and re-running a recorded session (output_recorded_test.go,
// changes_test.go, rerun_test.go).
//
// It needs Docker and the sandbox image (make image); STOCKADE_PROFILE names
// the engine's profile (the Makefile exports this machine's).
package api
