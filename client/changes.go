package client

import (
	"context"

	stockadev1 "github.com/stockade/stockade/api/stockade/v1"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/apiconv"
)

// Changes says what a process did under /workspace, with its kept text
// files' diffs (host.Runtime.Changes).
func (c *Client) Changes(ctx context.Context, processID string) (host.ProcessChanges, error) {
	w, err := c.procs.Changes(ctx, &stockadev1.ChangesRequest{ProcessId: processID})
	if err != nil {
		return host.ProcessChanges{}, fromStatus(err)
	}
	d := host.ProcessChanges{Process: w.ProcessId, Sandbox: w.SandboxId, Changes: apiconv.FromChanges(w.Changes)}
	for _, f := range w.Diffs {
		d.Diffs = append(d.Diffs, host.FileDiff{Path: f.Path, Unified: f.Unified, Summary: f.Summary})
	}
	return d, nil
}
