package dockerio

import (
	"testing"

	"github.com/stockade/stockade/spec"
)

// TestArchivePathReserved: the warden's directory is refused in either
// form of a workspace path, relative or absolute.
func TestArchivePathReserved(t *testing.T) {
	for _, p := range []string{spec.ReservedDir, "/workspace/" + spec.ReservedDir, "/workspace/" + spec.ReservedDir + "/x", "./" + spec.ReservedDir, "work/../" + spec.ReservedDir} {
		if _, err := archivePath(p); !spec.IsCode(err, spec.CodeInvalidArgument) {
			t.Errorf("archivePath(%q): %v, want invalid_argument (reserved)", p, err)
		}
	}
	for p, want := range map[string]string{"work": "/workspace/work", "/workspace/work/a": "/workspace/work/a", "/workspace": "/workspace"} {
		if got, err := archivePath(p); err != nil || got != want {
			t.Errorf("archivePath(%q): %q %v, want %q", p, got, err, want)
		}
	}
}
