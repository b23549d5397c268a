// Package spec holds stockade's leaf domain types: the typed errors and their
// codes, sandbox and process specifications, policies and their limits.
//
// It imports nothing of stockade's and nothing of Docker, the journal or the
// actor system, so every other package (and every replay or debugging tool)
// can depend on it.
//
// Errors: every failure stockade reports is an *Error carrying a Code from the
// table in docs/design.md. Use errors.As to read the code, errors.Is with a
// sentinel (ErrTimeout, ...) to match a code, and errors.Is with the cause to
// match what went wrong underneath.
package spec
