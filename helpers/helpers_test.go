package helpers

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stockade/stockade/helpers/internal/manifest"
	"github.com/stockade/stockade/spec"
)

// noOverrides clears the helpers' variables, so the embedded copy is used.
func noOverrides(t *testing.T) {
	t.Setenv(Warden.Env, "")
	t.Setenv(Egress.Env, "")
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestManifestMatchesArtifacts: every committed artifact decompresses to
// the sha256 and size its manifest entry says, every platform is there, and
// the versions are this source's: a helper changed without make generate
// (its protocol version bumped) fails here.
func TestManifestMatchesArtifacts(t *testing.T) {
	m, err := manifest.Parse(manifestJSON)
	if err != nil {
		t.Fatal(err)
	}
	if want := 4; len(m.Helpers) != want {
		t.Fatalf("manifest lists %d artifacts, want %d", len(m.Helpers), want)
	}
	for _, h := range []Helper{Warden, Egress} {
		for _, arch := range []string{"amd64", "arm64"} {
			e, ok := m.Lookup(h.Name, "linux", arch)
			if !ok {
				t.Errorf("no %s for linux/%s in the manifest", h.Name, arch)
				continue
			}
			if e.Version != h.Version {
				t.Errorf("%s: manifest version %q, the source's %q: run make generate", e.File, e.Version, h.Version)
			}
			gz, err := os.ReadFile(filepath.Join("bin", e.File))
			if err != nil {
				t.Fatal(err)
			}
			bin := gunzip(t, gz)
			if got := digest(bin); got != e.SHA256 || int64(len(bin)) != e.Size {
				t.Errorf("%s: %d bytes of sha256 %s, manifest says %d bytes of %s", e.File, len(bin), got, e.Size, e.SHA256)
			}
			f, err := elf.NewFile(bytes.NewReader(bin))
			if err != nil {
				t.Fatalf("%s: %v", e.File, err)
			}
			if want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]; f.Machine != want {
				t.Errorf("%s: machine %v, want %v", e.File, f.Machine, want)
			}
			for _, p := range f.Progs {
				if p.Type == elf.PT_INTERP {
					t.Errorf("%s is dynamically linked", e.File)
				}
			}
		}
	}
}

func gunzip(t *testing.T, gz []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	if zr.Name != "" || !zr.ModTime.IsZero() {
		t.Errorf("gzip header carries name %q, time %v: the artifact would depend on the build", zr.Name, zr.ModTime)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// embeddedHere skips a test that needs this GOARCH's artifacts where none
// are embedded.
func embeddedHere(t *testing.T) {
	t.Helper()
	if Warden.gz == "" {
		t.Skipf("no helpers are embedded for GOARCH %s", runtime.GOARCH)
	}
}

// TestEmbeddedBytesMatchManifest: the bytes this program embeds are the
// manifest's.
func TestEmbeddedBytesMatchManifest(t *testing.T) {
	embeddedHere(t)
	for _, h := range []Helper{Warden, Egress} {
		e, err := embedded(h)
		if err != nil {
			t.Fatal(err)
		}
		bin, err := decompress(h)
		if err != nil {
			t.Fatal(err)
		}
		if got := digest(bin); got != e.SHA256 {
			t.Errorf("%s: embedded sha256 %s, manifest %s", h.Name, got, e.SHA256)
		}
	}
}

// TestNothingEmbedded: a GOARCH without artifacts says so and names the
// variable to set.
func TestNothingEmbedded(t *testing.T) {
	noOverrides(t)
	h := Warden
	h.gz = ""
	_, err := Resolve(h, "", t.TempDir())
	if !spec.IsCode(err, spec.CodeNotFound) || !strings.Contains(err.Error(), "$STOCKADE_WARDEN") || !strings.Contains(err.Error(), runtime.GOARCH) {
		t.Fatalf("Resolve with nothing embedded: %v, want not_found naming $STOCKADE_WARDEN and %s", err, runtime.GOARCH)
	}
}

// TestInstall: the embedded binary is written once, to a content-addressed
// file (0500 in 0700 directories) that later resolutions take as it is,
// and Bytes returns exactly the manifest's content.
func TestInstall(t *testing.T) {
	embeddedHere(t)
	noOverrides(t)
	dir := filepath.Join(t.TempDir(), "helpers")
	for _, h := range []Helper{Warden, Egress} {
		b, err := Resolve(h, "", dir)
		if err != nil {
			t.Fatal(err)
		}
		e, _ := embedded(h)
		if want := filepath.Join(dir, "sha256-"+e.SHA256, h.Name); b.Path != want || b.Source != FromEmbedded || b.SHA256 != e.SHA256 || b.Version != h.Version || b.GoVersion == "" {
			t.Fatalf("Resolve: %+v, want path %s from embedded", b, want)
		}
		st, err := os.Stat(b.Path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o500 {
			t.Errorf("%s: mode %v, want 0500", b.Path, st.Mode())
		}
		for _, d := range []string{dir, filepath.Dir(b.Path)} {
			if st, err := os.Stat(d); err != nil || st.Mode().Perm() != 0o700 {
				t.Errorf("%s: %v %v, want a 0700 directory", d, st.Mode(), err)
			}
		}
		again, err := Resolve(h, "", dir)
		if err != nil {
			t.Fatal(err)
		}
		st2, _ := os.Stat(b.Path)
		if *again != *b || !os.SameFile(st, st2) || !st2.ModTime().Equal(st.ModTime()) {
			t.Errorf("a second Resolve rewrote or moved the file: %+v vs %+v", again, b)
		}
		bin, err := b.Bytes()
		if err != nil || digest(bin) != e.SHA256 {
			t.Fatalf("Bytes: %d bytes of %s, %v; want %s", len(bin), digest(bin), err, e.SHA256)
		}
		if err := b.Verify(); err != nil {
			t.Errorf("Verify of an intact file: %v", err)
		}
		ents, _ := os.ReadDir(filepath.Dir(b.Path))
		if len(ents) != 1 {
			t.Errorf("%s holds %d entries, want the binary alone", filepath.Dir(b.Path), len(ents))
		}
	}
}

// TestInstallConcurrent: runtimes sharing a state directory install and read
// the same file at once; every one gets the right bytes, and no temporary
// file is left.
func TestInstallConcurrent(t *testing.T) {
	embeddedHere(t)
	noOverrides(t)
	dir := t.TempDir()
	e, _ := embedded(Warden)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := Locate(Warden, "", dir)
			if err == nil {
				// Bytes installs a missing file: all of them race to.
				var bin []byte
				if bin, err = b.Bytes(); err == nil && digest(bin) != e.SHA256 {
					err = errors.New("wrong bytes")
				}
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "sha256-"+e.SHA256))
	if len(ents) != 1 {
		t.Errorf("%d entries left in the install directory, want 1", len(ents))
	}
}

// TestTamperedEmbeddedHealed: an installed file that changed (other
// content of the same size, a longer or shorter file, none) is caught
// before the copy and rewritten from the embedded copy.
func TestTamperedEmbeddedHealed(t *testing.T) {
	embeddedHere(t)
	noOverrides(t)
	e, _ := embedded(Warden)
	for _, tc := range []struct {
		name   string
		tamper func(path string, orig []byte) error
	}{
		{"same size", func(p string, orig []byte) error {
			bad := bytes.Clone(orig)
			bad[len(bad)/2] ^= 0xff
			return os.WriteFile(p, bad, 0o700)
		}},
		{"longer", func(p string, orig []byte) error { return os.WriteFile(p, append(bytes.Clone(orig), 0), 0o700) }},
		{"shorter", func(p string, orig []byte) error { return os.WriteFile(p, orig[:len(orig)-1], 0o700) }},
		{"empty", func(p string, _ []byte) error { return os.WriteFile(p, nil, 0o700) }},
		{"removed", func(p string, _ []byte) error { return os.Remove(p) }},
		// A FIFO in its place must not hang the read (nobody writes it).
		{"fifo", func(p string, _ []byte) error {
			if err := os.Remove(p); err != nil {
				return err
			}
			return syscall.Mkfifo(p, 0o600)
		}},
		// A symlink to the right bytes elsewhere is not the installed file.
		{"symlink", func(p string, orig []byte) error {
			elsewhere := filepath.Join(filepath.Dir(filepath.Dir(p)), "elsewhere")
			if err := os.WriteFile(elsewhere, orig, 0o700); err != nil {
				return err
			}
			if err := os.Remove(p); err != nil {
				return err
			}
			return os.Symlink(elsewhere, p)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Resolve(Warden, "", t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			orig, err := b.Bytes()
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(b.Path, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := tc.tamper(b.Path, orig); err != nil {
				t.Fatal(err)
			}
			var de *DigestError
			if err := b.Verify(); !errors.As(err, &de) || de.Path != b.Path {
				t.Fatalf("Verify of a tampered file: %v, want a *DigestError naming %s", err, b.Path)
			}
			bin, err := b.Bytes()
			if err != nil || digest(bin) != e.SHA256 {
				t.Fatalf("Bytes after tampering: sha256 %s, %v; want the embedded %s", digest(bin), err, e.SHA256)
			}
			if err := b.Verify(); err != nil {
				t.Errorf("the file was not healed: %v", err)
			}
		})
	}
}

// installed returns a runnable copy of h's embedded binary at a fresh path,
// for the tests of named files.
func installed(t *testing.T, h Helper) string {
	t.Helper()
	embeddedHere(t)
	if runtime.GOOS != "linux" {
		t.Skip("a named helper is run (`version`) on the host: Linux only")
	}
	bin, err := decompress(h)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), h.Name)
	if err := os.WriteFile(p, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestNamedFile: the option wins over the variable, which wins over the
// embedded copy; a named file is checked (there, static ELF, this version)
// and a bad one refused with the right code.
func TestNamedFile(t *testing.T) {
	good := installed(t, Warden)
	egressBin := installed(t, Egress) // static, but speaks another version
	text := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(text, []byte("#!/bin/sh\necho stockade-warden/3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	dynamic := ""
	for _, p := range []string{"/bin/sh", "/bin/true", "/usr/bin/env"} {
		if f, err := elf.Open(p); err == nil {
			for _, prog := range f.Progs {
				if prog.Type == elf.PT_INTERP {
					dynamic = p
				}
			}
			_ = f.Close() // only read
		}
		if dynamic != "" {
			break
		}
	}
	for _, tc := range []struct {
		name, option, env string
		source            Source
		code              spec.Code
		says              string
	}{
		{name: "option", option: good, source: FromOption},
		{name: "option over variable", option: good, env: egressBin, source: FromOption},
		{name: "variable", env: good, source: FromEnv},
		{name: "embedded", source: FromEmbedded},
		{name: "missing", option: filepath.Join(t.TempDir(), "none"), code: spec.CodeNotFound, says: "the option"},
		{name: "missing by variable", env: filepath.Join(t.TempDir(), "none"), code: spec.CodeNotFound, says: "$STOCKADE_WARDEN"},
		{name: "wrong version", option: egressBin, code: spec.CodeUnsupported, says: "this runtime speaks"},
		{name: "not ELF", option: text, code: spec.CodeUnsupported, says: "not an ELF"},
		{name: "directory", option: t.TempDir(), code: spec.CodeUnsupported, says: "regular file"},
		{name: "dynamic", option: dynamic, code: spec.CodeUnsupported, says: "dynamically linked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "dynamic" && dynamic == "" {
				t.Skip("no dynamically linked executable found on this host")
			}
			t.Setenv(Warden.Env, tc.env)
			b, err := Resolve(Warden, tc.option, t.TempDir())
			if tc.code != "" {
				if !spec.IsCode(err, tc.code) || !strings.Contains(err.Error(), tc.says) {
					t.Fatalf("Resolve: %v, want %s saying %q", err, tc.code, tc.says)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b.Source != tc.source || b.Version != Warden.Version {
				t.Fatalf("Resolve: %+v, want source %s", b, tc.source)
			}
			if _, err := b.Bytes(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestNamedFileTampered: a named file that changes after its check is
// refused before the next copy (unsupported, a *DigestError naming it),
// never delivered, and left as it is.
func TestNamedFileTampered(t *testing.T) {
	p := installed(t, Warden)
	b, err := Resolve(Warden, p, "")
	if err != nil {
		t.Fatal(err)
	}
	orig, err := b.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(orig)
	bad[100] ^= 1
	if err := os.WriteFile(p, bad, 0o755); err != nil {
		t.Fatal(err)
	}
	bin, err := b.Bytes()
	var de *DigestError
	if bin != nil || !spec.IsCode(err, spec.CodeUnsupported) || !errors.As(err, &de) || de.Path != p || de.Want != b.SHA256 || de.Got != digest(bad) {
		t.Fatalf("Bytes of a changed named file: %d bytes, %v; want unsupported with a *DigestError naming %s", len(bin), err, p)
	}
	if now, _ := os.ReadFile(p); !bytes.Equal(now, bad) {
		t.Error("a named file was rewritten: only embedded ones are healed")
	}
}

// BenchmarkBytes: what verifying the warden costs each copy into a sandbox
// (read and sha256 of the installed file), against the first use's
// decompression and install.
func BenchmarkBytes(b *testing.B) {
	if Warden.gz == "" {
		b.Skip("nothing embedded for this GOARCH")
	}
	b.Setenv(Warden.Env, "")
	bin, err := Resolve(Warden, "", b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("verify", func(b *testing.B) {
		b.SetBytes(bin.Size)
		for b.Loop() {
			if _, err := bin.Bytes(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("install", func(b *testing.B) {
		b.SetBytes(bin.Size)
		for b.Loop() {
			if _, err := bin.install(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
