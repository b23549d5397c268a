package api

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/recorder"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/statedir"
	"github.com/stockade/stockade/test/testkit"
)

// exitOf returns a process's journaled exit.
func exitOf(t *testing.T, rt *stockade.Runtime, id string) lifecycle.ProcessExited {
	t.Helper()
	st, err := rt.ReplayProcess(context.Background(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.Exit == nil {
		t.Fatalf("process %s has no journaled exit (%s)", id, st.Phase)
	}
	return *st.Exit
}

// changeLines is a process's journaled changes as sorted "op kind path
// [from]" lines, paths relative to /workspace/work.
func changeLines(c *lifecycle.Changes) []string {
	var out []string
	for _, e := range c.Entries {
		l := fmt.Sprintf("%s %s %s", e.Op, e.Kind, strings.TrimPrefix(e.Path, "/workspace/work/"))
		if e.From != "" {
			l += " from " + strings.TrimPrefix(e.From, "/workspace/work/")
		}
		out = append(out, l)
	}
	sort.Strings(out)
	return out
}

// TestChangesPerProcess: a process that modifies, deletes, renames and
// creates files shows exactly those changes, attributed by who wrote them:
// nothing of a neighbour that writes files all through its life, and the
// neighbour's changes hold none of its. The small text file's before and
// after are kept for a diff; a process that writes nothing has none.
func TestChangesPerProcess(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	sb := e.Sandbox(t, spec.Kept)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sh := func(script string) spec.Process {
		return spec.Process{Argv: []string{"sh", "-c", script}}
	}
	if _, _, res, err := testkit.RunOut(t, sb, sh(`printf 'a\nb\n' > keep.txt; echo bye > gone.txt; echo moving > old.txt; head -c 3000 /dev/zero > blob.bin`)); err != nil || res.ExitCode != 0 {
		t.Fatalf("seed: %+v %v", res, err)
	}
	// The neighbour writes a file every 10 ms from before the process
	// under test starts until after it ended.
	neighbour, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", `i=0; while [ ! -e stop ]; do i=$((i+1)); echo $i > n$i.txt; sleep 0.01; done; echo $i`}, Stderr: spec.Discard})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the neighbour's first file", func() bool {
		out, _, _, _ := testkit.RunOut(t, sb, spec.Process{Argv: []string{"sh", "-c", "ls n1.txt 2>/dev/null"}, NoChanges: true})
		return strings.TrimSpace(out) == "n1.txt"
	})
	_, _, res, err := testkit.RunOut(t, sb, sh(`sleep 0.1; printf 'c\n' >> keep.txt; rm gone.txt; mv old.txt new.txt; mkdir d; echo inner > d/f.txt; head -c 10 /dev/zero >> blob.bin; sleep 0.1`))
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("the process under test: %+v %v", res, err)
	}
	pid := lastProcess(t, e.RT, sb.ID())
	if _, _, res, err := testkit.RunOut(t, sb, sh("touch stop")); err != nil || res.ExitCode != 0 {
		t.Fatalf("stop: %+v %v", res, err)
	}
	if _, err := io.ReadAll(neighbour.Stdout()); err != nil {
		t.Fatal(err)
	}
	if res, err := neighbour.Wait(ctx); err != nil || res.ExitCode != 0 {
		t.Fatalf("neighbour: %+v %v", res, err)
	}

	ex := exitOf(t, e.RT, pid)
	if ex.Changes == nil || ex.Changes.Untracked != "" || ex.Changes.Incomplete != "" {
		t.Fatalf("changes not tracked: %+v", ex.Changes)
	}
	want := []string{"created dir d", "created file d/f.txt", "deleted file gone.txt", "modified file blob.bin", "modified file keep.txt", "renamed file new.txt from old.txt"}
	if got := changeLines(ex.Changes); !slices.Equal(got, want) {
		t.Fatalf("changes of the process under test:\n got %q\nwant %q", got, want)
	}
	c := ex.Changes
	if c.Created != 2 || c.Modified != 2 || c.Deleted != 1 || c.Renamed != 1 || c.Omitted != 0 {
		t.Fatalf("totals: %+v", c)
	}
	for _, ch := range c.Entries {
		switch strings.TrimPrefix(ch.Path, "/workspace/work/") {
		case "blob.bin":
			if ch.Size != 3010 || ch.Text || len(ch.SHA256) != 64 {
				t.Fatalf("blob.bin: %+v", ch)
			}
		case "keep.txt":
			if !ch.Text || ch.Size != 6 {
				t.Fatalf("keep.txt: %+v", ch)
			}
		}
	}
	texts, err := recorder.ReadChanges(statedir.Recordings(e.Journal), pid)
	if err != nil {
		t.Fatal(err)
	}
	var keep *recorder.ChangeText
	for i := range texts {
		if texts[i].Path == "/workspace/work/keep.txt" {
			keep = &texts[i]
		}
	}
	if keep == nil || keep.Before == nil || keep.After == nil || *keep.Before != "a\nb\n" || *keep.After != "a\nb\nc\n" {
		t.Fatalf("keep.txt's kept text: %+v", texts)
	}

	// The neighbour's changes: only its own files.
	nex := exitOf(t, e.RT, neighbour.ID())
	if nex.Changes == nil || nex.Changes.Deleted+nex.Changes.Renamed+nex.Changes.Modified != 0 || nex.Changes.Created < 2 {
		t.Fatalf("neighbour's changes: %+v", nex.Changes)
	}
	for _, ch := range nex.Changes.Entries {
		if name := strings.TrimPrefix(ch.Path, "/workspace/work/"); !strings.HasPrefix(name, "n") || !strings.HasSuffix(name, ".txt") || name == "new.txt" {
			t.Fatalf("the neighbour was given %q", ch.Path)
		}
	}
	// A process that writes nothing changes nothing; one asked not to be
	// tracked says so.
	if _, _, res, err := testkit.RunOut(t, sb, sh("cat keep.txt >/dev/null")); err != nil || res.ExitCode != 0 {
		t.Fatal(res, err)
	}
	if got := exitOf(t, e.RT, lastProcess(t, e.RT, sb.ID())).Changes; got == nil || got.Total() != 0 || got.Untracked != "" {
		t.Fatalf("a reader's changes: %+v", got)
	}
	if _, _, res, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"sh", "-c", "echo x > untracked.txt"}, NoChanges: true}); err != nil || res.ExitCode != 0 {
		t.Fatal(res, err)
	}
	if got := exitOf(t, e.RT, lastProcess(t, e.RT, sb.ID())).Changes; got == nil || got.Untracked == "" || got.Total() != 0 {
		t.Fatalf("an untracked process's changes: %+v", got)
	}
}

// lastProcess is the id of the sandbox's latest process.
func lastProcess(t *testing.T, rt *stockade.Runtime, sandbox string) string {
	t.Helper()
	evs, err := rt.History(context.Background(), sandbox)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Kind == "process" && evs[i].Type == (lifecycle.ProcessReserved{}).Type() {
			return evs[i].ID
		}
	}
	t.Fatal("no process")
	return ""
}
