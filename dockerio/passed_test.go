package dockerio

import (
	"archive/tar"
	"os"
	"slices"
	"testing"

	"github.com/stockade/stockade/spec"
)

// TestPassedDirs: the directories an extraction passes through without
// making them itself (the destination's components, each parent no earlier
// entry made, a hardlink target and its parents), shortest first; one the
// archive made before is not read back; nothing under the archive's own
// links is taken.
func TestPassedDirs(t *testing.T) {
	for _, tc := range []struct {
		name string
		dst  string
		hs   []tar.Header
		want []string
	}{
		{"files at the root", WorkspaceDir + "/work", []tar.Header{{Typeflag: tar.TypeReg, Name: "a"}}, []string{"/workspace/work"}},
		{"implied parents", WorkspaceDir + "/work/x", []tar.Header{{Typeflag: tar.TypeReg, Name: "w/.stockade/f"}},
			[]string{"/workspace/work", "/workspace/work/x", "/workspace/work/x/w", "/workspace/work/x/w/.stockade"}},
		{"made first", WorkspaceDir + "/work", []tar.Header{{Typeflag: tar.TypeDir, Name: "w/"}, {Typeflag: tar.TypeReg, Name: "w/f"}}, []string{"/workspace/work"}},
		{"made after", WorkspaceDir + "/work", []tar.Header{{Typeflag: tar.TypeReg, Name: "w/f"}, {Typeflag: tar.TypeDir, Name: "w/"}}, []string{"/workspace/work", "/workspace/work/w"}},
		{"a hardlink's target", WorkspaceDir + "/work", []tar.Header{{Typeflag: tar.TypeLink, Name: "h", Linkname: "d/t"}}, []string{"/workspace/work", "/workspace/work/d", "/workspace/work/d/t"}},
		{"a hardlink to an earlier file", WorkspaceDir + "/work", []tar.Header{{Typeflag: tar.TypeReg, Name: "t"}, {Typeflag: tar.TypeLink, Name: "h", Linkname: "t"}}, []string{"/workspace/work"}},
		{"under the archive's own link", WorkspaceDir + "/work", []tar.Header{{Typeflag: tar.TypeSymlink, Name: "s", Linkname: "real"}, {Typeflag: tar.TypeReg, Name: "s/hello"}}, nil},
		{"a hardlink through the archive's own link", WorkspaceDir + "/work", []tar.Header{{Typeflag: tar.TypeSymlink, Name: "s", Linkname: "real"}, {Typeflag: tar.TypeLink, Name: "h", Linkname: "s/x"}}, nil},
		{"a hardlink to the archive's own link", WorkspaceDir + "/work", []tar.Header{{Typeflag: tar.TypeSymlink, Name: "s", Linkname: "/"}, {Typeflag: tar.TypeLink, Name: "h", Linkname: "s"}}, nil},
		{"the workspace itself", WorkspaceDir, []tar.Header{{Typeflag: tar.TypeReg, Name: ".rollback-3/f"}}, []string{"/workspace/.rollback-3"}},
	} {
		f, err := os.CreateTemp(t.TempDir(), "put-*.tar")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(markerTarOf(t, tc.hs...)); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Seek(0, 0); err != nil {
			t.Fatal(err)
		}
		got, err := passedDirs(f, tc.dst)
		if tc.want == nil {
			if !spec.IsCode(err, spec.CodeInvalidArgument) {
				t.Errorf("%s: %q %v, want invalid_argument", tc.name, got, err)
			}
			_ = f.Close()
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q %v, want %q", tc.name, got, err, tc.want)
		}
		if off, _ := f.Seek(0, 1); off != 0 {
			t.Errorf("%s: the spool is left at %d, not rewound", tc.name, off)
		}
		_ = f.Close()
	}
}
