// Package mcp proves `stockade mcp` with a client nobody here wrote: the
// official Go SDK's client spawns the built binary (CommandTransport, as an
// agent's MCP client does) and drives its tools against the real daemon:
// a sandbox made, a project's files written, its test run, what the run
// changed read back with its diff, a checkpoint, a rollback, a background
// command followed through logs from offsets, the sandbox removed.
//
// It builds the stockade binary and needs Docker and the sandbox image
// (make image).
package mcp
