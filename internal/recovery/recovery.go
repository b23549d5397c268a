// Package recovery is what Open's recovery reads before it acts: the
// journal's live entities folded (a stream that does not fold costs only
// its own sandbox), what Docker shows of each sandbox and of the owner's
// resources, the orphans among them, and the report's lines. It changes
// nothing: every sandbox is observed before any is acted on, so a daemon
// that cannot answer fails the recovery with nothing touched.
// internal/core acts on it (recovering actors, the orphan sweep);
// PlanRecovery and the drill read it to say what Open would decide.
package recovery

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/inspect"
	"github.com/stockade/stockade/internal/actors/sandbox"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// Unreconciled is the decision recorded for a sandbox recovery could not
// observe: it is listed, and every operation on it fails with unreconciled,
// until a later Open reconciles it.
const Unreconciled = "unreconciled"

// FoldSandbox replays a sandbox's stream to its end.
func FoldSandbox(j *journal.Journal, id string) (lifecycle.Sandbox, error) {
	return inspect.New(j).ReplaySandbox(context.Background(), id, 0)
}

// OrphanLines are the report's lines for the resources removed.
func OrphanLines(rs []dockerio.Resource) []host.Orphan {
	var out []host.Orphan
	for _, r := range rs {
		out = append(out, host.Orphan{Kind: string(r.Kind), ID: r.ID, Name: r.Name, Role: string(r.Role), Sandbox: r.Sandbox})
	}
	return out
}

// Live is the journal's live state, folded.
type Live struct {
	Sandboxes map[string]lifecycle.Sandbox
	Processes map[string][]lifecycle.Process // by sandbox id
	Count     int
	// unfolded holds, by sandbox id, why a sandbox's stream or one of its
	// processes' streams does not fold. Such a sandbox is left
	// unreconciled: listed, refused for work, its journal untouched; every
	// other sandbox recovers as usual.
	Unfolded map[string]error
}

// LoadLive folds every live entity. A stream that does not fold costs only
// its own sandbox (a process's: its sandbox), never the whole Open.
func LoadLive(j *journal.Journal) (Live, error) {
	l := Live{Sandboxes: map[string]lifecycle.Sandbox{}, Processes: map[string][]lifecycle.Process{}, Unfolded: map[string]error{}}
	broken := func(sandbox string, err error) {
		l.Unfolded[sandbox] = errors.Join(l.Unfolded[sandbox], err)
	}
	err := j.Live(func(e journal.LiveEntity) error {
		switch e.Key.Kind {
		case journal.KindSandbox:
			s, err := FoldSandbox(j, e.Key.ID)
			if err != nil {
				if !foldFailure(err) {
					return err
				}
				broken(e.Key.ID, fmt.Errorf("its journal stream does not fold: %w", err))
			}
			s.ID = e.Key.ID
			l.Sandboxes[e.Key.ID] = s
		case journal.KindProcess:
			p, err := FoldProcess(j, e.Key.ID)
			if err != nil {
				if !foldFailure(err) {
					return err
				}
				broken(e.Parent, fmt.Errorf("the journal stream of its process %s does not fold: %w", e.Key.ID, err))
				l.Count++
				return nil
			}
			l.Processes[p.Sandbox] = append(l.Processes[p.Sandbox], p)
			l.Count++
		case journal.KindRuntime:
			// Runtime-wide facts (recovery runs, orphan removals): no
			// entity to recover.
		}
		return nil
	})
	return l, err
}

// foldFailure tells a stream that does not fold (an illegal transition, an
// event that does not decode, a corrupt record: that stream's problem) from
// a journal closed under the recovery.
func foldFailure(err error) bool { return !errors.Is(err, journal.ErrClosed) }

// FoldProcess replays a process's stream to its end.
func FoldProcess(j *journal.Journal, id string) (lifecycle.Process, error) {
	return inspect.New(j).ReplayProcess(context.Background(), id, 0)
}

// UnreconciledLine is the report's line for a sandbox left unreconciled.
func UnreconciledLine(pl Plan) host.RecoveredSandbox {
	return host.RecoveredSandbox{ID: pl.State.ID, From: pl.State.Phase, Decision: Unreconciled, Settled: pl.State.Phase,
		Observed: "left as it is: " + pl.Err.Error(), Error: pl.Err.Error()}
}

type Plan struct {
	State lifecycle.Sandbox
	Obs   dockerio.Observed
	// err: Docker could not be asked about this sandbox; it is left
	// unreconciled (listed, refused for work) rather than guessed at.
	Err error
}

// Observe folds the journal's live entities and reads what Docker shows of
// each sandbox and of the owner's resources. It changes nothing: every
// sandbox is observed before any is acted on, so a daemon that cannot answer
// fails the recovery with nothing touched.
func Observe(ctx context.Context, j *journal.Journal, engine dockerio.Inventory) (Live, []Plan, []dockerio.Owned, error) {
	owner := j.Owner()
	l, err := LoadLive(j)
	if err != nil {
		return l, nil, nil, err
	}
	owned, err := engine.ListOwned(ctx, owner)
	if err != nil {
		return l, nil, nil, err
	}
	var plans []Plan
	for _, s := range l.Sandboxes {
		if err := l.Unfolded[s.ID]; err != nil {
			plans = append(plans, Plan{State: s, Err: err})
			continue
		}
		obs, err := engine.InspectSandbox(ctx, sandbox.DockerSandbox(owner, s))
		if err != nil {
			err = fmt.Errorf("observing sandbox %s: %w", s.ID, err)
		}
		plans = append(plans, Plan{State: s, Obs: obs, Err: err})
	}
	sort.Slice(plans, func(i, k int) bool { return plans[i].State.Reserved.Before(plans[k].State.Reserved) })
	return l, plans, owned, nil
}

// OrphansOf lists the owned resources whose sandbox is not live. The
// owner's shared outside network (allowlist sandboxes' egress) belongs to
// no one sandbox: it is an orphan when no live sandbox has the allowlist
// network, so nothing outlives the last one.
func OrphansOf(owned []dockerio.Owned, l Live) []dockerio.Resource {
	needOutside := false
	for _, s := range l.Sandboxes {
		if s.Spec.Policy.Network == spec.NetworkAllowlist {
			needOutside = true
			break
		}
	}
	var orphans []dockerio.Resource
	for _, g := range owned {
		if _, ok := l.Sandboxes[g.Sandbox]; !ok {
			for _, r := range g.Resources {
				if r.Role != dockerio.RoleOutside || !needOutside {
					orphans = append(orphans, r)
				}
			}
		}
	}
	rank := map[dockerio.Kind]int{dockerio.KindContainer: 0, dockerio.KindNetwork: 1, dockerio.KindVolume: 2}
	sort.SliceStable(orphans, func(i, k int) bool { return rank[orphans[i].Kind] < rank[orphans[k].Kind] })
	return orphans
}

// TornDown reports whether a recovery decision (a report line's) removes
// the sandbox: stopped and removed, or torn down.
func TornDown(decision string) bool {
	d := sandbox.Decision(decision)
	return d == sandbox.StopRemove || d == sandbox.TearDown
}
