package stockade

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/warden"
)

// WardenBinary is the warden's file name.
const WardenBinary = "stockade-warden"

// WardenInfo says which warden binary a runtime delivers into its
// sandboxes, and what was checked of it.
type WardenInfo struct {
	Path    string
	Version string
	Size    int
}

// FindWarden locates the stockade-warden binary the way docker-init and
// containerd's shims are found: explicit (the path given, else
// $STOCKADE_WARDEN), then beside the running executable, then on PATH. It
// checks the file is a static Linux executable (no interpreter: the
// sandbox's image need not have a libc) of this runtime's version, and
// returns its bytes. A missing or wrong binary is one error that says where
// it looked and how to build one.
func FindWarden(path string) (WardenInfo, []byte, error) {
	return findBinary(wardenBinary, path)
}

// FindEgress locates the stockade-egress binary (the allowlist network's
// proxy) as FindWarden locates the warden: the path given, else
// $STOCKADE_EGRESS, beside the executable, on PATH.
func FindEgress(path string) (WardenInfo, []byte, error) {
	return findBinary(egressBinary, path)
}

// helperBinary is one of the static programs a runtime ships into Docker.
type helperBinary struct {
	name, env, pkg, version string
}

var (
	wardenBinary = helperBinary{name: WardenBinary, env: "STOCKADE_WARDEN", pkg: "./cmd/warden", version: warden.Version}
	egressBinary = helperBinary{name: EgressBinary, env: "STOCKADE_EGRESS", pkg: "./cmd/egress", version: egress.ProtocolVersion}
)

// EgressBinary is the egress proxy's file name.
const EgressBinary = "stockade-egress"

func findBinary(b helperBinary, path string) (WardenInfo, []byte, error) {
	var looked []string
	try := func(p string) (WardenInfo, []byte, error, bool) {
		looked = append(looked, p)
		st, err := os.Stat(p)
		if err != nil {
			return WardenInfo{}, nil, nil, false
		}
		info, bin, err := checkBinary(b, p, st)
		return info, bin, err, true
	}
	explicit := path
	if explicit == "" {
		explicit = os.Getenv(b.env)
	}
	if explicit != "" {
		info, bin, err, found := try(explicit)
		if !found {
			return WardenInfo{}, nil, spec.Errorf(spec.CodeNotFound, b.name, "%s not found at %s (named by the option or $%s); build it: make build, or CGO_ENABLED=0 go build -o %s %s", b.name, explicit, b.env, b.name, b.pkg)
		}
		return info, bin, err
	}
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			if info, bin, err, found := try(filepath.Join(filepath.Dir(exe), b.name)); found {
				return info, bin, err
			}
		}
	}
	if p, err := exec.LookPath(b.name); err == nil {
		if info, bin, err, found := try(p); found {
			return info, bin, err
		}
	} else {
		looked = append(looked, "$PATH")
	}
	return WardenInfo{}, nil, spec.Errorf(spec.CodeNotFound, b.name, "%s not found (looked at %s); build it beside stockade with make build, or point $%s at one (CGO_ENABLED=0 go build -o bin/%s %s)", b.name, strings.Join(looked, ", "), b.env, b.name, b.pkg)
}

// maxWardenSize bounds the file read (a static Go binary is a few MiB).
const maxWardenSize = 64 << 20

func checkBinary(b helperBinary, p string, st os.FileInfo) (WardenInfo, []byte, error) {
	bad := func(format string, args ...any) (WardenInfo, []byte, error) {
		return WardenInfo{}, nil, spec.Errorf(spec.CodeUnsupported, b.name, "%s: %s", p, fmt.Sprintf(format, args...))
	}
	if !st.Mode().IsRegular() || st.Size() > maxWardenSize {
		return bad("not a regular file of at most %d bytes", maxWardenSize)
	}
	bin, err := os.ReadFile(p)
	if err != nil {
		return bad("%v", err)
	}
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return bad("not an ELF executable: %v", err)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return bad("dynamically linked (it needs an interpreter the sandbox's image may not have); build it with CGO_ENABLED=0")
		}
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return bad("ELF type %v is not an executable", f.Type)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, p, "version").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return bad("`%s version` failed: %v: %s", b.name, err, bytes.TrimSpace(ee.Stderr))
		}
		return bad("`%s version` failed: %v", b.name, err)
	}
	if v := strings.TrimSpace(string(out)); v != b.version {
		return bad("version %q, this runtime speaks %q: rebuild it from the same source (make build)", v, b.version)
	}
	return WardenInfo{Path: p, Version: b.version, Size: len(bin)}, bin, nil
}
