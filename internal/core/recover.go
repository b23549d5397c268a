package core

import (
	"context"
	"sort"
	"time"

	"github.com/stockade/stockade/statedir"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/actors/sandbox"
	"github.com/stockade/stockade/internal/failpoint"
	"github.com/stockade/stockade/internal/recovery"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// Recovery returns the report of the recovery Open ran.
func (rt *Runtime) Recovery() host.RecoveryReport {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.recovery
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
	l, plans, owned, err := recovery.Observe(ctx, rt.journal, rt.engine)
	if err != nil {
		return err
	}
	report := host.RecoveryReport{Processes: l.Count}
	// Processes whose sandbox is not live cannot run: settle them lost.
	for sid, procs := range l.Processes {
		if _, ok := l.Sandboxes[sid]; ok {
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
		if pl.Err != nil {
			rt.log.Warn("sandbox left unreconciled", "sandbox", pl.State.ID, "err", pl.Err)
			rt.mu.Lock()
			rt.unreconciled[pl.State.ID] = unreconciled{state: pl.State, why: pl.Err}
			rt.mu.Unlock()
			report.Sandboxes = append(report.Sandboxes, recovery.UnreconciledLine(pl))
			continue
		}
		waiting++
		_, err := rt.spawn(sandbox.Params{ID: pl.State.ID, Spec: pl.State.Spec, Recover: &sandbox.Recover{
			State: pl.State, Processes: l.Processes[pl.State.ID], Observed: pl.Obs,
			StopProcesses: opts.StopAdoptedProcesses, Settled: settled,
		}})
		if err != nil {
			return err
		}
		report.Sandboxes = append(report.Sandboxes, host.RecoveredSandbox{ID: pl.State.ID, From: pl.State.Phase})
	}
	orphans, err := rt.sweepOrphans(ctx, owned, l)
	report.Orphans = recovery.OrphanLines(orphans)
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
		ran := lifecycle.RecoveryRan{Sandboxes: len(plans), Processes: l.Count, Orphans: len(orphans), Decisions: decisions}
		if _, err := rt.deps.Record(journal.KindRuntime, "recovery", "", ran); err != nil {
			return err
		}
	}
	rt.mu.Lock()
	rt.recovery = report
	rt.mu.Unlock()
	return nil
}

// PlanRecovery reports what Open's recovery would decide for the journal
// and the daemon, touching nothing: no Docker resource and no journal
// record. It takes the journal's lock like Open (a running runtime makes it
// fail with journal_locked).
func PlanRecovery(ctx context.Context, opts Options) (host.RecoveryReport, error) {
	var report host.RecoveryReport
	path := opts.Journal
	if path == "" {
		var err error
		if path, err = statedir.DefaultJournal(); err != nil {
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
	l, plans, owned, err := recovery.Observe(ctx, j, engine)
	if err != nil {
		return report, err
	}
	report.Processes = l.Count
	for _, pl := range plans {
		if pl.Err != nil {
			report.Sandboxes = append(report.Sandboxes, recovery.UnreconciledLine(pl))
			continue
		}
		dec, why := sandbox.Decide(pl.State, pl.Obs, daemon.Revision)
		report.Sandboxes = append(report.Sandboxes, host.RecoveredSandbox{ID: pl.State.ID, From: pl.State.Phase, Decision: string(dec), Observed: why})
	}
	report.Orphans = recovery.OrphanLines(recovery.OrphansOf(owned, l))
	return report, nil
}

// sweepOrphans removes every resource labelled with this owner whose
// sandbox is not live in the journal, containers first (a volume or network
// in use cannot go), journaling each removal after it happened.
func (rt *Runtime) sweepOrphans(ctx context.Context, owned []dockerio.Owned, l recovery.Live) ([]dockerio.Resource, error) {
	var removed []dockerio.Resource
	for _, r := range recovery.OrphansOf(owned, l) {
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

// Unreconciled is the decision recorded for a sandbox recovery could not
// observe.
const Unreconciled = recovery.Unreconciled
