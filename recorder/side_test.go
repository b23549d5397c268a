package recorder

import (
	"bytes"
	"os"
	"testing"

	"github.com/stockade/stockade/spec"
)

// TestSideFiles: a process's kept change text and its stdin are read back
// as written, a stdin past MaxStdin is cut and says so, and Remove takes
// them with the recording.
func TestSideFiles(t *testing.T) {
	s := newStore(t, spec.Record{})
	before, after := "a\n", "a\nb\n"
	texts := []ChangeText{{Path: "/workspace/work/f", Before: &before, After: &after}, {Path: "/workspace/work/new", After: &after}}
	if err := s.WriteChanges("p1", texts); err != nil {
		t.Fatal(err)
	}
	got, err := ReadChanges(s.Path(), "p1")
	if err != nil || len(got) != 2 || *got[0].Before != before || *got[0].After != after || got[1].Before != nil {
		t.Fatalf("changes read back: %+v %v", got, err)
	}
	if got, err := ReadChanges(s.Path(), "p2"); err != nil || got != nil {
		t.Fatalf("no changes kept: %+v %v", got, err)
	}
	for _, tc := range []struct {
		name   string
		writes [][]byte
		whole  bool
	}{
		{"empty", nil, true},
		{"two writes", [][]byte{[]byte("hello "), []byte("world\n")}, true},
		{"past the bound", [][]byte{bytes.Repeat([]byte("x"), MaxStdin-1), []byte("yz")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "in-" + tc.name[:3]
			r, err := s.RecordStdin(id)
			if err != nil {
				t.Fatal(err)
			}
			var want []byte
			for _, w := range tc.writes {
				r.Write(w)
				want = append(want, w...)
			}
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			data, whole, err := ReadStdin(s.Path(), id)
			if err != nil || whole != tc.whole {
				t.Fatalf("whole %v %v, want %v", whole, err, tc.whole)
			}
			if tc.whole && !bytes.Equal(data, want) || !tc.whole && (len(data) != MaxStdin || !bytes.Equal(data, want[:MaxStdin])) {
				t.Fatalf("read back %d bytes of %d", len(data), len(want))
			}
		})
	}
	if _, _, err := ReadStdin(s.Path(), "never"); !spec.IsCode(err, spec.CodeNotFound) {
		t.Fatalf("no stdin recording: %v", err)
	}
	if err := s.Remove("p1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("in-pas"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{changesName(s.Path(), "p1"), stdinName(s.Path(), "in-pas"), stdinCutName(s.Path(), "in-pas")} {
		if _, err := os.Stat(name); !os.IsNotExist(err) {
			t.Fatalf("%s left after Remove: %v", name, err)
		}
	}
}
