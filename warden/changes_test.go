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
