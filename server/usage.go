package server

import (
	"context"

	stockadev1 "github.com/stockade/stockade/api/stockade/v1"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/apiconv"
)

// Usage answers the usage ledger of the sandboxes asked for.
func (v journalService) Usage(ctx context.Context, req *stockadev1.UsageRequest) (*stockadev1.UsageResponse, error) {
	u, err := v.s.h.Usage(ctx, fromUsageQuery(req))
	if err != nil {
		return nil, toStatus(err)
	}
	return wireUsage(u), nil
}

// fromUsageQuery is the request as a host.UsageQuery.
func fromUsageQuery(w *stockadev1.UsageRequest) host.UsageQuery {
	return host.UsageQuery{Sandbox: w.GetSandboxId(), Labels: w.GetLabels(), Since: apiconv.Unstamp(w.GetSince()), Workspace: w.GetWorkspace()}
}

// wireUsage is u on the wire (its total is the client's to sum).
func wireUsage(u host.Usage) *stockadev1.UsageResponse {
	w := &stockadev1.UsageResponse{}
	for _, s := range u.Sandboxes {
		ws := &stockadev1.SandboxUsage{Id: s.ID, Labels: s.Labels, Pool: s.Pool, Image: s.Image, Phase: string(s.Phase),
			Reserved: apiconv.Stamp(s.Reserved), Ended: apiconv.Stamp(s.Ended), Workload: apiconv.WorkloadUsage(s.Workload), Complete: s.Complete,
			OutputBytes: s.OutputBytes, EgressAllowed: s.EgressAllowed, EgressDenied: s.EgressDenied, EgressBytes: s.EgressBytes}
		if w := s.Workspace; w != nil {
			ws.Workspace = &stockadev1.WorkspaceSize{At: apiconv.Stamp(w.At), Bytes: w.Bytes, Files: w.Files}
		}
		for _, p := range s.Processes {
			ws.Processes = append(ws.Processes, &stockadev1.ProcessUsageEntry{Id: p.ID, Argv: p.Argv, Phase: string(p.Phase), Reason: p.Reason,
				ExitCode: apiconv.OptInt(p.ExitCode), OutputBytes: p.Output, Usage: apiconv.ProcessUsage(p.Usage)})
		}
		w.Sandboxes = append(w.Sandboxes, ws)
	}
	return w
}
