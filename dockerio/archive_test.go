package dockerio

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/stockade/stockade/checkpoint"
	"github.com/stockade/stockade/profile"
	"github.com/stockade/stockade/spec"
)

// entry is one tar entry of a test archive.
type entry struct {
	typ  byte
	name string
	link string
	body string
	pax  map[string]string
}

func archive(t testing.TB, es ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := &tar.Header{Typeflag: e.typ, Name: e.name, Linkname: e.link, Mode: 0o644, Size: int64(len(e.body)), PAXRecords: e.pax}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func file(name, body string) entry   { return entry{typ: tar.TypeReg, name: name, body: body} }
func dir(name string) entry          { return entry{typ: tar.TypeDir, name: name} }
func symlink(name, to string) entry  { return entry{typ: tar.TypeSymlink, name: name, link: to} }
func hardlink(name, to string) entry { return entry{typ: tar.TypeLink, name: name, link: to} }

func TestDockerioArchiveRewrite(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []entry
		want    string // "" means accepted
	}{
		{"plain", []entry{dir("d/"), file("d/f", "x")}, ""},
		{"dotdot inside names", []entry{file("..foo", "x"), dir("a/"), file("a/..b", "y"), file("a/b..", "z"), file("...", "w")}, ""},
		{"dotdot that stays", []entry{file("a/../f", "x")}, ""},
		{"name escapes", []entry{file("ok", "x"), file("a/../../f", "y")}, `entry "a/../../f": its name leaves`},
		{"absolute name", []entry{file("/etc/passwd", "x")}, "its name leaves"},
		{"symlink inside", []entry{dir("a/"), symlink("a/l", "../f"), symlink("m", "a/l")}, ""},
		{"symlink to dotdot-named file", []entry{symlink("l", "..foo")}, ""},
		// Docker's extraction refuses a target whose own ".." leave the
		// destination (read lexically from the link's path).
		{"symlink escapes", []entry{file("ok", "x"), symlink("evil", "../../etc/x")}, `symlink target "../../etc/x" climbs out`},
		{"symlink escapes by one", []entry{dir("a/"), symlink("a/l", "../..")}, "climbs out"},
		// A link's target is data: absolute, or resolving outside through
		// other links, it is made as it is (nothing goes through it).
		{"symlink absolute", []entry{symlink("l", "/etc/passwd")}, ""},
		{"symlink through a symlink", []entry{symlink("a", "."), symlink("a/b", "../x")}, ""},
		{"symlink target through a symlink", []entry{symlink("a", "."), symlink("b", "a/../x")}, ""},
		{"entry through a chain of symlinks", []entry{dir("d/"), symlink("d/up", ".."), symlink("top", "d/up"), file("top/f", "x")}, ""},
		{"symlink loop", []entry{symlink("a", "b"), symlink("b", "a"), symlink("c", "a/x")}, ""},
		{"hardlink inside", []entry{file("f", "x"), hardlink("g", "f"), hardlink("h", "./d/../f")}, ""},
		{"hardlink escapes", []entry{file("ok", "x"), hardlink("evil", "../../etc/passwd")}, `hardlink target "../../etc/passwd" is not a path within`},
		{"hardlink absolute", []entry{hardlink("evil", "/etc/passwd")}, "not a path within"},
		{"hardlink through a symlink", []entry{symlink("up", "d/.."), dir("d/"), symlink("d/u", ".."), hardlink("evil", "d/u/../x")}, ""},
		// Docker cleans a hardlink target before link(2) sees it.
		{"hardlink cleaned as Docker cleans it", []entry{symlink("a", "."), hardlink("h", "a/../x")}, ""},
		{"hardlink through a symlink loop", []entry{symlink("a", "b"), symlink("b", "a"), hardlink("h", "a/x")}, "outside the destination (or loops)"},
		{"entry through a symlink loop", []entry{symlink("a", "b"), symlink("b", "a"), file("a/f", "x")}, "its directory resolves"},
		{"device", []entry{{typ: tar.TypeChar, name: "null"}}, "is not a file, directory or link"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := rewrite(io.Discard, bytes.NewReader(archive(t, tc.entries...)), spec.User{UID: 1000, GID: 1000}, true)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !spec.IsCode(err, spec.CodeInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want invalid_argument with %q", err, tc.want)
			}
		})
	}
}

// TestDockerioArchiveRewriteHeaders: what reaches Docker is owned by the
// sandbox's user, has clean names, no setuid bits and no PAX extended
// attributes.
func TestDockerioArchiveRewriteHeaders(t *testing.T) {
	xattrs := map[string]string{"SCHILY.xattr.security.capability": "\x01\x00\x00\x02", "LIBARCHIVE.xattr.trusted.x": "eQ==", "SCHILY.xattr.user.x": "y"}
	in := archive(t,
		entry{typ: tar.TypeReg, name: "./a//f", body: "x", pax: xattrs},
		entry{typ: tar.TypeDir, name: "./d/", pax: xattrs},
	)
	var out bytes.Buffer
	if err := rewrite(&out, bytes.NewReader(in), spec.User{UID: 1000, GID: 1001}, true); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&out)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Uid != 1000 || h.Gid != 1001 || h.Mode&^0o777 != 0 {
			t.Errorf("%s: owner %d:%d mode %o", h.Name, h.Uid, h.Gid, h.Mode)
		}
		for k := range h.PAXRecords {
			if strings.Contains(k, "xattr") {
				t.Errorf("%s: PAX record %s survived", h.Name, k)
			}
		}
	}
	if strings.Join(names, ",") != "a/f,d/" {
		t.Fatalf("names %q", names)
	}
}

func TestDockerioWorkspacePath(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "/workspace"},
		{".", "/workspace"},
		{"work", "/workspace/work"},
		{"work/../work/", "/workspace/work"},
		{"..foo", "/workspace/..foo"},
		{"work/..b", "/workspace/work/..b"},
		{"..", ""},
		{"work/../../x", ""},
		{"/etc", ""},
		{"work\x00", ""},
	} {
		got, err := spec.WorkspacePath(tc.in)
		if tc.want == "" {
			if !spec.IsCode(err, spec.CodeInvalidArgument) {
				t.Errorf("%q: %q %v, want invalid_argument", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %q %v, want %q", tc.in, got, err, tc.want)
		}
	}
}

// blockingReader blocks every Read until released, as a caller's reader fed
// by a stalled network peer does; reading is closed once a Read waits.
type blockingReader struct {
	reading, release chan struct{}
	once             sync.Once
}

func newBlockingReader() *blockingReader {
	return &blockingReader{reading: make(chan struct{}), release: make(chan struct{})}
}

func (b *blockingReader) Read([]byte) (int, error) {
	b.once.Do(func() { close(b.reading) })
	<-b.release
	return 0, errors.New("released")
}

// TestDockerioPutHonoursContext: a put whose reader never yields ends when
// its context does (the read itself cannot be interrupted, so it is left
// behind until the reader returns).
func TestDockerioPutHonoursContext(t *testing.T) {
	f := NewFake(profile.Profile{Name: "fake"})
	sb, err := f.CreateSandbox(context.Background(), SandboxRequest{Owner: "o0000000000000000000000", ID: "s0000000000000000000000", Spec: spec.Sandbox{
		Image: "sha256:0000000000000000000000000000000000000000000000000000000000000001", Policy: spec.DefaultPolicy(), Lifetime: spec.Kept}})
	if err != nil {
		t.Fatal(err)
	}
	r := newBlockingReader()
	defer close(r.release)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.PutArchive(ctx, sb, "work", r) }()
	<-r.reading // the put waits on the reader, not before it
	cancel()
	if err := <-done; !spec.IsCode(err, spec.CodeCancelled) {
		t.Fatalf("got %v, want cancelled", err)
	}
}

// TestDockerioPutRefusesWholeArchive: a bad entry after a good one fails the
// put with nothing of the archive extracted.
func TestDockerioPutRefusesWholeArchive(t *testing.T) {
	f := NewFake(profile.Profile{Name: "fake"})
	sb, err := f.CreateSandbox(context.Background(), SandboxRequest{Owner: "o0000000000000000000000", ID: "s0000000000000000000000", Spec: spec.Sandbox{
		Image: "sha256:0000000000000000000000000000000000000000000000000000000000000001", Policy: spec.DefaultPolicy(), Lifetime: spec.Kept}})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []entry{symlink("evil", "../../etc/x"), hardlink("evil", "../../etc/passwd")} {
		err := f.PutArchive(context.Background(), sb, "work", bytes.NewReader(archive(t, file("good", "x"), bad)))
		if !spec.IsCode(err, spec.CodeInvalidArgument) {
			t.Fatalf("%s: got %v, want invalid_argument", bad.name, err)
		}
		if _, err := f.GetArchive(context.Background(), sb, "work/good"); !spec.IsCode(err, spec.CodeNotFound) {
			t.Fatalf("%s: the good entry before it was extracted: %v", bad.name, err)
		}
	}
}

// TestDockerioSpoolBound: the spool refuses to grow past MaxArchiveBytes
// (started near the bound, so the test writes bytes, not a gigabyte).
func TestDockerioSpoolBound(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "spool")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }() // teardown
	s := &spoolFile{f: f, n: MaxArchiveBytes - 2}
	if _, err := s.Write([]byte("ab")); err != nil {
		t.Fatalf("at the bound: %v", err)
	}
	if _, err := s.Write([]byte("c")); !spec.IsCode(err, spec.CodeInvalidArgument) || !strings.Contains(err.Error(), "exceeds the limit") {
		t.Fatalf("past the bound: %v", err)
	}
}

// TestDockerioArchiveReserved: at the workspace root, no entry may land in
// the warden's directory, by name, through a symlink of the archive, or as
// a hardlink to its files; the root entry itself is dropped (its owner is
// the runtime's). Below the root the same names are ordinary.
func TestDockerioArchiveReserved(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []entry
		atRoot  bool
		want    string // "" means accepted
	}{
		{"by name", []entry{file(".stockade/stockade-warden", "x")}, true, "reserved"},
		{"dot-slash name", []entry{file("./.stockade/x", "x")}, true, "reserved"},
		{"the directory", []entry{dir(".stockade/")}, true, "reserved"},
		{"dotdot name", []entry{dir("work/"), file("work/../.stockade/x", "x")}, true, "reserved"},
		{"through a symlink", []entry{symlink("s", ".stockade"), file("s/stockade-warden", "x")}, true, "reserved"},
		{"hardlink to the binary", []entry{hardlink("h", ".stockade/stockade-warden")}, true, "reserved"},
		{"similar names", []entry{file(".stockadex", "x"), dir("work/"), file("work/.stockade", "y")}, true, ""},
		{"below the root", []entry{file(".stockade/x", "x")}, false, ""},
	} {
		err := rewrite(io.Discard, bytes.NewReader(archive(t, tc.entries...)), spec.User{UID: 1000, GID: 1000}, tc.atRoot)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	// The root entry is dropped, what follows is kept.
	var out bytes.Buffer
	if err := rewrite(&out, bytes.NewReader(archive(t, dir("./"), file("f", "x"))), spec.User{UID: 1000, GID: 1000}, true); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&out)
	var names []string
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
	}
	if strings.Join(names, ",") != "f" {
		t.Fatalf("entries after rewrite at the root: %v, want only f", names)
	}
	for _, p := range []string{".stockade", ".stockade/x", "./.stockade/"} {
		if _, err := archivePath(p); !spec.IsCode(err, spec.CodeInvalidArgument) {
			t.Errorf("archivePath(%q): %v", p, err)
		}
	}
	for _, p := range []string{".", "work", ".stockadex", "work/.stockade"} {
		if _, err := archivePath(p); err != nil {
			t.Errorf("archivePath(%q): %v", p, err)
		}
	}
}

// TestDockerioArchiveLinksAreData (issue 30, defect 8): a symlink's target
// is data: an absolute one (every Python venv has one), one that leaves
// the destination and one that is not UTF-8 are extracted as links, and
// so are names that are not UTF-8. Nothing of the same archive is
// extracted through such a link: an entry, a link or a hardlink whose path
// resolves through one is refused.
func TestDockerioArchiveLinksAreData(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []entry
		want    string // "" means accepted
	}{
		{"absolute", []entry{symlink("python3", "/usr/bin/python3.11")}, ""},
		{"absolute to the root", []entry{symlink("r", "/")}, ""},
		{"escaping through a link", []entry{symlink("a", "."), symlink("a/b", "../x"), symlink("up", "a/..")}, ""},
		{"escaping by its own dotdots", []entry{dir("a/"), symlink("a/up", "../../../etc/passwd")}, "climbs out"},
		{"a loop", []entry{symlink("a", "b"), symlink("b", "a")}, ""},
		{"not UTF-8", []entry{symlink("l\xff", "t\xfe\x01"), file("n\xff\xfe", "x"), dir("d\xe9/"), file("d\xe9/f", "y"), hardlink("h\xff", "n\xff\xfe")}, ""},
		{"a link to an absolute link", []entry{symlink("a", "/etc"), symlink("b", "a/passwd")}, ""},
		{"file through an absolute link", []entry{symlink("etc", "/etc"), file("etc/passwd", "x")}, "its directory resolves"},
		{"dir through an absolute link", []entry{symlink("r", "/"), dir("r/tmp/")}, "its directory resolves"},
		{"link through an absolute link", []entry{symlink("r", "/"), symlink("r/l", "x")}, "its directory resolves"},
		{"file through an escaping link", []entry{symlink("a", "."), symlink("up", "a/.."), file("up/x", "x")}, "its directory resolves"},
		{"file through a chain to an absolute link", []entry{symlink("a", "/tmp"), symlink("b", "a"), file("b/x", "x")}, "its directory resolves"},
		{"file through a loop", []entry{symlink("a", "b"), symlink("b", "a"), file("a/x", "x")}, "its directory resolves"},
		{"hardlink through an absolute link", []entry{symlink("r", "/"), hardlink("h", "r/etc/shadow")}, "hardlink target"},
		{"hardlink through an escaping link", []entry{symlink("a", "."), symlink("up", "a/.."), hardlink("h", "up/x")}, "hardlink target"},
		{"reserved through an absolute link", []entry{symlink("w", "/workspace/.stockade"), file("w/stockade-warden", "x")}, "its directory resolves"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := archive(t, tc.entries...)
			var out bytes.Buffer
			err := rewrite(&out, bytes.NewReader(in), spec.User{UID: 1000, GID: 1000}, true)
			if tc.want != "" {
				if !spec.IsCode(err, spec.CodeInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("got %v, want invalid_argument with %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			// Every name and link target reaches Docker byte for byte.
			tr := tar.NewReader(&out)
			for _, e := range tc.entries {
				h, err := tr.Next()
				if err != nil {
					t.Fatal(err)
				}
				if h.Name != e.name || h.Linkname != e.link {
					t.Fatalf("%q → %q rewritten as %q → %q", e.name, e.link, h.Name, h.Linkname)
				}
			}
		})
	}
}

// TestDockerioCheckpointRestores (issue 30, defect 8): what the checkpoint
// store captures from a hostile tree (non-UTF-8 names, absolute and
// escaping links, link targets that are not text), its Restore stream
// passes the put's checks as a rollback writes it (at the workspace's
// root, under a staging directory), every name and target unchanged.
func TestDockerioCheckpointRestores(t *testing.T) {
	in := archive(t, dir("work/"),
		file("work/n\xff\xfe.txt", "latin-1 name\n"),
		dir("work/d\xe9/"), file("work/d\xe9/f", "in a latin-1 dir\n"),
		symlink("work/python3", "/usr/bin/python3.11"),
		symlink("work/up", "../outside"),
		symlink("work/raw", "t\xff\x01 \"\\x"),
		hardlink("work/h\xff", "work/n\xff\xfe.txt"),
		dir("work/venv/"), dir("work/venv/bin/"), symlink("work/venv/bin/python", "/usr/bin/python3"),
	)
	s, err := checkpoint.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.Capture(context.Background(), bytes.NewReader(in), checkpoint.Meta{Sandbox: "sb"})
	if err != nil {
		t.Fatalf("capture: %v", err)
	}
	var restored, out bytes.Buffer
	if err := s.Restore(m.ID, &restored, ".rollback-1", 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if err := rewrite(&out, bytes.NewReader(restored.Bytes()), spec.User{UID: 1000, GID: 1000}, true); err != nil {
		t.Fatalf("the put refuses the checkpoint's restore: %v", err)
	}
	want, err := checkpoint.TreeDigest(bytes.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	got, err := checkpoint.TreeDigest(&out)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatal("the tree the put extracts is not the checkpoint's")
	}
}

// TestDockerioLinkBoundFitsCheckpoints: every checkpoint the store keeps
// fits one put: its links' names and targets are bounded by its manifest,
// its restore stream by MaxArchiveBytes.
func TestDockerioLinkBoundFitsCheckpoints(t *testing.T) {
	if maxLinkBytes < checkpoint.MaxManifest {
		t.Fatalf("a put tracks %d bytes of links, a checkpoint's manifest may hold %d", maxLinkBytes, checkpoint.MaxManifest)
	}
	if checkpoint.MaxRestore > MaxArchiveBytes {
		t.Fatalf("a checkpoint's restore stream may be %d bytes, a put takes %d", checkpoint.MaxRestore, MaxArchiveBytes)
	}
}
