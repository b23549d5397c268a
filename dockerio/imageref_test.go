package dockerio

import (
	"strings"
	"testing"

	"github.com/stockade/stockade/spec"
)

// TestCheckImageRef: what Docker's grammar takes passes (tags, digests,
// registries, IDs and their prefixes); what it refuses is invalid_argument
// before any Docker call (the Adapter's ResolveImage and the Fake's), and
// an upper-case name says so.
func TestCheckImageRef(t *testing.T) {
	id := "sha256:" + strings.Repeat("ab", 32)
	for _, tc := range []struct {
		ref  string
		ok   bool
		want string // a part of the error's text
	}{
		{ref: "stockade/toolbox:dev", ok: true},
		{ref: "busybox", ok: true},
		{ref: "registry.example.com:5000/team/img:1.2", ok: true},
		{ref: "img@sha256:" + strings.Repeat("cd", 32), ok: true},
		{ref: id, ok: true},
		{ref: strings.Repeat("ab", 32), ok: true},
		{ref: "abcdef12", ok: true},
		{ref: "Stockade/Toolbox:dev", want: "lower case: stockade/toolbox:dev?"},
		{ref: "img:", want: "is not [REGISTRY/]NAME[:TAG][@DIGEST]"},
		{ref: "img@sha256:12", want: "is not [REGISTRY/]NAME[:TAG][@DIGEST]"},
		{ref: "a//b", want: "is not [REGISTRY/]NAME[:TAG][@DIGEST]"},
		{ref: "", want: "empty"},
	} {
		err := checkImageRef(tc.ref)
		if tc.ok {
			if err != nil {
				t.Errorf("%q: %v, want it taken", tc.ref, err)
			}
			continue
		}
		if !spec.IsCode(err, spec.CodeInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want invalid_argument saying %q", tc.ref, err, tc.want)
		}
	}
}
