package sandbox

import (
	"fmt"
	"strings"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// Decision is what recovery does with a sandbox an earlier runtime left
// live, by the recovery table of docs/design.md.
type Decision string

const (
	// RollBack: reserved, Docker shows nothing or a partial set: remove what
	// exists; exited (failed) → removed.
	RollBack Decision = "roll back"
	// StopRemove: started, one-shot: its caller is gone.
	StopRemove Decision = "stop and remove"
	// Readopt: started, kept, running, readback exact, same revision; or
	// stopped by a rollback left unsettled (started again once settled).
	Readopt Decision = "re-adopt"
	// TearDown: started, kept, running but readback or revision differs:
	// stop and remove; failed (unsupported).
	TearDown Decision = "tear down"
	// RecordExit: started, the workload is gone or dead: exited with what
	// Docker reports, then as its lifetime says.
	RecordExit Decision = "record exit"
	// FinishStop: stopping: finish the stop (a one-shot is then removed).
	FinishStop Decision = "finish stop"
	// FinishRemove: removing: finish the removal.
	FinishRemove Decision = "finish removal"
	// Leave: exited and kept: the stopped resources stay (the workspace can
	// still be read).
	Leave Decision = "leave"
)

// Decide applies the recovery table to a sandbox's folded state and what
// Docker shows of it. revision is the running runtime's revision: a sandbox
// made under another is never re-adopted. It is pure; the reason it returns
// is journaled with the decision.
func Decide(s lifecycle.Sandbox, obs dockerio.Observed, revision string) (Decision, string) {
	seen := Describe(obs)
	switch s.Phase {
	case lifecycle.PhaseReserved:
		return RollBack, "reserved and never started; Docker shows " + seen
	case lifecycle.PhaseStopping:
		return FinishStop, "a stop was under way; Docker shows " + seen
	case lifecycle.PhaseRemoving:
		return FinishRemove, "a removal was under way; Docker shows " + seen
	case lifecycle.PhaseExited:
		switch {
		case s.Spec.Lifetime != spec.Kept:
			return FinishRemove, "exited, one-shot, its removal never journaled; Docker shows " + seen
		case !s.Started:
			return FinishRemove, "exited without ever starting (a failed create), its removal never journaled; Docker shows " + seen
		case removalDecided(s):
			return FinishRemove, "an earlier recovery decided to remove it; Docker shows " + seen
		case len(obs.Present) == 0:
			return FinishRemove, "exited and nothing of it is left to keep; Docker shows " + seen
		}
		return Leave, "exited and kept; Docker shows " + seen
	case lifecycle.PhaseStarted:
	default:
		return Leave, fmt.Sprintf("phase %q needs no recovery", s.Phase)
	}
	if !obs.Running {
		if s.RollingBack != nil && s.Spec.Lifetime == spec.Kept && obs.Exit != nil && obs.Exit.ExitCode == 137 && !obs.Exit.OOMKilled &&
			obs.Revision == s.Revision && s.Revision == revision &&
			present(obs, dockerio.RoleExport) && present(obs, dockerio.RoleVolume) {
			// A rollback stops its workload while root works in the
			// workspace: settled by its marker, then started again.
			return Readopt, "stopped by its rollback; settled, then started again; Docker shows " + seen
		}
		return RecordExit, "the workload is gone or dead; Docker shows " + seen
	}
	if s.Spec.Lifetime != spec.Kept {
		return StopRemove, "one-shot and its caller is gone; Docker shows " + seen
	}
	switch {
	case obs.Revision != s.Revision:
		return TearDown, fmt.Sprintf("revision %q found, %q journaled; Docker shows %s", obs.Revision, s.Revision, seen)
	case s.Revision != revision:
		return TearDown, fmt.Sprintf("made under revision %q, this runtime is %q; Docker shows %s", s.Revision, revision, seen)
	case obs.Mismatch != "":
		return TearDown, "readback differs at " + obs.Mismatch + "; Docker shows " + seen
	case !present(obs, dockerio.RoleExport) || !present(obs, dockerio.RoleVolume):
		return TearDown, "its export container or workspace volume is missing; Docker shows " + seen
	case (s.Spec.Policy.Network.Canonical() == spec.NetworkOpen || s.Spec.Policy.Network == spec.NetworkAllowlist) && !present(obs, dockerio.RoleNetwork):
		return TearDown, "its network is missing; Docker shows " + seen
	}
	return Readopt, "running, readback exact, same revision; Docker shows " + seen
}

// removalDecided reports whether an earlier recovery decided this sandbox
// goes (a crash midway must not turn a teardown into a kept sandbox).
func removalDecided(s lifecycle.Sandbox) bool {
	for _, r := range s.Recovered {
		switch Decision(r.Decision) {
		case TearDown, StopRemove, RollBack, FinishRemove:
			return true
		case Readopt, RecordExit, FinishStop, Leave:
			// The sandbox stays: not a removal.
		}
	}
	return false
}

func present(obs dockerio.Observed, role dockerio.Role) bool {
	for _, r := range obs.Present {
		if r.Role == role {
			return true
		}
	}
	return false
}

// Describe says in one line what Docker showed.
func Describe(obs dockerio.Observed) string {
	var parts []string
	roles := map[dockerio.Role]bool{}
	for _, r := range obs.Present {
		roles[r.Role] = true
	}
	var have []string
	for _, r := range []dockerio.Role{dockerio.RoleWorkload, dockerio.RoleExport, dockerio.RoleVolume, dockerio.RoleNetwork} {
		if roles[r] {
			have = append(have, string(r))
		}
	}
	if len(have) == 0 {
		return "no resources"
	}
	parts = append(parts, "resources: "+strings.Join(have, ","))
	switch {
	case obs.Running && obs.Paused:
		parts = append(parts, "workload running, paused")
	case obs.Running:
		parts = append(parts, "workload running")
	case obs.Exit != nil:
		parts = append(parts, fmt.Sprintf("workload exited %d", obs.Exit.ExitCode))
		if obs.Exit.OOMKilled {
			parts = append(parts, "OOM-killed")
		}
	case roles[dockerio.RoleWorkload]:
		parts = append(parts, "workload not running")
	}
	if obs.Mismatch != "" {
		parts = append(parts, "readback differs at "+obs.Mismatch)
	}
	if obs.Revision != "" {
		parts = append(parts, "revision "+obs.Revision)
	}
	return strings.Join(parts, "; ")
}
