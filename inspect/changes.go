package inspect

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/recorder"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/textdiff"
)

// Changes is what process id did under /workspace (host.Runtime.Changes):
// its journaled list, read through in, and the unified diffs of the text
// files the recorder kept in recordings (the journal's recording
// directory, statedir.Recordings). conflict while the process has not
// ended.
func Changes(ctx context.Context, in host.Inspector, recordings, id string) (host.ProcessChanges, error) {
	sandbox, exit, err := processExit(ctx, in, id)
	if err != nil {
		return host.ProcessChanges{}, err
	}
	texts, err := recorder.ReadChanges(recordings, id)
	if err != nil {
		return host.ProcessChanges{}, err
	}
	return processChanges(id, sandbox, exit.Changes, texts), nil
}

// processExit finds a process's sandbox (its folded state) and its
// journaled exit (in the sandbox's history).
func processExit(ctx context.Context, in host.Inspector, id string) (string, lifecycle.ProcessExited, error) {
	var x lifecycle.ProcessExited
	st, err := in.ReplayProcess(ctx, id, 0)
	if err != nil {
		return "", x, err
	}
	evs, err := in.History(ctx, st.Sandbox)
	if err != nil {
		return st.Sandbox, x, err
	}
	for _, e := range evs {
		if e.Kind == "process" && e.ID == id && e.Type == x.Type() {
			if err := json.Unmarshal(e.Payload, &x); err != nil {
				return st.Sandbox, x, spec.Wrap(spec.CodeJournal, "changes", err, "decoding the process.exited of %s", id)
			}
			return st.Sandbox, x, nil
		}
	}
	return st.Sandbox, x, spec.Errorf(spec.CodeConflict, "changes", "process %s has not ended: its changes are journaled with its exit (wait for it, then ask again)", id)
}

func processChanges(id, sandbox string, ch *lifecycle.Changes, texts []recorder.ChangeText) host.ProcessChanges {
	d := host.ProcessChanges{Process: id, Sandbox: sandbox, Changes: ch}
	if ch == nil {
		return d
	}
	kept := map[string]recorder.ChangeText{}
	for _, t := range texts {
		kept[t.Path] = t
	}
	for _, e := range ch.Entries {
		if e.Kind != "file" {
			continue // a directory's or a link's line says it all
		}
		t, ok := kept[e.Path]
		if e.Text && ok && (t.Before != nil || e.Op == "created") && (t.After != nil || e.Op == "deleted") {
			var before, after string
			if t.Before != nil {
				before = *t.Before
			}
			if t.After != nil {
				after = *t.After
			}
			from := e.Path
			if e.Op == "renamed" && e.From != "" {
				from = e.From
			}
			u := textdiff.Unified(e.Path, before, after)
			if from != e.Path && u != "" {
				u = strings.Replace(u, "--- a/"+strings.TrimPrefix(e.Path, "/")+"\n", "--- a/"+strings.TrimPrefix(from, "/")+"\n", 1)
			}
			if u == "" {
				continue // renamed or touched, same text
			}
			d.Diffs = append(d.Diffs, host.FileDiff{Path: e.Path, Unified: u})
			continue
		}
		if e.Op == "renamed" && e.SHA256 == "" {
			continue
		}
		d.Diffs = append(d.Diffs, host.FileDiff{Path: e.Path, Summary: fileSummary(e, t, ok)})
	}
	return d
}

// fileSummary says what is known of a file whose text is not diffed.
func fileSummary(e lifecycle.Change, t recorder.ChangeText, kept bool) string {
	what := "binary or large file (text not kept)"
	if e.Text && !kept {
		what = "text not found beside the journal (removed by retention?)"
	}
	sum := ""
	if e.SHA256 != "" {
		sum = ", sha256 " + short8(e.SHA256)
	} else if e.Unhashed != "" {
		sum = ", not hashed: " + e.Unhashed
	}
	switch e.Op {
	case "deleted":
		return fmt.Sprintf("%s, %s deleted", what, humanBytes(e.Size))
	case "created":
		return fmt.Sprintf("%s, created, %s%s", what, humanBytes(e.Size), sum)
	}
	before := ""
	if kept && t.Before != nil {
		before = humanBytes(int64(len(*t.Before))) + " → "
	}
	return fmt.Sprintf("%s, %s, %s%s%s", what, e.Op, before, humanBytes(e.Size), sum)
}

func short8(sha string) string {
	if len(sha) > 8 {
		return sha[:8]
	}
	return sha
}

func humanBytes(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}
