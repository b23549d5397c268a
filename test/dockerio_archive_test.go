package test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/spec"
)

// tarEntry is one entry of a test archive.
type tarEntry struct {
	typ        byte
	name, link string
	body       string
}

func tarOf(t testing.TB, es ...tarEntry) *bytes.Reader {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := &tar.Header{Typeflag: e.typ, Name: e.name, Linkname: e.link, Mode: 0o644}
		switch e.typ {
		case tar.TypeReg:
			h.Size = int64(len(e.body))
		case tar.TypeDir:
			h.Mode = 0o755
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
	return bytes.NewReader(buf.Bytes())
}

// readTar reads a one-file archive's content.
func readTar(t testing.TB, rc io.ReadCloser) string {
	t.Helper()
	defer func() { _ = rc.Close() }()
	tr := tar.NewReader(rc)
	if _, err := tr.Next(); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(tr)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// escapingLinks are archives whose last entry's link leaves the
// destination, after a good file that must not be extracted.
var escapingLinks = []struct {
	name string
	bad  tarEntry
}{
	{"symlink", tarEntry{typ: tar.TypeSymlink, name: "evil", link: "../../etc/x"}},
	{"hardlink", tarEntry{typ: tar.TypeLink, name: "evil", link: "../../etc/passwd"}},
	{"symlink through a symlink", tarEntry{typ: tar.TypeSymlink, name: "here/evil", link: "../x"}},
}

// TestDockerioPutRefusesEscapingLinks: a symlink or hardlink that would
// resolve outside the destination fails the whole put with
// invalid_argument, and nothing before it reached the workspace (Docker
// itself would extract the earlier entries, then fail).
func TestDockerioPutRefusesEscapingLinks(t *testing.T) {
	e := newDio(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb := e.sandbox(t, nil)
	for _, tc := range escapingLinks {
		t.Run(tc.name, func(t *testing.T) {
			entries := []tarEntry{{typ: tar.TypeReg, name: "good", body: "good\n"}, {typ: tar.TypeSymlink, name: "here", link: "."}, tc.bad}
			err := e.a.PutArchive(ctx, sb, "work", tarOf(t, entries...))
			if !spec.IsCode(err, spec.CodeInvalidArgument) {
				t.Fatalf("got %v, want invalid_argument", err)
			}
			for _, p := range []string{"work/good", "work/here", "work/evil"} {
				if _, err := e.a.GetArchive(ctx, sb, p); !spec.IsCode(err, spec.CodeNotFound) {
					t.Fatalf("%s was extracted from a refused archive: %v", p, err)
				}
			}
		})
	}
	// Only a component exactly ".." climbs: these are ordinary names.
	err := e.a.PutArchive(ctx, sb, "work", tarOf(t,
		tarEntry{typ: tar.TypeReg, name: "..foo", body: "dots\n"},
		tarEntry{typ: tar.TypeDir, name: "a/"},
		tarEntry{typ: tar.TypeReg, name: "a/..b", body: "inner\n"},
		tarEntry{typ: tar.TypeSymlink, name: "a/l", link: "../..foo"},
	))
	if err != nil {
		t.Fatal(err)
	}
	if got := e.sh(t, sb, "cat /workspace/work/..foo /workspace/work/a/..b /workspace/work/a/l"); got != "dots\ninner\ndots\n" {
		t.Fatalf("extracted %q", got)
	}
}

// neverReader blocks every Read until released, as a stalled upload does;
// reading is closed once a Read waits.
type neverReader struct {
	reading, release chan struct{}
	once             sync.Once
}

func (r *neverReader) Read([]byte) (int, error) {
	r.once.Do(func() { close(r.reading) })
	<-r.release
	return 0, errors.New("released")
}

// TestDockerioPutHonoursContext: a put whose archive never arrives returns
// when its context ends, and the export container takes the next put.
func TestDockerioPutHonoursContext(t *testing.T) {
	e := newDio(t)
	sb := e.sandbox(t, nil)
	r := &neverReader{reading: make(chan struct{}), release: make(chan struct{})}
	defer close(r.release)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.a.PutArchive(ctx, sb, "work", r) }()
	<-r.reading // the put waits on the reader, not before it
	cancel()
	if err := <-done; !spec.IsCode(err, spec.CodeCancelled) {
		t.Fatalf("got %v, want cancelled", err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	if err := e.a.PutArchive(ctx2, sb, "work", tarOf(t, tarEntry{typ: tar.TypeReg, name: "after", body: "ok\n"})); err != nil {
		t.Fatal(err)
	}
}

// TestAPIPutRefusesEscapingLinks is TestDockerioPutRefusesEscapingLinks
// through the embedding API.
func TestAPIPutRefusesEscapingLinks(t *testing.T) {
	e := newAPI(t, stockade.Options{})
	sb := e.sandbox(t, spec.OneShot)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, tc := range escapingLinks {
		t.Run(tc.name, func(t *testing.T) {
			err := sb.Put(ctx, "work", tarOf(t, tarEntry{typ: tar.TypeReg, name: "good", body: "good\n"}, tarEntry{typ: tar.TypeSymlink, name: "here", link: "."}, tc.bad))
			if !spec.IsCode(err, spec.CodeInvalidArgument) {
				t.Fatalf("got %v, want invalid_argument", err)
			}
			if _, _, err := sb.Get(ctx, "work/good", false); !spec.IsCode(err, spec.CodeNotFound) {
				t.Fatalf("work/good was extracted from a refused archive: %v", err)
			}
		})
	}
	if err := sb.Put(ctx, "work", tarOf(t, tarEntry{typ: tar.TypeReg, name: "..foo", body: "dots\n"})); err != nil {
		t.Fatal(err)
	}
	rc, _, err := sb.Get(ctx, "work/..foo", false)
	if err != nil {
		t.Fatal(err)
	}
	if got := readTar(t, rc); got != "dots\n" {
		t.Fatalf("..foo holds %q", got)
	}
}
