// Package install proves that a fresh user gets a working stockade with
// nothing else installed: `go install ./cmd/stockade` into an empty GOBIN,
// and a program of its own module that embeds the runtime; either runs a
// sandbox from the helpers embedded in it.
//
// It runs the go command and needs Docker and the sandbox image (make
// image).
package install
