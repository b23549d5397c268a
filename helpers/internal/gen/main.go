// Command gen builds the helper binaries helpers/ embeds (go generate
// ./helpers/, make generate) or checks that the committed ones are what the
// current source builds (make helpers-check).
//
// Each helper is built static and reproducibly (CGO_ENABLED=0, -trimpath,
// -buildvcs=false, -ldflags='-s -w', the architecture level pinned, GOFLAGS
// and GOEXPERIMENT cleared), so the same source and Go release give the same
// bytes on any machine. It is stored gzip-compressed with no name or time in
// the header, and manifest.json records each uncompressed binary's sha256 and
// size, its protocol version and the Go release that built it.
//
// The check compares digests of the uncompressed binaries, not the .gz
// files: a Go release whose compressor differs does not make the artifacts
// stale, a changed binary does.
package main

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/helpers/internal/manifest"
	"github.com/stockade/stockade/warden/wire"
)

// helper is one program to build.
type helper struct{ name, pkg, version string }

var (
	built = []helper{
		{"stockade-warden", "./cmd/warden", wire.Version},
		{"stockade-egress", "./cmd/egress", egress.ProtocolVersion},
	}
	arches = []string{"amd64", "arm64"}
)

func main() {
	out := flag.String("out", "bin", "the directory the artifacts and manifest.json are written to (or checked in)")
	check := flag.Bool("check", false, "build into a temporary directory and fail when the artifacts in -out differ")
	flag.Parse()
	if err := run(*out, *check); err != nil {
		fmt.Fprintf(os.Stderr, "helpers/internal/gen: %v\n", err)
		os.Exit(1)
	}
}

func run(out string, check bool) error {
	root, err := goEnv("GOMOD")
	if err != nil || root == "" || root == os.DevNull {
		return fmt.Errorf("finding the module: %v", err) //nolint:errorlint // err is nil when go env names no module: %w would print %!w(<nil>)
	}
	root = filepath.Dir(root)
	gover, err := goEnv("GOVERSION")
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "stockade-helpers-")
	if err != nil {
		return err
	}
	defer func() {
		if err := os.RemoveAll(tmp); err != nil {
			fmt.Fprintf(os.Stderr, "helpers/internal/gen: removing the build directory: %v\n", err)
		}
	}()
	m := manifest.Manifest{Go: gover}
	bins := map[string][]byte{}
	for _, h := range built {
		for _, arch := range arches {
			bin, err := build(root, tmp, h, arch)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(bin)
			e := manifest.Entry{Name: h.name, GOOS: "linux", GOARCH: arch, File: manifest.File(h.name, arch), SHA256: hex.EncodeToString(sum[:]), Size: int64(len(bin)), Version: h.version}
			m.Helpers = append(m.Helpers, e)
			bins[e.File] = bin
		}
	}
	if check {
		return compare(out, m)
	}
	return write(out, m, bins)
}

// build compiles one helper for linux/arch and returns its bytes.
func build(root, tmp string, h helper, arch string) ([]byte, error) {
	dst := filepath.Join(tmp, h.name+"-"+arch)
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", dst, h.pkg)
	cmd.Dir = root
	cmd.Env = buildEnv(arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building %s for linux/%s: %w\n%s", h.pkg, arch, err, b)
	}
	return os.ReadFile(dst)
}

// buildEnv is the environment of a reproducible build: everything that
// changes the output is set here, not taken from the caller.
func buildEnv(arch string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "GOFLAGS", "GOEXPERIMENT", "GOOS", "GOARCH", "GOAMD64", "GOARM64", "CGO_ENABLED":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOAMD64=v1", "GOARM64=v8.0", "GOFLAGS=-mod=readonly")
}

func write(out string, m manifest.Manifest, bins map[string][]byte) error {
	// The artifacts and manifest are committed source files, readable like
	// every other file of the checkout.
	if err := os.MkdirAll(out, 0o755); err != nil { //nolint:gosec // G301: see above
		return err
	}
	for _, e := range m.Helpers {
		var gz bytes.Buffer
		zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
		if err != nil {
			return err
		}
		// The zero header: no name, no modification time, so the file
		// depends on the binary alone.
		if _, err := zw.Write(bins[e.File]); err != nil {
			return err
		}
		if err := zw.Close(); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, e.File), gz.Bytes(), 0o644); err != nil { //nolint:gosec // G306: a committed source file
			return err
		}
	}
	js, err := json.MarshalIndent(m, "", "\t")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, manifest.Name), append(js, '\n'), 0o644) //nolint:gosec // G306: a committed source file
}

// compare fails when the committed manifest or artifacts are not what the
// source builds now.
func compare(out string, fresh manifest.Manifest) error {
	stale := func(what, why string) error {
		return fmt.Errorf("helpers/%s is stale: run make generate (%s)", filepath.ToSlash(filepath.Join(filepath.Base(out), what)), why)
	}
	raw, err := os.ReadFile(filepath.Join(out, manifest.Name))
	if err != nil {
		return stale(manifest.Name, err.Error())
	}
	old, err := manifest.Parse(raw)
	if err != nil {
		return stale(manifest.Name, err.Error())
	}
	if old.Go != fresh.Go {
		return fmt.Errorf("helpers/%s was generated by %s and this is %s: a build is reproducible only with the same Go release, so check with GOTOOLCHAIN=%s, or run make generate to rebuild the helpers with %s", filepath.ToSlash(filepath.Join(filepath.Base(out), manifest.Name)), old.Go, fresh.Go, old.Go, fresh.Go)
	}
	if len(old.Helpers) != len(fresh.Helpers) {
		return stale(manifest.Name, fmt.Sprintf("it lists %d artifacts, the generator makes %d", len(old.Helpers), len(fresh.Helpers)))
	}
	for i, f := range fresh.Helpers {
		o := old.Helpers[i]
		if o != f {
			return stale(f.File, fmt.Sprintf("the manifest says %+v, the source builds %+v", o, f))
		}
		gz, err := os.ReadFile(filepath.Join(out, f.File))
		if err != nil {
			return stale(f.File, err.Error())
		}
		zr, err := gzip.NewReader(bytes.NewReader(gz))
		if err != nil {
			return stale(f.File, err.Error())
		}
		// One byte past the size expected tells a longer artifact from the
		// right one without inflating all of it.
		h := sha256.New()
		n, err := io.Copy(h, io.LimitReader(zr, f.Size+1))
		if err != nil {
			return stale(f.File, err.Error())
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != f.SHA256 || n != f.Size {
			return stale(f.File, fmt.Sprintf("it holds %d bytes of sha256 %s, the source builds %d bytes of sha256 %s", n, got, f.Size, f.SHA256))
		}
	}
	return nil
}

func goEnv(name string) (string, error) {
	b, err := exec.Command("go", "env", name).Output()
	if err != nil {
		return "", fmt.Errorf("go env %s: %w", name, err)
	}
	return strings.TrimSpace(string(b)), nil
}
