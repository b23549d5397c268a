package warden

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stockade/stockade/warden/wire"
)

// TestEncodeChangesFitsAFrame: a report whose texts and paths would
// overflow a frame (texts of '<', which JSON could escape six-fold) is cut
// to fit, saying so, and still decodes as the runtime checks it.
func TestEncodeChangesFitsAFrame(t *testing.T) {
	text := strings.Repeat("<", wire.MaxChangeText)
	var c wire.Changes
	for i := range 16 {
		c.Entries = append(c.Entries, wire.Change{Op: wire.OpModified, Path: fmt.Sprintf("/workspace/work/%s%d", strings.Repeat("p", 3000), i), Kind: wire.KindFile, Before: &text, After: &text})
	}
	for i := range 900 {
		c.Entries = append(c.Entries, wire.Change{Op: wire.OpCreated, Path: fmt.Sprintf("/workspace/work/%s%d", strings.Repeat("<", 3000), i), Kind: wire.KindFile})
	}
	c.Modified, c.Created = 16, 900
	b, err := encodeChanges(&c)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > wire.MaxPayload {
		t.Fatalf("%d bytes, more than a frame", len(b))
	}
	var got wire.Changes
	if err := wire.Decode(wire.Frame{Type: wire.TChanges, Channel: 1, Payload: b}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Incomplete == "" || got.Total() != 916 || len(got.Entries)+got.Omitted != 916 {
		t.Fatalf("cut report: incomplete %q, %d entries, %d omitted", got.Incomplete, len(got.Entries), got.Omitted)
	}
	small := wire.Changes{Created: 1, Entries: []wire.Change{{Op: wire.OpCreated, Path: "/workspace/work/<a>", Kind: wire.KindFile}}}
	if b, err := encodeChanges(&small); err != nil || !strings.Contains(string(b), "<a>") {
		t.Fatalf("a small report is not escaped: %s %v", b, err)
	}
}

// One process cannot make the warden hold more than maxTrackedBytes for
// its paths, however long they are: past the bound touches are counted
// and the report says it is incomplete, and once the report is made the
// tracker holds nothing.
func TestTrackerBoundedInBytes(t *testing.T) {
	old := workspaceRoot
	workspaceRoot = t.TempDir()
	t.Cleanup(func() { workspaceRoot = old })
	tr := newTracker()
	long := strings.Repeat("p", 4000)
	n := 2 * maxTrackedBytes / (len(long) + entryCost)
	for i := range n {
		tr.record(fmt.Sprintf("%s/%s%d", workspaceRoot, long, i), opWrite, &fileState{exists: true, kind: wire.KindFile})
	}
	if tr.bytes > maxTrackedBytes || tr.dropped == 0 || tr.incomplete == "" {
		t.Fatalf("held %d bytes for %d paths (bound %d), dropped %d, incomplete %q", tr.bytes, len(tr.paths), maxTrackedBytes, tr.dropped, tr.incomplete)
	}
	if len(tr.paths) < n/3 {
		t.Fatalf("only %d of %d paths kept within the bound", len(tr.paths), n)
	}
	m := tr.changes()
	if m.Incomplete == "" || tr.paths != nil || tr.bytes != 0 {
		t.Fatalf("after the report: incomplete %q, %d paths, %d bytes held", m.Incomplete, len(tr.paths), tr.bytes)
	}
	tr.record(workspaceRoot+"/late", opCreate, nil)
	if tr.paths != nil {
		t.Fatal("a touch after the report was kept")
	}
}

// What a call on a path can do bounds what it is reported to have done.
func TestChangedByWhatTheCallsCanDo(t *testing.T) {
	file := fileState{exists: true, kind: wire.KindFile, size: 4, mode: 0o644, mtime: 1, ctime: 1, ino: 7, dev: 1}
	with := func(f func(*fileState)) fileState { s := file; f(&s); return s }
	for _, tc := range []struct {
		name string
		now  fileState
		ops  opMask
		want bool
	}{
		{"rewritten, mtime put back", with(func(s *fileState) { s.ctime = 2 }), opWrite, true},
		{"untouched", file, opWrite | opMode | opCreate | opDelete, false},
		{"replaced by a create", with(func(s *fileState) { s.ino = 8 }), opCreate, true},
		{"replaced by someone else under a write", with(func(s *fileState) { s.ino = 8 }), opWrite, false},
		{"mode by chmod", with(func(s *fileState) { s.mode = 0o600; s.ctime = 2 }), opMode, true},
		{"written under a chmod only", with(func(s *fileState) { s.size = 9; s.ctime = 2 }), opMode, false},
		{"a directory's entries", fileState{exists: true, kind: wire.KindDir, mtime: 2, ctime: 2, ino: 7, dev: 1}, opWrite, false},
	} {
		pre := file
		if tc.now.kind == wire.KindDir {
			pre = fileState{exists: true, kind: wire.KindDir, mtime: 1, ctime: 1, ino: 7, dev: 1}
		}
		if got := changed(pre, tc.now, tc.ops); got != tc.want {
			t.Errorf("%s: changed %v, want %v", tc.name, got, tc.want)
		}
	}
}
