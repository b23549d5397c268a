// Package mcp proves `stockade mcp` with a client nobody here wrote: the
// official Go SDK's client spawns the built binary (CommandTransport, as an
// agent's MCP client does) and drives its tools against the real daemon:
// an agent's whole session (every tool: a project written, its test run,
// what the run changed with its diff, a checkpoint, a fix, a rollback, a
// fork, a re-run, a background command read through logs from offsets,
// files listed, stated and removed, the history paged), over stdio and over
// Streamable HTTP with a bearer token (stdio_test.go, served_test.go); and
// the crash story: the server killed -9 while a background command prints,
// a new session reading its whole output from 0 after the restart.
//
// It builds the stockade binary and needs Docker and the sandbox image
// (make image).
package mcp
