package journal

import (
	"testing"

	"github.com/stockade/stockade/spec"
)

// TestLastSeq: a stream's last sequence moves with its appends, another
// stream's do not move it, an unknown stream's is 0, a bad key is refused.
func TestLastSeq(t *testing.T) {
	j := open(t, tempPath(t), Options{})
	if n, err := j.LastSeq(sb("none")); n != 0 || err != nil {
		t.Fatalf("an unknown stream: %d %v", n, err)
	}
	mustAppend(t, j, rec(sb("a"), "sandbox.reserved", map[string]int{}), rec(sb("a"), "sandbox.created", map[string]int{}))
	mustAppend(t, j, rec(sb("b"), "sandbox.reserved", map[string]int{}))
	if n, err := j.LastSeq(sb("a")); n != 2 || err != nil {
		t.Fatalf("stream a: %d %v, want 2", n, err)
	}
	mustAppend(t, j, rec(sb("a"), "sandbox.started", map[string]int{}))
	if n, err := j.LastSeq(sb("a")); n != 3 || err != nil {
		t.Fatalf("stream a after a third: %d %v", n, err)
	}
	if _, err := j.LastSeq(Key{Kind: "nope", ID: "a"}); !spec.IsCode(err, spec.CodeInvalidArgument) {
		t.Fatalf("a bad key: %v", err)
	}
}
