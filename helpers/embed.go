package helpers

import (
	_ "embed"
)

// manifestJSON describes every committed artifact; the ones of this GOARCH
// are embedded by embed_<arch>.go.
//
//go:embed bin/manifest.json
var manifestJSON []byte
