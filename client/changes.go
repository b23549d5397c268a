package client

import (
	"context"

	stockadev1 "github.com/stockade/stockade/api/stockade/v1"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/lifecycle"
)

// Changes says what a process did under /workspace, with its kept text
// files' diffs (host.Runtime.Changes).
func (c *Client) Changes(ctx context.Context, processID string) (host.ProcessChanges, error) {
	w, err := c.procs.Changes(ctx, &stockadev1.ChangesRequest{ProcessId: processID})
	if err != nil {
		return host.ProcessChanges{}, fromStatus(err)
	}
	d := host.ProcessChanges{Process: w.ProcessId, Sandbox: w.SandboxId}
	if wc := w.Changes; wc != nil {
		ch := &lifecycle.Changes{Untracked: wc.Untracked, Incomplete: wc.Incomplete, Created: int(wc.Created), Modified: int(wc.Modified),
			Deleted: int(wc.Deleted), Renamed: int(wc.Renamed), Omitted: int(wc.Omitted)}
		for _, e := range wc.Entries {
			ch.Entries = append(ch.Entries, lifecycle.Change{Op: e.Op, Path: e.Path, From: e.From, Kind: e.Kind, Size: e.Size, Mode: e.Mode,
				SHA256: e.Sha256, Unhashed: e.Unhashed, Text: e.Text})
		}
		d.Changes = ch
	}
	for _, f := range w.Diffs {
		d.Diffs = append(d.Diffs, host.FileDiff{Path: f.Path, Unified: f.Unified, Summary: f.Summary})
	}
	return d, nil
}
