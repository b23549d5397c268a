package inspect

import (
	"context"
	"sort"

	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/recorder"
	"github.com/stockade/stockade/spec"
)

// Usage is the usage ledger of the sandboxes q picks, as the journal holds
// it (a running sandbox's workload as of its last journaled sample: the
// runtime's own Usage samples it afresh) and the egress decisions recorded
// under recordings ("": none read). A sandbox asked by id that the journal
// does not hold is not_found; a query no sandbox matches is an empty
// report.
func (r *Reader) Usage(ctx context.Context, q host.UsageQuery, recordings string) (host.Usage, error) {
	if err := ctx.Err(); err != nil {
		return host.Usage{}, cancelled(err)
	}
	var sandboxes, procs []journal.Key
	err := r.j.Streams(func(k journal.Key) error {
		switch {
		case k.Kind == journal.KindSandbox && (q.Sandbox == "" || k.ID == q.Sandbox):
			sandboxes = append(sandboxes, k)
		case k.Kind == journal.KindProcess:
			procs = append(procs, k)
		}
		return nil
	})
	if err != nil {
		return host.Usage{}, err
	}
	if q.Sandbox != "" && len(sandboxes) == 0 {
		return host.Usage{}, spec.Errorf(spec.CodeNotFound, "usage", "no sandbox %s in the journal (`stockade sandbox ls` lists the live ones, `stockade journal ls` what the journal holds)", q.Sandbox)
	}
	var out host.Usage
	index := map[string]int{}
	for _, k := range sandboxes {
		if err := ctx.Err(); err != nil {
			return host.Usage{}, cancelled(err)
		}
		s, err := r.ReplaySandbox(ctx, k.ID, 0)
		if err != nil {
			return host.Usage{}, err
		}
		if !q.Matches(s) {
			continue
		}
		index[s.ID] = len(out.Sandboxes)
		out.Sandboxes = append(out.Sandboxes, sandboxUsage(s))
	}
	for _, k := range procs {
		sandbox, err := r.processSandbox(k)
		if err != nil {
			return host.Usage{}, err
		}
		i, ok := index[sandbox]
		if !ok {
			continue
		}
		p, err := r.ReplayProcess(ctx, k.ID, 0)
		if err != nil {
			return host.Usage{}, err
		}
		su := &out.Sandboxes[i]
		pu := host.ProcessUsage{ID: p.ID, Argv: p.Spec.Argv, Phase: p.Phase}
		if e := p.Exit; e != nil {
			pu.Reason, pu.ExitCode, pu.Usage = string(e.Reason), e.ExitCode, e.Usage
			pu.Output = e.StdoutBytes + e.StderrBytes
			su.OutputBytes += pu.Output
		}
		su.Processes = append(su.Processes, pu)
	}
	for i := range out.Sandboxes {
		su := &out.Sandboxes[i]
		sort.SliceStable(su.Processes, func(a, b int) bool { return su.Processes[a].ID < su.Processes[b].ID })
		if recordings == "" {
			continue
		}
		err := recorder.ReadDecisions(recordings, su.ID, func(d egress.Decision) error {
			switch d.Verdict {
			case egress.VerdictAllow:
				su.EgressAllowed++
				su.EgressBytes += d.Up + d.Down
			case egress.VerdictDeny:
				su.EgressDenied++
			}
			return nil
		})
		if err != nil && !spec.IsCode(err, spec.CodeNotFound) {
			return host.Usage{}, err
		}
	}
	sort.SliceStable(out.Sandboxes, func(a, b int) bool { return out.Sandboxes[a].Reserved.Before(out.Sandboxes[b].Reserved) })
	out.Sum()
	return out, nil
}

// processSandbox reads the sandbox a process stream's reserved event
// names (History and Usage group processes by it).
func (r *Reader) processSandbox(k journal.Key) (string, error) {
	var sandbox string
	err := r.j.Read(k, 1, 1, func(e journal.Event) error {
		ev, err := lifecycle.Decode(e.Type, e.Payload)
		if res, ok := ev.(lifecycle.ProcessReserved); err == nil && ok {
			sandbox = res.Sandbox
		}
		return err
	})
	return sandbox, err
}

// sandboxUsage is a sandbox's ledger from its folded state.
func sandboxUsage(s lifecycle.Sandbox) host.SandboxUsage {
	su := host.SandboxUsage{ID: s.ID, Labels: s.Spec.Labels, Pool: s.Pool, Image: s.Spec.Image, Phase: s.Shown(), Reserved: s.Reserved}
	if s.Exit != nil {
		su.Ended = s.At
	}
	if u := s.Usage; u != nil {
		su.Workload = u.Usage
	}
	if s.Phase == lifecycle.PhaseExited || s.Phase == lifecycle.PhaseRemoving || s.Phase == lifecycle.PhaseRemoved {
		// Whole once the stop read the run's last counters; a workload
		// that never ran used nothing.
		su.Complete = s.Usage != nil && s.Usage.RunEnded && s.Usage.Final || !s.Started
	}
	return su
}
