package helpers

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/stockade/stockade/spec"
)

// maxSize bounds the file read (a static Go binary is a few MiB).
const maxSize = 64 << 20

// checkFile checks a named helper: there (not_found otherwise), a static
// Linux executable (no interpreter: the sandbox's image need not have a
// libc) whose `version` prints h.Version (unsupported otherwise).
func checkFile(h Helper, p string, src Source) (*Binary, error) {
	bad := func(format string, args ...any) (*Binary, error) {
		return nil, spec.Errorf(spec.CodeUnsupported, h.Name, "%s: %s", p, fmt.Sprintf(format, args...))
	}
	st, err := os.Stat(p)
	if err != nil {
		by := "the option"
		if src == FromEnv {
			by = "$" + h.Env
		}
		return nil, spec.Errorf(spec.CodeNotFound, h.Name, "%s not found at %s (named by %s): build one (CGO_ENABLED=0 go build -o %s %s), or name none to use the embedded one", h.Name, p, by, h.Name, h.Pkg)
	}
	if !st.Mode().IsRegular() || st.Size() > maxSize {
		return bad("not a regular file of at most %d bytes", maxSize)
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
			return bad("`%s version` failed: %v: %s", h.Name, err, bytes.TrimSpace(ee.Stderr))
		}
		return bad("`%s version` failed: %v", h.Name, err)
	}
	if v := strings.TrimSpace(string(out)); v != h.Version {
		return bad("version %q, this runtime speaks %q: rebuild it from the same source (CGO_ENABLED=0 go build -o %s %s)", v, h.Version, h.Name, h.Pkg)
	}
	sum := sha256.Sum256(bin)
	return &Binary{Helper: h, Source: src, Path: p, SHA256: hex.EncodeToString(sum[:]), Size: int64(len(bin)), Version: h.Version}, nil
}
