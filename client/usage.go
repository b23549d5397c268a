package client

import (
	"context"

	stockadev1 "github.com/stockade/stockade/api/stockade/v1"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/apiconv"
	"github.com/stockade/stockade/lifecycle"
)

// Usage is the usage ledger of the sandboxes q picks (host.Runtime.Usage).
func (c *Client) Usage(ctx context.Context, q host.UsageQuery) (host.Usage, error) {
	w, err := c.jrnl.Usage(ctx, &stockadev1.UsageRequest{SandboxId: q.Sandbox, Labels: q.Labels, Since: apiconv.Stamp(q.Since), Workspace: q.Workspace})
	if err != nil {
		return host.Usage{}, fromStatus(err)
	}
	return fromUsage(w), nil
}

// fromUsage is a usage reply as a host.Usage, summed.
func fromUsage(w *stockadev1.UsageResponse) host.Usage {
	var u host.Usage
	for _, ws := range w.GetSandboxes() {
		s := host.SandboxUsage{ID: ws.Id, Labels: ws.Labels, Pool: ws.Pool, Image: ws.Image, Phase: lifecycle.Phase(ws.Phase),
			Reserved: apiconv.Unstamp(ws.Reserved), Ended: apiconv.Unstamp(ws.Ended), Workload: apiconv.FromWorkloadUsage(ws.Workload), Complete: ws.Complete,
			OutputBytes: ws.OutputBytes, EgressAllowed: ws.EgressAllowed, EgressDenied: ws.EgressDenied, EgressBytes: ws.EgressBytes}
		if w := ws.Workspace; w != nil {
			s.Workspace = &host.WorkspaceSize{At: apiconv.Unstamp(w.At), Bytes: w.Bytes, Files: w.Files}
		}
		for _, p := range ws.Processes {
			s.Processes = append(s.Processes, host.ProcessUsage{ID: p.Id, Argv: p.Argv, Phase: lifecycle.Phase(p.Phase), Reason: p.Reason,
				ExitCode: apiconv.UnoptInt(p.ExitCode), Output: p.OutputBytes, Usage: apiconv.FromProcessUsage(p.Usage)})
		}
		u.Sandboxes = append(u.Sandboxes, s)
	}
	u.Sum()
	return u
}
