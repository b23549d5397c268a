package enginetest

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/spec"
)

// entry is one tar entry.
type entry struct {
	name string
	dir  bool
	mode int64
	data string
}

// tarOf builds an archive of entries.
func tarOf(t *testing.T, es ...entry) io.Reader {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Mode: e.mode, Typeflag: tar.TypeReg, Size: int64(len(e.data)), ModTime: time.Unix(1e9, 0)}
		if e.dir {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

// readTar reads an archive into entries by name, with their uid:gid.
func readTar(t *testing.T, rc io.ReadCloser) (map[string]entry, map[string]spec.User) {
	t.Helper()
	defer func() { _ = rc.Close() }() // only read
	es, owners := map[string]entry{}, map[string]spec.User{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return es, owners
		}
		if err != nil {
			t.Fatalf("reading the archive: %v", err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("reading %s: %v", h.Name, err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		es[name] = entry{name: name, dir: h.Typeflag == tar.TypeDir, mode: h.Mode & 0o777, data: string(b)}
		owners[name] = spec.User{UID: int64(h.Uid), GID: int64(h.Gid)}
	}
}

func testFiles(t *testing.T, v env) {
	ctx := ctxT(t)
	sb := v.create(t, spec.NetworkIsolated) // the export container serves files: no start needed
	put := tarOf(t,
		entry{name: "a.txt", mode: 0o640, data: "alpha"},
		entry{name: "d/", dir: true, mode: 0o750},
		entry{name: "d/b.txt", mode: 0o644, data: "beta\n"},
	)
	if err := v.e.PutArchive(ctx, sb, "work", put); err != nil {
		t.Fatalf("PutArchive: %v", err)
	}
	for _, tc := range []struct {
		path string
		want []entry
	}{
		{"work/a.txt", []entry{{name: "a.txt", mode: 0o640, data: "alpha"}}},
		{"work/d", []entry{{name: "d", dir: true, mode: 0o750}, {name: "d/b.txt", mode: 0o644, data: "beta\n"}}},
		{"work/./d/../d/b.txt", []entry{{name: "b.txt", mode: 0o644, data: "beta\n"}}},
	} {
		rc, err := v.e.GetArchive(ctx, sb, tc.path)
		if err != nil {
			t.Errorf("GetArchive(%s): %v", tc.path, err)
			continue
		}
		got, owners := readTar(t, rc)
		if len(got) != len(tc.want) {
			t.Errorf("GetArchive(%s): %+v, want %+v", tc.path, got, tc.want)
		}
		for _, w := range tc.want {
			if g, ok := got[w.name]; !ok || g != w {
				t.Errorf("GetArchive(%s): %s is %+v, want %+v", tc.path, w.name, g, w)
			}
			if u := owners[w.name]; u != sb.Spec.Policy.User {
				t.Errorf("GetArchive(%s): %s owned by %s, want the sandbox's %s", tc.path, w.name, u, sb.Spec.Policy.User)
			}
		}
	}
	// The whole workspace: entries named from "workspace/" on, its root
	// root's (the sandbox owns what is in it, not the volume's root).
	rc, err := v.e.GetArchive(ctx, sb, ".")
	if err != nil {
		t.Fatalf("GetArchive(.): %v", err)
	}
	got, owners := readTar(t, rc)
	if g := got["workspace/work/d/b.txt"]; g.data != "beta\n" {
		t.Errorf("GetArchive(.): %+v, want workspace/work/d/b.txt", got)
	}
	if g, u := got["workspace"], owners["workspace"]; !g.dir || u != (spec.User{}) {
		t.Errorf("GetArchive(.): the root is %+v owned by %s, want a directory owned by 0:0", g, u)
	}
	if u := owners["workspace/work"]; u != sb.Spec.Policy.User {
		t.Errorf("GetArchive(.): workspace/work owned by %s, want the sandbox's %s", u, sb.Spec.Policy.User)
	}
	_, err = v.e.GetArchive(ctx, sb, "work/missing")
	wantCode(t, "GetArchive of a missing path", err, spec.CodeNotFound)
	wantCode(t, "PutArchive into a missing directory", v.e.PutArchive(ctx, sb, "work/missing", tarOf(t, entry{name: "x", mode: 0o644})), spec.CodeNotFound)
	wantCode(t, "PutArchive outside the workspace", v.e.PutArchive(ctx, sb, "../etc", tarOf(t, entry{name: "x", mode: 0o644})), spec.CodeInvalidArgument)
	wantCode(t, "PutArchive of an entry climbing out", v.e.PutArchive(ctx, sb, "work", tarOf(t, entry{name: "../../x", mode: 0o644})), spec.CodeInvalidArgument)
	wantCode(t, "PutArchive into the warden's directory", v.e.PutArchive(ctx, sb, strings.TrimPrefix(dockerio.WardenDir, dockerio.WorkspaceDir+"/"), tarOf(t, entry{name: "x", mode: 0o644})), spec.CodeInvalidArgument)
	_, err = v.e.GetArchive(ctx, sb, "/etc/passwd")
	wantCode(t, "GetArchive of an absolute path", err, spec.CodeInvalidArgument)
}
