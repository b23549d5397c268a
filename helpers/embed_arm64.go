//go:build arm64

package helpers

import _ "embed"

// The artifacts of this GOARCH, gzip-compressed: strings, so they stay in the
// binary's read-only data, untouched until a helper is first installed.
var (
	//go:embed bin/stockade-warden-linux-arm64.gz
	wardenGz string
	//go:embed bin/stockade-egress-linux-arm64.gz
	egressGz string
)
