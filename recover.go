package stockade

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/inspect"
	"github.com/stockade/stockade/internal/actors/sandbox"
	"github.com/stockade/stockade/internal/failpoint"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// Unreconciled is the decision recorded for a sandbox recovery could not
// observe: it is listed, and every operation on it fails with unreconciled,
// until a later Open reconciles it.
const Unreconciled = "unreconciled"

// RecoveryReport says what the recovery run by Open found and did: the one
// report type of the embedded runtime and the client, host's.
type RecoveryReport = host.RecoveryReport

// RecoveredSandbox is one line of a RecoveryReport.
type RecoveredSandbox = host.RecoveredSandbox

// orphanLines are the report's lines for the resources removed.
func orphanLines(rs []dockerio.Resource) []host.Orphan {
	var out []host.Orphan
	for _, r := range rs {
		out = append(out, host.Orphan{Kind: string(r.Kind), ID: r.ID, Name: r.Name, Role: string(r.Role), Sandbox: r.Sandbox})
	}
	return out
}

// Recovery returns the report of the recovery Open ran.
func (rt *Runtime) Recovery() RecoveryReport {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.recovery
}

// live is the journal's live state, folded.
type live struct {
	sandboxes map[string]lifecycle.Sandbox
	processes map[string][]lifecycle.Process // by sandbox id
	count     int
	// unfolded holds, by sandbox id, why a sandbox's stream or one of its
	// processes' streams does not fold. Such a sandbox is left
	// unreconciled: listed, refused for work, its journal untouched; every
	// other sandbox recovers as usual.
	unfolded map[string]error
}

// loadLive folds every live entity. A stream that does not fold costs only
// its own sandbox (a process's: its sandbox), never the whole Open.
func loadLive(j *journal.Journal) (live, error) {
	l := live{sandboxes: map[string]lifecycle.Sandbox{}, processes: map[string][]lifecycle.Process{}, unfolded: map[string]error{}}
	broken := func(sandbox string, err error) {
		l.unfolded[sandbox] = errors.Join(l.unfolded[sandbox], err)
	}
	err := j.Live(func(e journal.LiveEntity) error {
		switch e.Key.Kind {
		case journal.KindSandbox:
			s, err := foldSandbox(j, e.Key.ID)
			if err != nil {
				if !foldFailure(err) {
					return err
				}
				broken(e.Key.ID, fmt.Errorf("its journal stream does not fold: %w", err))
			}
			s.ID = e.Key.ID
			l.sandboxes[e.Key.ID] = s
		case journal.KindProcess:
			p, err := foldProcess(j, e.Key.ID)
			if err != nil {
				if !foldFailure(err) {
					return err
				}
				broken(e.Parent, fmt.Errorf("the journal stream of its process %s does not fold: %w", e.Key.ID, err))
				l.count++
				return nil
			}
			l.processes[p.Sandbox] = append(l.processes[p.Sandbox], p)
			l.count++
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

func foldProcess(j *journal.Journal, id string) (lifecycle.Process, error) {
	return inspect.New(j).ReplayProcess(context.Background(), id, 0)
}

// recover reconciles the journal's live entities with the Docker resources
// labelled with this owner, by the recovery table (sandbox.Decide; the
// "Recovery" section of docs/design.md). Each sandbox is handed to a
// recovering actor that journals its decision with what was observed and
// carries it out; resources with this owner and no live sandbox are
// orphans, removed and journaled; resources of other owners are never
// listed, so never touched.
func (rt *Runtime) recover(ctx context.Context, opts Options) error {
	start := time.Now()
	l, plans, owned, err := observe(ctx, rt.journal, rt.engine)
	if err != nil {
		return err
	}
	report := RecoveryReport{Processes: l.count}
	// Processes whose sandbox is not live cannot run: settle them lost.
	for sid, procs := range l.processes {
		if _, ok := l.sandboxes[sid]; ok {
			continue
		}
		for _, p := range procs {
			ev := lifecycle.ProcessExited{Reason: lifecycle.ReasonLost, Error: spec.CodeEngine, Message: "recovered: its sandbox is not live"}
			if _, err := rt.deps.Record(journal.KindProcess, p.ID, sid, ev); err != nil {
				return err
			}
		}
	}
	settled := make(chan sandbox.Settled, len(plans))
	waiting := 0
	for _, pl := range plans {
		if pl.err != nil {
			rt.log.Warn("sandbox left unreconciled", "sandbox", pl.state.ID, "err", pl.err)
			rt.mu.Lock()
			rt.unreconciled[pl.state.ID] = unreconciled{state: pl.state, why: pl.err}
			rt.mu.Unlock()
			report.Sandboxes = append(report.Sandboxes, unreconciledLine(pl))
			continue
		}
		waiting++
		_, err := rt.spawn(sandbox.Params{ID: pl.state.ID, Spec: pl.state.Spec, Recover: &sandbox.Recover{
			State: pl.state, Processes: l.processes[pl.state.ID], Observed: pl.obs,
			StopProcesses: opts.StopAdoptedProcesses, Settled: settled,
		}})
		if err != nil {
			return err
		}
		report.Sandboxes = append(report.Sandboxes, RecoveredSandbox{ID: pl.state.ID, From: pl.state.Phase})
	}
	orphans, err := rt.sweepOrphans(ctx, owned, l)
	report.Orphans = orphanLines(orphans)
	if err != nil {
		return err
	}
	wait := opts.RecoveryTimeout
	if wait <= 0 {
		wait = 5 * time.Minute
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	byID := map[string]int{}
	for i, s := range report.Sandboxes {
		byID[s.ID] = i
	}
	var decisions []string
	for range waiting {
		select {
		case st := <-settled:
			r := &report.Sandboxes[byID[st.ID]]
			r.Decision, r.Observed, r.Settled = string(st.Decision), st.Observed, st.Phase
			if st.Err != nil {
				r.Error = st.Err.Error()
			}
			if st.Changed || st.Err != nil {
				decisions = append(decisions, st.ID+": "+string(st.Decision))
			}
			if st.Err != nil {
				rt.log.Warn("recovery left a sandbox unsettled", "sandbox", st.ID, "decision", st.Decision, "err", st.Err)
			}
		case <-timer.C:
			return spec.Errorf(spec.CodeTimeout, "recovery", "recovery did not settle every sandbox within %v", wait)
		case <-ctx.Done():
			return spec.Wrap(spec.CodeCancelled, "recovery", ctx.Err(), "recovering")
		}
	}
	sort.Strings(decisions)
	report.Duration = time.Since(start)
	// Only a recovery that changed something is journaled: a runtime
	// restarted over the same kept sandboxes adds nothing to any stream.
	if len(decisions) > 0 || len(orphans) > 0 {
		ran := lifecycle.RecoveryRan{Sandboxes: len(plans), Processes: l.count, Orphans: len(orphans), Decisions: decisions}
		if _, err := rt.deps.Record(journal.KindRuntime, "recovery", "", ran); err != nil {
			return err
		}
	}
	rt.mu.Lock()
	rt.recovery = report
	rt.mu.Unlock()
	return nil
}

// unreconciledLine is the report's line for a sandbox left unreconciled.
func unreconciledLine(pl plan) RecoveredSandbox {
	return RecoveredSandbox{ID: pl.state.ID, From: pl.state.Phase, Decision: Unreconciled, Settled: pl.state.Phase,
		Observed: "left as it is: " + pl.err.Error(), Error: pl.err.Error()}
}

type plan struct {
	state lifecycle.Sandbox
	obs   dockerio.Observed
	// err: Docker could not be asked about this sandbox; it is left
	// unreconciled (listed, refused for work) rather than guessed at.
	err error
}

// observe folds the journal's live entities and reads what Docker shows of
// each sandbox and of the owner's resources. It changes nothing: every
// sandbox is observed before any is acted on, so a daemon that cannot answer
// fails the recovery with nothing touched.
func observe(ctx context.Context, j *journal.Journal, engine dockerio.Inventory) (live, []plan, []dockerio.Owned, error) {
	owner := j.Owner()
	l, err := loadLive(j)
	if err != nil {
		return l, nil, nil, err
	}
	owned, err := engine.ListOwned(ctx, owner)
	if err != nil {
		return l, nil, nil, err
	}
	var plans []plan
	for _, s := range l.sandboxes {
		if err := l.unfolded[s.ID]; err != nil {
			plans = append(plans, plan{state: s, err: err})
			continue
		}
		obs, err := engine.InspectSandbox(ctx, sandbox.Handle(owner, s))
		if err != nil {
			err = fmt.Errorf("observing sandbox %s: %w", s.ID, err)
		}
		plans = append(plans, plan{state: s, obs: obs, err: err})
	}
	sort.Slice(plans, func(i, k int) bool { return plans[i].state.Reserved.Before(plans[k].state.Reserved) })
	return l, plans, owned, nil
}

// orphansOf lists the owned resources whose sandbox is not live. The
// owner's shared outside network (allowlist sandboxes' egress) belongs to
// no one sandbox: it is an orphan when no live sandbox has the allowlist
// network, so nothing outlives the last one.
func orphansOf(owned []dockerio.Owned, l live) []dockerio.Resource {
	needOutside := false
	for _, s := range l.sandboxes {
		if s.Spec.Policy.Network == spec.NetworkAllowlist {
			needOutside = true
			break
		}
	}
	var orphans []dockerio.Resource
	for _, g := range owned {
		if _, ok := l.sandboxes[g.Sandbox]; !ok {
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

// PlanRecovery reports what Open's recovery would decide for the journal
// and the daemon, touching nothing: no Docker resource and no journal
// record. It takes the journal's lock like Open (a running runtime makes it
// fail with journal_locked).
func PlanRecovery(ctx context.Context, opts Options) (RecoveryReport, error) {
	var report RecoveryReport
	path := opts.Journal
	if path == "" {
		var err error
		if path, err = journal.DefaultPath(); err != nil {
			return report, err
		}
	}
	j, err := journal.Open(path, journal.Options{Owner: opts.Owner, LockTimeout: opts.LockTimeout, ReadOnly: true})
	if err != nil {
		return report, err
	}
	defer func() { _ = j.Close() }() // opened read-only: nothing to lose
	engine, closer, err := engineFor(opts)
	if err != nil {
		return report, err
	}
	if closer != nil {
		defer func() { _ = closer() }() // the engine's connection: nothing to lose
	}
	daemon, err := engine.Preflight(ctx)
	if err != nil {
		return report, err
	}
	if id := j.DaemonID(); id != "" && id != daemon.ID {
		return report, spec.Errorf(spec.CodeIdentityMismatch, "recovery", "journal %s belongs to daemon %s, this is %s", path, id, daemon.ID)
	}
	l, plans, owned, err := observe(ctx, j, engine)
	if err != nil {
		return report, err
	}
	report.Processes = l.count
	for _, pl := range plans {
		if pl.err != nil {
			report.Sandboxes = append(report.Sandboxes, unreconciledLine(pl))
			continue
		}
		dec, why := sandbox.Decide(pl.state, pl.obs, daemon.Revision)
		report.Sandboxes = append(report.Sandboxes, RecoveredSandbox{ID: pl.state.ID, From: pl.state.Phase, Decision: string(dec), Observed: why})
	}
	report.Orphans = orphanLines(orphansOf(owned, l))
	return report, nil
}

// sweepOrphans removes every resource labelled with this owner whose
// sandbox is not live in the journal, containers first (a volume or network
// in use cannot go), journaling each removal after it happened.
func (rt *Runtime) sweepOrphans(ctx context.Context, owned []dockerio.Owned, l live) ([]dockerio.Resource, error) {
	var removed []dockerio.Resource
	for _, r := range orphansOf(owned, l) {
		if r.Owner != rt.journal.Owner() {
			// ListOwned filters by owner; never trust a reply blindly.
			return nil, spec.Errorf(spec.CodeConflict, "recovery", "%s %s carries owner %q, not ours: refusing to touch it", r.Kind, r.ID, r.Owner)
		}
		if err := rt.engine.RemoveOwned(ctx, r); err != nil && !spec.IsCode(err, spec.CodeNotFound) {
			// Left for the next Open; it belongs to no live sandbox, so
			// nothing waits on it.
			rt.log.Warn("an orphan could not be removed", "kind", r.Kind, "id", r.ID, "sandbox", r.Sandbox, "err", err)
			continue
		}
		failpoint.Hit(failpoint.RecoveryOrphan)
		ev := lifecycle.OrphanRemoved{Kind: string(r.Kind), ID: r.ID, Name: r.Name, Sandbox: r.Sandbox, Role: string(r.Role)}
		if _, err := rt.deps.Record(journal.KindRuntime, "orphans", "", ev); err != nil {
			return removed, err
		}
		removed = append(removed, r)
	}
	return removed, nil
}
