package recovery

import (
	"slices"
	"testing"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// TestOrphansOutsideNetwork: resources of a sandbox the journal does not
// know are orphans; the owner's shared outside network, which no sandbox
// owns, is one only when no live sandbox has the allowlist network
// (removing it then would cut a proxy off).
func TestOrphansOutsideNetwork(t *testing.T) {
	owned := []dockerio.Owned{
		{Sandbox: "live", Resources: []dockerio.Resource{{Kind: dockerio.KindContainer, Role: dockerio.RoleWorkload, ID: "w1"}}},
		{Sandbox: "gone", Resources: []dockerio.Resource{
			{Kind: dockerio.KindVolume, Role: dockerio.RoleVolume, ID: "v2"},
			{Kind: dockerio.KindContainer, Role: dockerio.RoleEgress, ID: "e2"},
			{Kind: dockerio.KindNetwork, Role: dockerio.RoleNetwork, ID: "n2"},
		}},
		{Sandbox: "", Resources: []dockerio.Resource{{Kind: dockerio.KindNetwork, Role: dockerio.RoleOutside, ID: "out"}}},
	}
	sandbox := func(n spec.NetworkKind) lifecycle.Sandbox {
		var s lifecycle.Sandbox
		s.Spec.Policy.Network = n
		return s
	}
	for _, tc := range []struct {
		name string
		live lifecycle.Sandbox
		want []string // containers first, then networks, then volumes
	}{
		{"a live allowlist sandbox", sandbox(spec.NetworkAllowlist), []string{"e2", "n2", "v2"}},
		{"no live allowlist sandbox", sandbox(spec.NetworkIsolated), []string{"e2", "n2", "out", "v2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ids []string
			for _, r := range OrphansOf(owned, Live{Sandboxes: map[string]lifecycle.Sandbox{"live": tc.live}}) {
				ids = append(ids, r.ID)
			}
			if !slices.Equal(ids, tc.want) {
				t.Fatalf("orphans %v, want %v", ids, tc.want)
			}
		})
	}
}
