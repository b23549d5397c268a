package spec

import "testing"

// TestWorkspaceRel: one rule for a workspace path, relative to /workspace
// or absolute under it; anything outside, or climbing out, is refused.
func TestWorkspaceRel(t *testing.T) {
	for _, tc := range []struct{ in, rel string }{
		{"work/out.txt", "work/out.txt"},
		{"/workspace/work/out.txt", "work/out.txt"},
		{"/workspace//work/./out.txt", "work/out.txt"},
		{"/workspace", "."},
		{"/workspace/", "."},
		{"", "."},
		{".", "."},
		{"work/../x", "x"},
		{"/workspace/work/../x", "x"},
		{"/etc/passwd", ""},
		{"/workspacex/y", ""},
		{"/workspace/../etc", ""},
		{"../etc", ""},
		{"work/../../etc", ""},
		{"/", ""},
		{"a\x00b", ""},
	} {
		rel, err := WorkspaceRel(tc.in)
		if tc.rel == "" {
			if !IsCode(err, CodeInvalidArgument) {
				t.Errorf("%q: %q %v, want invalid_argument", tc.in, rel, err)
			}
			continue
		}
		if err != nil || rel != tc.rel {
			t.Errorf("%q: %q %v, want %q", tc.in, rel, err, tc.rel)
		}
		abs, err := WorkspacePath(tc.in)
		want := WorkspaceDir + "/" + tc.rel
		if tc.rel == "." {
			want = WorkspaceDir
		}
		if err != nil || abs != want {
			t.Errorf("WorkspacePath(%q): %q %v, want %q", tc.in, abs, err, want)
		}
	}
}
