package stockade

import (
	"testing"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/lifecycle"
)

// TestOrphansSpareTheOutsideNetwork: resources of a sandbox the journal
// does not know are orphans; the owner's shared outside network, which no
// sandbox owns, is not (removing it would cut every allowlist sandbox's
// proxy off, or leave a runtime's cached id dangling).
func TestOrphansSpareTheOutsideNetwork(t *testing.T) {
	owned := []dockerio.Owned{
		{Sandbox: "live", Resources: []dockerio.Resource{{Kind: dockerio.KindContainer, Role: dockerio.RoleWorkload, ID: "w1"}}},
		{Sandbox: "gone", Resources: []dockerio.Resource{
			{Kind: dockerio.KindVolume, Role: dockerio.RoleVolume, ID: "v2"},
			{Kind: dockerio.KindContainer, Role: dockerio.RoleEgress, ID: "e2"},
			{Kind: dockerio.KindNetwork, Role: dockerio.RoleNetwork, ID: "n2"},
		}},
		{Sandbox: "", Resources: []dockerio.Resource{{Kind: dockerio.KindNetwork, Role: dockerio.RoleOutside, ID: "out"}}},
	}
	l := live{sandboxes: map[string]lifecycle.Sandbox{"live": {}}}
	var ids []string
	for _, r := range orphansOf(owned, l) {
		ids = append(ids, r.ID)
	}
	// Containers first, then networks, then volumes.
	if want := []string{"e2", "n2", "v2"}; len(ids) != len(want) || ids[0] != want[0] || ids[1] != want[1] || ids[2] != want[2] {
		t.Fatalf("orphans %v, want %v", ids, want)
	}
}
