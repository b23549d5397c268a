package core

import (
	"path/filepath"
	"testing"

	"github.com/stockade/stockade/spec"
)

// TestNamedEgressMissingFailsOpen: a proxy named by the option or by
// $STOCKADE_EGRESS that is not there fails Open (not_found, naming it), as a
// named warden does; only an unnamed, unavailable proxy means "allowlist
// sandboxes are refused".
func TestNamedEgressMissingFailsOpen(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-egress")
	journal := filepath.Join(t.TempDir(), "journal.db")
	for _, tc := range []struct {
		name string
		opts Options
		env  string
	}{
		{"option", Options{Journal: journal, EgressBinary: missing}, ""},
		{"variable", Options{Journal: journal}, missing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("STOCKADE_EGRESS", tc.env)
			_, closeEngine, err := engineFor(tc.opts)
			if closeEngine != nil {
				_ = closeEngine()
			}
			if !spec.IsCode(err, spec.CodeNotFound) {
				t.Fatalf("engineFor with the egress proxy named at a missing %s: %v, want not_found", missing, err)
			}
		})
	}
}
