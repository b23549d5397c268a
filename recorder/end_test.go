package recorder

import (
	"testing"

	"github.com/stockade/stockade/spec"
)

// TestSyncIsNotTheEnd: a recording synced at its read loop's end (Sync)
// or suspended is durable but not complete, and resumes where it stands;
// only Close (after the exit is journaled) makes it complete.
func TestSyncIsNotTheEnd(t *testing.T) {
	for _, end := range []string{"sync", "suspend"} {
		t.Run(end, func(t *testing.T) {
			s := newStore(t, spec.Record{})
			rec, err := s.Create("p1", spec.Record{})
			if err != nil {
				t.Fatal(err)
			}
			if err := rec.Write(TypeStdout, []byte("hello\n")); err != nil {
				t.Fatal(err)
			}
			if end == "sync" {
				err = rec.Sync()
			} else {
				err = rec.Suspend()
			}
			if err != nil {
				t.Fatal(err)
			}
			f, _, sum, err := readAll(t, s.Path(), "p1")
			if err != nil || string(f.data) != "hello\n" || sum.Complete {
				t.Fatalf("after %s: %q %+v %v; want hello, not complete", end, f.data, sum, err)
			}
			if end == "sync" {
				// The same writer goes on, then ends.
				if err := rec.Write(TypeStderr, []byte("more\n")); err != nil {
					t.Error(err)
				}
			} else {
				rec, _, err = s.Resume("p1", spec.Record{})
				if err != nil {
					t.Fatalf("resume after suspend: %v", err)
				}
				if err := rec.Write(TypeStderr, []byte("more\n")); err != nil {
					t.Error(err)
				}
			}
			if err := rec.Close(); err != nil {
				t.Fatal(err)
			}
			f, _, sum, err = readAll(t, s.Path(), "p1")
			if err != nil || string(f.data) != "hello\nmore\n" || !sum.Complete || sum.StdoutBytes != 6 || sum.StderrBytes != 5 {
				t.Fatalf("after close: %q %+v %v", f.data, sum, err)
			}
		})
	}
}

// TestGapInPlace: bytes known lost are a gap record where they would have
// stood (Read hands it out as a Lost gap at that offset), and the output
// after them keeps its offsets, also across a Resume.
func TestGapInPlace(t *testing.T) {
	s := newStore(t, spec.Record{})
	rec, err := s.Create("p1", spec.Record{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Write(TypeStdout, []byte("before\n")); err != nil {
		t.Fatal(err)
	}
	if err := rec.Suspend(); err != nil {
		t.Fatal(err)
	}
	rec, off, err := s.Resume("p1", spec.Record{})
	if err != nil || off != 7 {
		t.Fatalf("resume: %d %v", off, err)
	}
	at, err := rec.Gap(100)
	if err != nil || at != 7 {
		t.Fatalf("gap at %d %v, want 7", at, err)
	}
	if err := rec.Write(TypeStdout, []byte("after\n")); err != nil {
		t.Fatal(err)
	}
	rec.SetTotals(113, 0)
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	var chunks []Chunk
	sum, err := Read(s.Path(), "p1", func(c Chunk) error { chunks = append(chunks, c); return nil })
	if err != nil || !sum.Complete || len(chunks) != 3 {
		t.Fatalf("%+v %+v %v", chunks, sum, err)
	}
	if g := chunks[1]; g.Stream != 0 || g.Offset != 7 || g.Gap != 100 || !g.Lost {
		t.Fatalf("gap chunk %+v, want 100 lost bytes at 7", g)
	}
	if a := chunks[2]; string(a.Data) != "after\n" || a.Offset != 107 {
		t.Fatalf("after the gap: %+v, want offset 107", a)
	}
	if sum.Missing != 100 {
		t.Fatalf("missing %d, want 100", sum.Missing)
	}
}
