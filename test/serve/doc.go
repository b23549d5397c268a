// Package serve proves `stockade serve` and its clients end to end: the
// server over the real runtime (end_to_end_test.go); kill -9 of the server
// mid-exec and its restart (crash_test.go), processes carried across
// restarts: reattached, their timeouts kept, strays recorded
// (processes_across_restart_test.go), a recording across a kill
// (recording_across_kill_test.go); attached commands when the server goes
// and commands that wait for recovery (server_gone_test.go); the stats line
// and the metrics endpoint (stats_test.go, metrics_test.go); refusing a
// socket or journal directory another uid owns (directory_owner_test.go).
//
// It builds the stockade binary and needs Docker and the sandbox image (make
// image); the directory-owner tests need root (under CI=true they fail
// without it).
package serve
