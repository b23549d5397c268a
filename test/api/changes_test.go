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

// TestChangesCannotBeFooled: in a real sandbox, the three ways a hostile
// review hid a change from the record (issue 34) are each recorded: a
// rewrite at the same size with its mtime put back, writes through a
// symlink in /tmp and through /proc/self/cwd; and a process whose only
// call on a path was a failing rmdir is not credited with the file a
// neighbour made there while it ran.
func TestChangesCannotBeFooled(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	sb := e.Sandbox(t, spec.Kept)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := func(script string) lifecycle.Changes {
		t.Helper()
		_, errOut, res, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"sh", "-c", script}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%s: %+v %v %s", script, res, err, errOut)
		}
		ex := exitOf(t, e.RT, lastProcess(t, e.RT, sb.ID()))
		if ex.Changes == nil || ex.Changes.Untracked != "" || ex.Changes.Incomplete != "" {
			t.Fatalf("%s: changes %+v", script, ex.Changes)
		}
		return *ex.Changes
	}
	run("echo aaaa > same.txt; echo old > target.txt")
	for _, tc := range []struct {
		script string
		want   []string
	}{
		{"touch -r same.txt /tmp/ref && echo bbbb > same.txt && touch -r /tmp/ref same.txt", []string{"modified file same.txt"}},
		{"ln -s /workspace/work /tmp/w && echo x > /tmp/w/through-dir.txt", []string{"created file through-dir.txt"}},
		{"ln -s /workspace/work/target.txt /tmp/t && echo new > /tmp/t", []string{"modified file target.txt"}},
		{"echo z > /proc/self/cwd/through-proc.txt", []string{"created file through-proc.txt"}},
	} {
		if got := changeLines(ptr(run(tc.script))); !slices.Equal(got, tc.want) {
			t.Errorf("%s:\n got %q\nwant %q", tc.script, got, tc.want)
		}
	}

	// The failing rmdir, and the neighbour.
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", "rmdir neighbour.txt 2>/dev/null; : > tried; while [ ! -e neighbour.txt ]; do sleep 0.01; done"}, Stdout: spec.Discard, Stderr: spec.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if got := changeLines(ptr(run("while [ ! -e tried ]; do sleep 0.01; done; echo n > neighbour.txt"))); !slices.Equal(got, []string{"created file neighbour.txt"}) {
		t.Errorf("the neighbour's changes: %q", got)
	}
	if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	ex := exitOf(t, e.RT, p.ID())
	if got := changeLines(ex.Changes); !slices.Equal(got, []string{"created file tried"}) {
		t.Errorf("the failing rmdir's process was credited with %q", got)
	}
}

func ptr[T any](v T) *T { return &v }
