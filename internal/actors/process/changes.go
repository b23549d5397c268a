package process

import (
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/recorder"
)

// changes turns what the warden reported the process did under /workspace
// into the journal's form, keeping the small files' text in the recorder
// first (the exit that names it is journaled after). A process whose
// report never came (the link ended first, no spawn) says why.
func (w *wardenTransport) changes() *lifecycle.Changes {
	if w.proc == nil {
		return &lifecycle.Changes{Untracked: "the warden never ran it"}
	}
	m, ok := w.proc.Changes()
	if !ok {
		return &lifecycle.Changes{Untracked: "the warden's link ended before it reported the changes"}
	}
	c := &lifecycle.Changes{
		Untracked: m.Untracked, Incomplete: m.Incomplete,
		Created: m.Created, Modified: m.Modified, Deleted: m.Deleted, Renamed: m.Renamed,
		Omitted: m.Omitted,
	}
	var texts []recorder.ChangeText
	for _, e := range m.Entries {
		c.Entries = append(c.Entries, lifecycle.Change{
			Op: e.Op, Path: e.Path, From: e.From, Kind: e.Kind, Size: e.Size, Mode: e.Mode,
			SHA256: e.SHA256, Unhashed: e.Unhashed, Text: e.Before != nil || e.After != nil,
		})
		if e.Before != nil || e.After != nil {
			texts = append(texts, recorder.ChangeText{Path: e.Path, Before: e.Before, After: e.After})
		}
	}
	if len(texts) > 0 && w.a.deps.Recorder != nil {
		if err := w.a.deps.Recorder.WriteChanges(w.a.p.ID, texts); err != nil {
			w.a.deps.Log.Warn("the changed files' text is not kept: no unified diff for them", "process", w.a.p.ID, "err", err)
			for i := range c.Entries {
				c.Entries[i].Text = false
			}
		}
	} else if len(texts) > 0 {
		for i := range c.Entries {
			c.Entries[i].Text = false
		}
	}
	return c
}
