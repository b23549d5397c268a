package dockerio

import "testing"

// TestStagingName: a staging directory is one hidden entry of /workspace,
// never work, the warden's, or a path.
func TestStagingName(t *testing.T) {
	for name, ok := range map[string]bool{
		".rollback-20": true, ".rollback-1": true, ".x0x": true,
		"": false, "work": false, ".stockade": false, "rollback-2": false, ".": false, "..": false,
		".a/b": false, ".a\x00": false, "../.x": false,
	} {
		if got := stagingName(name) == nil; got != ok {
			t.Errorf("stagingName(%q) ok=%v, want %v", name, got, ok)
		}
	}
}
