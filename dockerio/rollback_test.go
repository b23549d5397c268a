package dockerio

import (
	"archive/tar"
	"bytes"
	"testing"
	"time"
)

// markerTarOf is a tar stream of the given headers (each with no data).
func markerTarOf(t testing.TB, hs ...tar.Header) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for i := range hs {
		if err := tw.WriteHeader(&hs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestMarkerIn: only root's empty directory of the marker's name and
// mtime is the proof; what the sandbox's user can make (its own directory,
// a file, a link, root's directory of an earlier rollback renamed, one
// with something in it) is not.
func TestMarkerIn(t *testing.T) {
	const m = MarkerPrefix + "00aa"
	at := MarkerTime(m)
	dir := tar.Header{Typeflag: tar.TypeDir, Name: m + "/", Mode: 0o755, ModTime: at}
	for _, tc := range []struct {
		name string
		hs   []tar.Header
		want bool
	}{
		{"root's marker", []tar.Header{dir}, true},
		{"the user's directory", []tar.Header{func() tar.Header { h := dir; h.Uid = 65532; return h }()}, false},
		{"another mtime (an earlier marker renamed)", []tar.Header{func() tar.Header { h := dir; h.ModTime = at.Add(time.Second); return h }()}, false},
		{"a file", []tar.Header{func() tar.Header { h := dir; h.Typeflag, h.Name = tar.TypeReg, m; return h }()}, false},
		{"a link", []tar.Header{func() tar.Header { h := dir; h.Typeflag, h.Name, h.Linkname = tar.TypeSymlink, m, "/"; return h }()}, false},
		{"another name", []tar.Header{func() tar.Header { h := dir; h.Name = MarkerPrefix + "00ab/"; return h }()}, false},
		{"something in it", []tar.Header{dir, {Typeflag: tar.TypeReg, Name: m + "/x", Mode: 0o644, ModTime: at}}, false},
		{"nothing", nil, false},
	} {
		ok, err := markerIn(tar.NewReader(bytes.NewReader(markerTarOf(t, tc.hs...))), m)
		if err != nil || ok != tc.want {
			t.Errorf("%s: %v %v, want %v", tc.name, ok, err, tc.want)
		}
	}
	if _, err := markerIn(tar.NewReader(bytes.NewReader([]byte("not a tar stream, but long enough to be read as a header block........"))), m); err == nil {
		t.Error("a stream that is no tar: no error")
	}
}

// FuzzMarkerIn: the proof reader takes any stream the daemon hands back
// (its content is the workspace's, the user's) without panicking, and
// never passes one whose first entry is not root's directory.
func FuzzMarkerIn(f *testing.F) {
	const m = MarkerPrefix + "00aa"
	f.Add(markerTarOf(f, tar.Header{Typeflag: tar.TypeDir, Name: m + "/", Mode: 0o755, ModTime: MarkerTime(m)}))
	f.Add(markerTarOf(f, tar.Header{Typeflag: tar.TypeReg, Name: m, Mode: 0o644, Uid: 65532}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		ok, _ := markerIn(tar.NewReader(bytes.NewReader(b)), m)
		if !ok {
			return
		}
		h, err := tar.NewReader(bytes.NewReader(b)).Next()
		if err != nil || h.Typeflag != tar.TypeDir || h.Uid != 0 {
			t.Fatalf("passed a stream whose first entry is %+v (%v)", h, err)
		}
	})
}
