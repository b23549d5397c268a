package recorder

import (
	"os"
	"slices"
	"testing"

	"github.com/stockade/stockade/spec"
)

// TestUnsealedAndSeal: Unsealed lists exactly the recordings without an
// end record (a rotated one by its last tail segment), and Seal ends one
// with the given totals, marking lost what the totals count beyond the
// bytes on disk.
func TestUnsealedAndSeal(t *testing.T) {
	s := newStore(t, spec.Record{Head: 4096, Tail: 4096})
	write := func(id string, n int, end string) {
		t.Helper()
		rec, err := s.Create(id, spec.Record{})
		if err != nil {
			t.Fatal(err)
		}
		for range n {
			if err := rec.Write(TypeStdout, make([]byte, 1000)); err != nil {
				t.Error(err)
			}
		}
		switch end {
		case "close":
			err = rec.Close()
		case "suspend":
			err = rec.Suspend()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	write("ended", 2, "close")
	write("endedrotated", 40, "close")
	write("suspended", 2, "suspend")
	write("suspendedrotated", 40, "suspend")
	got, err := s.Unsealed()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := []string{"suspended", "suspendedrotated"}; !slices.Equal(got, want) {
		t.Fatalf("unsealed %v, want %v", got, want)
	}

	if lost, err := s.Seal("suspended", 2000, 0); err != nil || lost != 0 {
		t.Fatalf("seal: lost %d %v", lost, err)
	}
	if lost, err := s.Seal("suspendedrotated", 40000, 500); err != nil || lost != 500 {
		t.Fatalf("seal short: lost %d %v, want 500", lost, err)
	}
	if got, err := s.Unsealed(); err != nil || len(got) != 0 {
		t.Fatalf("after sealing: %v %v", got, err)
	}
	_, _, sum, err := readAll(t, s.Path(), "suspendedrotated")
	if err != nil || !sum.Complete || sum.StdoutBytes != 40000 || sum.StderrBytes != 500 {
		t.Fatalf("sealed: %+v %v", sum, err)
	}
}

// TestResumeHeadTornAtCreation: a crash between a recording's creation and
// its header reaching the disk leaves a head of fewer bytes than a header
// and nothing recorded: Resume starts it afresh (offset 0) instead of
// refusing it, so the process's output is recorded after all.
func TestResumeHeadTornAtCreation(t *testing.T) {
	for _, n := range []int{0, 6, 20, headerSize - 1} {
		s := newStore(t, spec.Record{})
		h := appendHeader(nil, header{head: spec.MinRecordBound, tail: spec.MinRecordBound})
		if err := os.WriteFile(headName(s.Path(), "p"), h[:n], 0o600); err != nil {
			t.Fatal(err)
		}
		rec, off, err := s.Resume("p", spec.Record{})
		if err != nil || rec == nil || off != 0 {
			t.Fatalf("%d header bytes: resume %v offset %d %v", n, rec, off, err)
		}
		if err := rec.Write(TypeStdout, []byte("hello\n")); err != nil {
			t.Error(err)
		}
		if err := rec.Close(); err != nil {
			t.Fatal(err)
		}
		f, _, sum, err := readAll(t, s.Path(), "p")
		if err != nil || !sum.Complete || string(f.data) != "hello\n" {
			t.Fatalf("%d header bytes: %q %+v %v", n, f.data, sum, err)
		}
	}
}
