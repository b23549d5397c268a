// Package manifest is the format of helpers/bin/manifest.json, shared by the
// generator that writes it and the helpers package that embeds it.
package manifest

import (
	"encoding/json"
	"fmt"
)

// Name is the manifest's file name beside the artifacts.
const Name = "manifest.json"

// Manifest lists the embedded helper binaries.
type Manifest struct {
	// Go is the Go release that built every binary (go env GOVERSION).
	Go      string  `json:"go"`
	Helpers []Entry `json:"helpers"`
}

// Entry is one artifact: a static binary for one platform, stored
// gzip-compressed.
type Entry struct {
	Name   string `json:"name"`
	GOOS   string `json:"goos"`
	GOARCH string `json:"goarch"`
	// File is the compressed artifact's name beside the manifest.
	File string `json:"file"`
	// SHA256 (hex) and Size are the uncompressed binary's.
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	// Version is what `NAME version` prints: the protocol it speaks.
	Version string `json:"version"`
}

// File is the artifact name of helper name for linux/arch.
func File(name, arch string) string { return name + "-linux-" + arch + ".gz" }

// Parse reads a manifest and checks every entry is complete.
func Parse(b []byte) (Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, fmt.Errorf("parsing %s: %w", Name, err)
	}
	if m.Go == "" {
		return Manifest{}, fmt.Errorf("%s names no Go release", Name)
	}
	for _, e := range m.Helpers {
		if e.Name == "" || e.File == "" || len(e.SHA256) != 64 || e.Size <= 0 || e.Version == "" || e.GOOS == "" || e.GOARCH == "" {
			return Manifest{}, fmt.Errorf("%s: incomplete entry %+v", Name, e)
		}
	}
	return m, nil
}

// Lookup returns the entry of helper name for goos/goarch.
func (m Manifest) Lookup(name, goos, goarch string) (Entry, bool) {
	for _, e := range m.Helpers {
		if e.Name == name && e.GOOS == goos && e.GOARCH == goarch {
			return e, true
		}
	}
	return Entry{}, false
}
