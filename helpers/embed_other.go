//go:build !amd64 && !arm64

package helpers

// No artifact is built for this GOARCH: the helpers must be named by
// $STOCKADE_WARDEN and $STOCKADE_EGRESS (see Resolve's error).
var wardenGz, egressGz string
