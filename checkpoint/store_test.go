package checkpoint

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockade/stockade/spec"
)

// ent is one entry of a test tree (under the top directory "work").
type ent struct {
	name string
	typ  byte
	mode int64
	body string
	link string
}

func tarOf(t testing.TB, top string, ents ...ent) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	all := append([]ent{{name: top + "/", typ: tar.TypeDir, mode: 0o755}}, ents...)
	for _, e := range all {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Size: int64(len(e.body)), Linkname: e.link, ModTime: time.Unix(1700000000, 0)}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			if _, err := io.WriteString(tw, e.body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

var tree = []ent{
	{name: "work/src/", typ: tar.TypeDir, mode: 0o750},
	{name: "work/src/main.go", typ: tar.TypeReg, mode: 0o644, body: "package main\n"},
	{name: "work/notes.txt", typ: tar.TypeReg, mode: 0o600, body: "one\ntwo\n"},
	{name: "work/run.sh", typ: tar.TypeReg, mode: 0o4755, body: "#!/bin/sh\n"},
	{name: "work/link", typ: tar.TypeSymlink, mode: 0o777, link: "/etc/passwd"},
	{name: "work/hard", typ: tar.TypeLink, mode: 0o600, link: "work/notes.txt"},
	{name: "work/empty/", typ: tar.TypeDir, mode: 0o700},
	{name: "work/ünï cödé.txt", typ: tar.TypeReg, mode: 0o644, body: strings.Repeat("x", 100000)},
}

// blobUsage is the bytes and number of the store's blobs (Usage counts
// the manifests too).
func blobUsage(t testing.TB, s *Store) (int64, int) {
	t.Helper()
	var used int64
	var blobs int
	if err := s.walkBlobs(func(_ string, size int64) error {
		used += size
		blobs++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return used, blobs
}

func openStore(t testing.TB, limit int64) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "journal.checkpoints"), limit)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func digest(t testing.TB, b []byte) string {
	t.Helper()
	d, err := TreeDigest(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func restored(t testing.TB, s *Store, id, root string) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := s.Restore(id, &b, root, 65532, 65532); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestRoundTrip: what Capture stores, Restore gives back — the same tree
// by TreeDigest, under another root, owned as asked — and Get, Find and
// List name it.
func TestRoundTrip(t *testing.T) {
	s := openStore(t, 0)
	in := tarOf(t, "work", tree...)
	m, err := s.Capture(context.Background(), bytes.NewReader(in), Meta{Sandbox: "sb1", Name: "base", Env: []string{"A=1"}, Dir: "/workspace/work/src", Created: time.Unix(5, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if !spec.IsCheckpointID(m.ID) || m.Files != len(tree)+1 || m.Bytes != int64(13+8+10+100000) {
		t.Fatalf("manifest: %s %d files %d bytes", m.ID, m.Files, m.Bytes)
	}
	out := restored(t, s, m.ID, ".rollback-3")
	if digest(t, in) != digest(t, out) {
		t.Fatal("the restored tree differs")
	}
	tr := tar.NewReader(bytes.NewReader(out))
	first, err := tr.Next()
	if err != nil || first.Name != ".rollback-3/" || first.Uid != 65532 {
		t.Fatalf("the restored stream's first entry: %+v %v", first, err)
	}
	for ref, want := range map[string]error{m.ID: nil, "base": nil, "other": spec.ErrNotFound, "ck-ffffffffffffffffffff": spec.ErrNotFound, "Bad Name": spec.ErrInvalidArgument} {
		got, err := s.Find("sb1", ref)
		if want == nil && (err != nil || got.ID != m.ID) || want != nil && !errors.Is(err, want) {
			t.Errorf("Find(%q): %v %v", ref, got.ID, err)
		}
	}
	if _, err := s.Find("sb2", "base"); !spec.IsCode(err, spec.CodeNotFound) {
		t.Errorf("a name is a sandbox's own: %v", err)
	}
	list, err := s.List()
	if err != nil || len(list) != 1 || list[0].Entries != nil || list[0].Dir != "/workspace/work/src" {
		t.Fatalf("list: %+v %v", list, err)
	}
	if err := s.Verify(); err != nil {
		t.Fatal(err)
	}
	// Reopened: the same checkpoint, nothing collected.
	again, err := Open(s.dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if digest(t, restored(t, again, m.ID, "work")) != digest(t, in) {
		t.Fatal("reopened, the tree differs")
	}
}

// TestSharing: a second checkpoint of a tree with one file changed adds
// one blob; removing the first keeps what the second names.
func TestSharing(t *testing.T) {
	s := openStore(t, 0)
	ctx := context.Background()
	a, err := s.Capture(ctx, bytes.NewReader(tarOf(t, "work", tree...)), Meta{Sandbox: "sb"})
	if err != nil {
		t.Fatal(err)
	}
	used, blobs := blobUsage(t, s)
	changed := append([]ent(nil), tree...)
	changed[2].body = "one\ntwo\nthree\n"
	b, err := s.Capture(ctx, bytes.NewReader(tarOf(t, "work", changed...)), Meta{Sandbox: "sb"})
	if err != nil {
		t.Fatal(err)
	}
	used2, blobs2 := blobUsage(t, s)
	if blobs2 != blobs+1 || used2 != used+14 {
		t.Fatalf("the second checkpoint took %d bytes in %d blobs, want 14 in 1", used2-used, blobs2-blobs)
	}
	if err := s.Remove(a.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(a.ID); !spec.IsCode(err, spec.CodeNotFound) {
		t.Fatalf("a second remove: %v", err)
	}
	if digest(t, restored(t, s, b.ID, "work")) != digest(t, tarOf(t, "work", changed...)) {
		t.Fatal("the remaining checkpoint lost a shared blob")
	}
	used3, blobs3 := blobUsage(t, s)
	if blobs3 != blobs || used3 != used+14-8 {
		t.Fatalf("after the remove: %d bytes in %d blobs", used3, blobs3)
	}
}

// TestLimit: a capture past the limit fails resource_exhausted, saying the
// limit, and keeps nothing.
func TestLimit(t *testing.T) {
	s := openStore(t, 50000)
	_, err := s.Capture(context.Background(), bytes.NewReader(tarOf(t, "work", tree...)), Meta{Sandbox: "sb"})
	if !spec.IsCode(err, spec.CodeResourceExhausted) || !strings.Contains(err.Error(), "50000") {
		t.Fatalf("over the limit: %v", err)
	}
	if used, blobs, _ := s.Usage(); used != 0 || blobs != 0 {
		t.Fatalf("kept %d bytes in %d blobs", used, blobs)
	}
	if list, _ := s.List(); len(list) != 0 {
		t.Fatalf("listed %v", list)
	}
}

// TestHostile: archives that would leave the tree, or are not one, are
// refused naming the entry; FIFOs are skipped and named.
func TestHostile(t *testing.T) {
	for _, tc := range []struct {
		name string
		top  string
		ents []ent
		want string
	}{
		{"dotdot", "work", []ent{{name: "work/../etc/x", typ: tar.TypeReg, body: "x"}}, "not a clean path"},
		{"absolute", "work", []ent{{name: "/etc/x", typ: tar.TypeReg, body: "x"}}, "absolute"},
		{"outside the top", "work", []ent{{name: "other/x", typ: tar.TypeReg, body: "x"}}, "not under"},
		{"hardlink out", "work", []ent{{name: "work/h", typ: tar.TypeLink, link: "etc/passwd"}}, "hardlink"},
		{"hardlink to a dir", "work", []ent{{name: "work/d/", typ: tar.TypeDir}, {name: "work/h", typ: tar.TypeLink, link: "work/d"}}, "not a file"},
		{"twice", "work", []ent{{name: "work/a", typ: tar.TypeReg}, {name: "work/a", typ: tar.TypeReg}}, "twice"},
		{"orphan", "work", []ent{{name: "work/d/a", typ: tar.TypeReg}}, "before its directory"},
		{"top not a dir", "", []ent{{name: "work", typ: tar.TypeReg}}, "first entry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t, 0)
			var in []byte
			if tc.top == "" {
				in = tarRaw(t, tc.ents...) // without the directory entry
			} else {
				in = tarOf(t, tc.top, tc.ents...)
			}
			_, err := s.Capture(context.Background(), bytes.NewReader(in), Meta{Sandbox: "sb"})
			if !spec.IsCode(err, spec.CodeInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want invalid_argument with %q", err, tc.want)
			}
			if used, _, _ := s.Usage(); used != 0 {
				t.Fatalf("kept %d bytes", used)
			}
		})
	}
	s := openStore(t, 0)
	m, err := s.Capture(context.Background(), bytes.NewReader(tarOf(t, "work", ent{name: "work/fifo", typ: tar.TypeFifo})), Meta{Sandbox: "sb"})
	if err != nil || len(m.Skipped) != 1 || !strings.Contains(m.Skipped[0], "fifo") {
		t.Fatalf("a fifo: %+v %v", m.Skipped, err)
	}
}

func tarRaw(t testing.TB, ents ...ent) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range ents {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Typeflag: e.typ, Size: int64(len(e.body))}); err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(tw, e.body)
	}
	_ = tw.Close()
	return b.Bytes()
}

// failingReader gives n bytes of r, then fails: a capture killed midway.
type failingReader struct {
	r io.Reader
	n int
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("the copy broke")
	}
	if len(p) > f.n {
		p = p[:f.n]
	}
	n, err := f.r.Read(p)
	f.n -= n
	return n, err
}

// TestBrokenCapture: a capture whose stream breaks keeps no manifest and
// its blobs are collected; a store reopened after a crash (blobs without a
// manifest, a half-written tmp file) collects them.
func TestBrokenCapture(t *testing.T) {
	s := openStore(t, 0)
	in := tarOf(t, "work", tree...)
	if _, err := s.Capture(context.Background(), &failingReader{r: bytes.NewReader(in), n: len(in) - 2000}, Meta{Sandbox: "sb"}); err == nil {
		t.Fatal("a broken stream captured")
	}
	if used, blobs, _ := s.Usage(); used != 0 || blobs != 0 {
		t.Fatalf("kept %d bytes in %d blobs", used, blobs)
	}
	// A crash: a blob no manifest names, and a tmp file.
	orphan := s.blobPath(strings.Repeat("ab", 32))
	if err := os.MkdirAll(filepath.Dir(orphan), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(orphan, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.dir, "tmp", "blob-1"), []byte("y"), 0o600); err != nil {
		t.Fatal(err)
	}
	again, err := Open(s.dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if used, blobs, _ := again.Usage(); used != 0 || blobs != 0 {
		t.Fatalf("after the reopen: %d bytes in %d blobs", used, blobs)
	}
	if ents, _ := os.ReadDir(filepath.Join(s.dir, "tmp")); len(ents) != 0 {
		t.Fatalf("tmp holds %d files", len(ents))
	}
}

// TestCorruptBlob: Restore and Verify find a blob that changed or went.
func TestCorruptBlob(t *testing.T) {
	s := openStore(t, 0)
	m, err := s.Capture(context.Background(), bytes.NewReader(tarOf(t, "work", tree...)), Meta{Sandbox: "sb"})
	if err != nil {
		t.Fatal(err)
	}
	var main Entry
	for _, e := range m.Entries {
		if e.Path == "src/main.go" {
			main = e
		}
	}
	if err := os.WriteFile(s.blobPath(main.SHA256), []byte("package evil\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Restore(m.ID, io.Discard, "work", 1, 1); !spec.IsCode(err, spec.CodeJournal) || !strings.Contains(err.Error(), "src/main.go") {
		t.Fatalf("restore of a corrupt blob: %v", err)
	}
	if err := os.Remove(s.blobPath(main.SHA256)); err != nil {
		t.Fatal(err)
	}
	if err := s.Verify(); err == nil || !strings.Contains(err.Error(), main.SHA256) {
		t.Fatalf("verify: %v", err)
	}
}

// TestConcurrentCaptures: captures of overlapping trees at once, under
// -race, each restorable, none losing a shared blob to another's failure.
func TestConcurrentCaptures(t *testing.T) {
	s := openStore(t, 0)
	var wg sync.WaitGroup
	ids := make([]string, 8)
	errs := make([]error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ents := append([]ent(nil), tree...)
			ents = append(ents, ent{name: fmt.Sprintf("work/own-%d", i), typ: tar.TypeReg, body: fmt.Sprint(i)})
			r := io.Reader(bytes.NewReader(tarOf(t, "work", ents...)))
			if i%2 == 1 {
				r = &failingReader{r: r, n: 3000} // fails after sharing blobs
			}
			m, err := s.Capture(context.Background(), r, Meta{Sandbox: "sb", Created: time.Unix(int64(i), 0)})
			ids[i], errs[i] = m.ID, err
		}()
	}
	wg.Wait()
	for i := range 8 {
		if i%2 == 1 {
			continue
		}
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if err := s.Restore(ids[i], io.Discard, "work", 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Verify(); err != nil {
		t.Fatal(err)
	}
}

// TestTreeDigest: the digest sees content, modes, links and names, not
// times or the top directory's name.
func TestTreeDigest(t *testing.T) {
	base := digest(t, tarOf(t, "work", tree...))
	if digest(t, tarOf(t, "other", renameTop(tree, "other")...)) != base {
		t.Fatal("the top directory's name changed the digest")
	}
	for i := range tree {
		changed := append([]ent(nil), tree...)
		switch changed[i].typ {
		case tar.TypeReg:
			changed[i].body += "!"
		case tar.TypeSymlink, tar.TypeLink:
			changed[i].link = "work/src/main.go"
		default:
			changed[i].mode ^= 0o1
		}
		if digest(t, tarOf(t, "work", changed...)) == base {
			t.Errorf("a change of %s left the digest", tree[i].name)
		}
	}
}

func renameTop(ents []ent, top string) []ent {
	out := make([]ent, len(ents))
	for i, e := range ents {
		e.name = top + strings.TrimPrefix(e.name, "work")
		if e.typ == tar.TypeLink {
			e.link = top + strings.TrimPrefix(e.link, "work")
		}
		out[i] = e
	}
	return out
}

// BenchmarkCapture captures a 10k-file tree (1 KiB each) held in memory.
func BenchmarkCapture(b *testing.B) {
	var ents []ent
	for i := range 10000 {
		ents = append(ents, ent{name: fmt.Sprintf("work/f%05d", i), typ: tar.TypeReg, mode: 0o644, body: strings.Repeat(fmt.Sprint(i%10), 1024)})
	}
	in := tarOf(b, "work", ents...)
	b.SetBytes(int64(len(in)))
	for i := 0; b.Loop(); i++ {
		s := openStore(b, 0)
		if _, err := s.Capture(context.Background(), bytes.NewReader(in), Meta{Sandbox: "sb", Created: time.Unix(int64(i), 0)}); err != nil {
			b.Fatal(err)
		}
	}
}
