package server

import (
	"context"

	stockadev1 "github.com/stockade/stockade/api/stockade/v1"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/apiconv"
)

// Changes answers what a process did under /workspace, typed.
func (v processes) Changes(ctx context.Context, req *stockadev1.ChangesRequest) (*stockadev1.ProcessChanges, error) {
	d, err := v.s.h.Changes(ctx, req.ProcessId)
	if err != nil {
		return nil, toStatus(err)
	}
	return wireChanges(d), nil
}

func wireChanges(d host.ProcessChanges) *stockadev1.ProcessChanges {
	out := &stockadev1.ProcessChanges{ProcessId: d.Process, SandboxId: d.Sandbox, Changes: apiconv.Changes(d.Changes)}
	for _, f := range d.Diffs {
		out.Diffs = append(out.Diffs, &stockadev1.FileDiff{Path: f.Path, Unified: f.Unified, Summary: f.Summary})
	}
	return out
}
