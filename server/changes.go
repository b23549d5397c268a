package server

import (
	"context"

	stockadev1 "github.com/stockade/stockade/api/stockade/v1"
	"github.com/stockade/stockade/host"
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
	out := &stockadev1.ProcessChanges{ProcessId: d.Process, SandboxId: d.Sandbox}
	if c := d.Changes; c != nil {
		w := &stockadev1.Changes{Untracked: c.Untracked, Incomplete: c.Incomplete, Created: int64(c.Created), Modified: int64(c.Modified),
			Deleted: int64(c.Deleted), Renamed: int64(c.Renamed), Omitted: int64(c.Omitted)}
		for _, e := range c.Entries {
			w.Entries = append(w.Entries, &stockadev1.Change{Op: e.Op, Path: e.Path, From: e.From, Kind: e.Kind, Size: e.Size, Mode: e.Mode,
				Sha256: e.SHA256, Unhashed: e.Unhashed, Text: e.Text})
		}
		out.Changes = w
	}
	for _, f := range d.Diffs {
		out.Diffs = append(out.Diffs, &stockadev1.FileDiff{Path: f.Path, Unified: f.Unified, Summary: f.Summary})
	}
	return out
}
