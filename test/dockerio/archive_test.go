package dockerio

import (
	"archive/tar"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// TestDockerioPutRefusesEscapingLinks: a symlink or hardlink that would
// resolve outside the destination fails the whole put with
// invalid_argument, and nothing before it reached the workspace (Docker
// itself would extract the earlier entries, then fail).
func TestDockerioPutRefusesEscapingLinks(t *testing.T) {
	e := testkit.NewDio(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb := e.Sandbox(t, nil)
	for _, tc := range testkit.EscapingLinks {
		t.Run(tc.Name, func(t *testing.T) {
			entries := []testkit.TarEntry{{Type: tar.TypeReg, Name: "good", Body: "good\n"}, {Type: tar.TypeSymlink, Name: "here", Link: "."}, tc.Bad}
			err := e.Adapter.PutArchive(ctx, sb, "work", testkit.TarOf(t, entries...))
			if !spec.IsCode(err, spec.CodeInvalidArgument) {
				t.Fatalf("got %v, want invalid_argument", err)
			}
			for _, p := range []string{"work/good", "work/here", "work/evil"} {
				if _, err := e.Adapter.GetArchive(ctx, sb, p); !spec.IsCode(err, spec.CodeNotFound) {
					t.Fatalf("%s was extracted from a refused archive: %v", p, err)
				}
			}
		})
	}
	// Only a component exactly ".." climbs: these are ordinary names.
	err := e.Adapter.PutArchive(ctx, sb, "work", testkit.TarOf(t,
		testkit.TarEntry{Type: tar.TypeReg, Name: "..foo", Body: "dots\n"},
		testkit.TarEntry{Type: tar.TypeDir, Name: "a/"},
		testkit.TarEntry{Type: tar.TypeReg, Name: "a/..b", Body: "inner\n"},
		testkit.TarEntry{Type: tar.TypeSymlink, Name: "a/l", Link: "../..foo"},
	))
	if err != nil {
		t.Fatal(err)
	}
	if got := e.Sh(t, sb, "cat /workspace/work/..foo /workspace/work/a/..b /workspace/work/a/l"); got != "dots\ninner\ndots\n" {
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
	e := testkit.NewDio(t)
	sb := e.Sandbox(t, nil)
	r := &neverReader{reading: make(chan struct{}), release: make(chan struct{})}
	defer close(r.release)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Adapter.PutArchive(ctx, sb, "work", r) }()
	<-r.reading // the put waits on the reader, not before it
	cancel()
	if err := <-done; !spec.IsCode(err, spec.CodeCancelled) {
		t.Fatalf("got %v, want cancelled", err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	if err := e.Adapter.PutArchive(ctx2, sb, "work", testkit.TarOf(t, testkit.TarEntry{Type: tar.TypeReg, Name: "after", Body: "ok\n"})); err != nil {
		t.Fatal(err)
	}
}
