// Package profile holds stockade's engine profiles and the doctor's checks,
// as data and pure functions: what a Docker daemon must look like (and
// what stockade asks of it) for sandboxes to be admitted, the guarantees a
// profile gives up and why, and the report that compares a daemon's facts
// (Facts, read by dockerio's preflight) with a profile (CheckDaemon). A
// profile is always named (Select: a name, else $STOCKADE_PROFILE, else
// linux-x64), never "the first that passes".
//
// It imports only spec: the CLI, the server and the node read profiles and
// reports through it without linking Docker's client.
package profile
