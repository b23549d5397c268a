// Package cli proves the stockade command as a user drives it, embedded and
// through a server: the kept-sandbox commands (commands_test.go,
// served_commands_test.go), usage errors, logs (logs_test.go), an OOM kill
// reported (oom_test.go), and sandbox-chosen strings made safe for a
// terminal (terminal_escapes_test.go).
//
// It builds the stockade binary and needs Docker and the sandbox image (make
// image).
package cli
