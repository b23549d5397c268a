package helpers

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"

	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/helpers/internal/manifest"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/warden/wire"
)

// Helper is one of the static programs a runtime ships into Docker.
type Helper struct {
	// Name is its file name.
	Name string
	// Env names the variable that overrides the embedded binary.
	Env string
	// Pkg is its source package, for messages saying how to build one.
	Pkg string
	// Version is what `NAME version` prints: the protocol this runtime
	// speaks with it.
	Version string
	// gz is the embedded artifact of this GOARCH ("" when none is).
	gz string
}

var (
	// Warden is stockade-warden, every sandbox's process supervisor.
	Warden = Helper{Name: "stockade-warden", Env: "STOCKADE_WARDEN", Pkg: "./cmd/warden", Version: wire.Version, gz: wardenGz}
	// Egress is stockade-egress, the allowlist network's proxy.
	Egress = Helper{Name: "stockade-egress", Env: "STOCKADE_EGRESS", Pkg: "./cmd/egress", Version: egress.ProtocolVersion, gz: egressGz}
)

// Source says where a Binary came from.
type Source string

const (
	// FromOption: the path the caller named (Options.WardenBinary).
	FromOption Source = "option"
	// FromEnv: the helper's variable ($STOCKADE_WARDEN).
	FromEnv Source = "env"
	// FromEmbedded: the artifact embedded in this program.
	FromEmbedded Source = "embedded"
)

// Binary is a resolved helper: a file whose content was checked, read again
// and verified at each use.
type Binary struct {
	Helper Helper `json:"-"`
	Source Source `json:"source"`
	// Path is the file: the named one, or where the embedded artifact is
	// installed.
	Path string `json:"path"`
	// SHA256 (hex) and Size are the content Bytes accepts.
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	// Version is the protocol version it speaks.
	Version string `json:"version"`
	// GoVersion is the Go release that built an embedded binary ("" for a
	// named file).
	GoVersion string `json:"go_version,omitempty"`
}

// DigestError is a helper file whose content is not the one checked: it
// changed after it was (the sha256 differs) or it is gone.
type DigestError struct {
	Path string
	// Want is the expected sha256; Got the file's ("" when unreadable).
	Want, Got string
	// Err is why the file could not be read, if it could not.
	Err error
}

func (e *DigestError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %v (want sha256 %s)", e.Path, e.Err, e.Want)
	}
	return fmt.Sprintf("%s: sha256 %s, want %s: the file changed after it was checked", e.Path, e.Got, e.Want)
}

func (e *DigestError) Unwrap() error { return e.Err }

// Resolve finds h and makes its file ready: explicit (Options.WardenBinary) if
// not "", else $ENV if set, else the embedded artifact, installed under dir
// (see Dir) if it is not there yet. A named file must be a static Linux
// executable whose `version` prints h.Version (unsupported otherwise;
// not_found when missing). Without a name on a GOARCH with no artifact the
// error is not_found and says how to point $ENV at a build.
func Resolve(h Helper, explicit, dir string) (*Binary, error) {
	b, err := Locate(h, explicit, dir)
	if err != nil {
		return nil, err
	}
	if b.Source != FromEmbedded {
		return b, nil
	}
	// A file of the right size is taken as installed; Bytes verifies its
	// content before every use, and heals it.
	if st, err := os.Stat(b.Path); err == nil && st.Mode().IsRegular() && st.Size() == b.Size {
		return b, nil
	}
	if _, err := b.install(); err != nil {
		return nil, err
	}
	return b, nil
}

// Locate is Resolve without installing: for an embedded helper, Path is
// where the file is (or will be) and nothing is written. A named file is
// checked as Resolve checks it.
func Locate(h Helper, explicit, dir string) (*Binary, error) {
	src := FromOption
	if explicit == "" {
		explicit, src = os.Getenv(h.Env), FromEnv
	}
	if explicit != "" {
		return checkFile(h, explicit, src)
	}
	e, err := embedded(h)
	if err != nil {
		return nil, err
	}
	if dir == "" {
		return nil, spec.Errorf(spec.CodeInvalidArgument, h.Name, "no directory to install the embedded %s in", h.Name)
	}
	return &Binary{
		Helper: h, Source: FromEmbedded,
		Path:   filepath.Join(dir, "sha256-"+e.SHA256, h.Name),
		SHA256: e.SHA256, Size: e.Size, Version: e.Version, GoVersion: goVersion(),
	}, nil
}

// Bytes returns the binary's content after checking its sha256: the copy
// into a sandbox takes these bytes, never unverified ones. An installed
// embedded binary that is missing or altered is rewritten from the embedded
// copy; a named file that is is refused (unsupported, with a *DigestError).
func (b *Binary) Bytes() ([]byte, error) {
	bin, err := readVerified(b.Path, b.SHA256, b.Size)
	if err == nil {
		return bin, nil
	}
	if b.Source != FromEmbedded {
		return nil, spec.Wrap(spec.CodeUnsupported, b.Helper.Name, err, "refusing to deliver %s (from %s); restart the runtime to check it again", b.Helper.Name, b.Source)
	}
	return b.install()
}

// Verify checks the file without healing it: nil when Bytes would return
// it as it is, a *DigestError otherwise.
func (b *Binary) Verify() error {
	_, err := readVerified(b.Path, b.SHA256, b.Size)
	return err
}

func readVerified(path, want string, size int64) ([]byte, error) {
	// Not through a symlink, and not blocking on a FIFO someone left in
	// its place: only a regular file is read.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, &DigestError{Path: path, Want: want, Err: err}
	}
	defer func() { _ = f.Close() }() // only read
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		if err == nil {
			err = fmt.Errorf("not a regular file (%v)", st.Mode().Type())
		}
		return nil, &DigestError{Path: path, Want: want, Err: err}
	}
	// One byte more than expected tells a longer file from the right one;
	// the buffer is allocated once, at the size expected.
	bin := make([]byte, size+1)
	n, err := io.ReadFull(f, bin)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, &DigestError{Path: path, Want: want, Err: err}
	}
	bin = bin[:n]
	sum := sha256.Sum256(bin)
	if got := hex.EncodeToString(sum[:]); got != want || int64(n) != size {
		return nil, &DigestError{Path: path, Want: want, Got: got}
	}
	return bin, nil
}

// install decompresses the embedded artifact, checks it against the
// manifest and writes it to b.Path: a temporary file in the same directory
// renamed over it, so a reader sees the whole file or none, and concurrent
// installers (the same name holds the same bytes) cannot interleave.
func (b *Binary) install() ([]byte, error) {
	bin, err := decompress(b.Helper)
	if err != nil {
		return nil, err
	}
	fail := func(err error) ([]byte, error) {
		return nil, spec.Wrap(spec.CodeUnsupported, b.Helper.Name, err, "installing the embedded %s at %s", b.Helper.Name, b.Path)
	}
	dir := filepath.Dir(b.Path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fail(err)
	}
	f, err := os.CreateTemp(dir, "."+b.Helper.Name+"-*")
	if err != nil {
		return fail(err)
	}
	tmp := f.Name()
	_, err = f.Write(bin)
	if err == nil {
		err = f.Chmod(0o500)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, b.Path)
	}
	if err != nil {
		_ = os.Remove(tmp) // err is the one reported
		return fail(err)
	}
	return bin, nil
}

var (
	manifestOnce sync.Once
	manifestData manifest.Manifest
	manifestErr  error
)

// embedded returns the manifest's entry for h on this GOARCH.
func embedded(h Helper) (manifest.Entry, error) {
	manifestOnce.Do(func() { manifestData, manifestErr = manifest.Parse(manifestJSON) })
	if manifestErr != nil {
		return manifest.Entry{}, spec.Wrap(spec.CodeInternal, h.Name, manifestErr, "the embedded helper manifest")
	}
	e, ok := manifestData.Lookup(h.Name, "linux", runtime.GOARCH)
	if !ok || h.gz == "" {
		return manifest.Entry{}, spec.Errorf(spec.CodeNotFound, h.Name, "no %s is embedded for GOARCH %s (only amd64 and arm64 are): build a static one for the daemon's platform and point $%s at it (CGO_ENABLED=0 GOOS=linux go build -o %s %s)", h.Name, runtime.GOARCH, h.Env, h.Name, h.Pkg)
	}
	if e.Version != h.Version {
		return manifest.Entry{}, spec.Errorf(spec.CodeInternal, h.Name, "the embedded %s speaks %q, this runtime %q: the artifacts are stale (make generate)", h.Name, e.Version, h.Version)
	}
	return e, nil
}

func goVersion() string { return manifestData.Go }

// decompress returns h's embedded binary, checked against the manifest.
func decompress(h Helper) ([]byte, error) {
	e, err := embedded(h)
	if err != nil {
		return nil, err
	}
	zr, err := gzip.NewReader(strings.NewReader(h.gz))
	if err != nil {
		return nil, spec.Wrap(spec.CodeInternal, h.Name, err, "decompressing the embedded %s", h.Name)
	}
	var buf bytes.Buffer
	buf.Grow(int(e.Size))
	if _, err := io.Copy(&buf, io.LimitReader(zr, e.Size+1)); err != nil {
		return nil, spec.Wrap(spec.CodeInternal, h.Name, err, "decompressing the embedded %s", h.Name)
	}
	sum := sha256.Sum256(buf.Bytes())
	if got := hex.EncodeToString(sum[:]); got != e.SHA256 || int64(buf.Len()) != e.Size {
		return nil, spec.Errorf(spec.CodeInternal, h.Name, "the embedded %s has sha256 %s, its manifest says %s", h.Name, got, e.SHA256)
	}
	return buf.Bytes(), nil
}
