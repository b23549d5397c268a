package sandbox

import (
	"strings"
	"testing"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// TestDecide is DESIGN.md's recovery table, row by row.
func TestDecide(t *testing.T) {
	const rev = "engine-1.41-v5-p"
	kept := lifecycle.Sandbox{Phase: lifecycle.PhaseStarted, Revision: rev, Spec: spec.Sandbox{Lifetime: spec.Kept}}
	oneShot := kept
	oneShot.Spec.Lifetime = spec.OneShot
	at := func(s lifecycle.Sandbox, p lifecycle.Phase) lifecycle.Sandbox { s.Phase = p; return s }
	workload := dockerio.Resource{Kind: dockerio.KindContainer, Role: dockerio.RoleWorkload}
	all := []dockerio.Resource{workload, {Kind: dockerio.KindContainer, Role: dockerio.RoleExport}, {Kind: dockerio.KindVolume, Role: dockerio.RoleVolume}}
	running := dockerio.Observed{Present: all, Running: true, Revision: rev}
	noExport := dockerio.Observed{Present: []dockerio.Resource{workload, all[2]}, Running: true, Revision: rev}
	dead := dockerio.Observed{Present: []dockerio.Resource{workload}, Exit: &dockerio.ContainerExit{ExitCode: 137, OOMKilled: true}, Revision: rev}
	mismatch := running
	mismatch.Mismatch = "HostConfig.Memory"
	otherRev := running
	otherRev.Revision = "engine-1.52-v4-linux-x64"
	rolling := kept
	rolling.RollingBack = &lifecycle.RollingBack{Checkpoint: "c", Staging: ".rollback-3", Marker: dockerio.MarkerPrefix + "ab"}
	killed := dockerio.Observed{Present: all, Exit: &dockerio.ContainerExit{ExitCode: 137}, Revision: rev}
	for _, tc := range []struct {
		name    string
		s       lifecycle.Sandbox
		obs     dockerio.Observed
		want    Decision
		because string
	}{
		{"reserved, nothing", at(kept, lifecycle.PhaseReserved), dockerio.Observed{}, RollBack, "no resources"},
		{"reserved, partial", at(kept, lifecycle.PhaseReserved), dockerio.Observed{Present: []dockerio.Resource{{Role: dockerio.RoleVolume}}}, RollBack, "volume"},
		{"started one-shot", oneShot, running, StopRemove, "one-shot"},
		{"started kept exact", kept, running, Readopt, "readback exact"},
		{"started kept mismatch", kept, mismatch, TearDown, "HostConfig.Memory"},
		{"started kept other revision", kept, otherRev, TearDown, "engine-1.52-v4-linux-x64"},
		{"started kept, runtime moved on", func() lifecycle.Sandbox { s := kept; s.Revision = "old"; return s }(), func() dockerio.Observed { o := running; o.Revision = "old"; return o }(), TearDown, "this runtime"},
		{"started dead", kept, dead, RecordExit, "OOM"},
		{"stopped by its rollback", rolling, killed, Readopt, "stopped by its rollback"},
		{"rolling back, dead of OOM", rolling, dead, RecordExit, "OOM"},
		{"rolling back, one-shot, stopped", func() lifecycle.Sandbox { s := rolling; s.Spec.Lifetime = spec.OneShot; return s }(), killed, RecordExit, "gone or dead"},
		{"started gone", kept, dockerio.Observed{}, RecordExit, "no resources"},
		{"started one-shot gone", oneShot, dockerio.Observed{}, RecordExit, "gone"},
		{"stopping", at(kept, lifecycle.PhaseStopping), running, FinishStop, "stop was under way"},
		{"removing", at(kept, lifecycle.PhaseRemoving), dead, FinishRemove, "removal"},
		{"started kept, export gone", kept, noExport, TearDown, "export container"},
		{"exited kept", func() lifecycle.Sandbox { s := at(kept, lifecycle.PhaseExited); s.Started = true; return s }(), dead, Leave, "exited and kept"},
		{"exited one-shot", func() lifecycle.Sandbox { s := at(oneShot, lifecycle.PhaseExited); s.Started = true; return s }(), dead, FinishRemove, "one-shot"},
		{"exited, never started", at(kept, lifecycle.PhaseExited), dockerio.Observed{}, FinishRemove, "failed create"},
		{"exited kept, nothing left", func() lifecycle.Sandbox { s := at(kept, lifecycle.PhaseExited); s.Started = true; return s }(), dockerio.Observed{}, FinishRemove, "nothing of it is left"},
		{"exited kept after a teardown decision", func() lifecycle.Sandbox {
			s := at(kept, lifecycle.PhaseExited)
			s.Started, s.Recovered = true, []lifecycle.Recovered{{Decision: string(TearDown)}}
			return s
		}(), dead, FinishRemove, "earlier recovery decided"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := Decide(tc.s, tc.obs, rev)
			if got != tc.want || !strings.Contains(why, tc.because) {
				t.Fatalf("Decide = %q (%s), want %q because %q", got, why, tc.want, tc.because)
			}
		})
	}
}
