package test

import (
	"bufio"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/spec"
)

// paLine reads lines from r until one is read, failing the test on an
// error.
func paLine(t *testing.T, r *bufio.Reader, what string) string {
	t.Helper()
	l, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("%s: %q %v", what, l, err)
	}
	return l
}

// TestPaStopDuringConsistentCopy (issue 19, defect 1): a process stopped
// while a consistent copy holds the workload frozen, the copy held longer
// than the stop's grace plus the wait for the reap. The frozen warden can
// neither kill nor report: the stop waits for the thaw. The stopped process
// ends signaled (not lost), its streaming neighbour goes on and ends
// normally, and no warden is journaled lost.
func TestPaStopDuringConsistentCopy(t *testing.T) {
	const grace = time.Second
	e := newAPI(t, stockade.Options{StopGrace: grace})
	sb := e.sandbox(t, spec.Kept)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	stream := "while [ ! -e /tmp/%s ]; do echo tick; sleep 0.1; done"
	stopped, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", strings.ReplaceAll(stream, "%s", "never")}, Stderr: spec.Discard})
	if err != nil {
		t.Fatal(err)
	}
	neighbour, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", strings.ReplaceAll(stream, "%s", "done")}, Stderr: spec.Discard})
	if err != nil {
		t.Fatal(err)
	}
	so, no := bufio.NewReader(stopped.Stdout()), bufio.NewReader(neighbour.Stdout())
	paLine(t, so, "the stopped process's first line")
	paLine(t, no, "the neighbour's first line")
	// The stopped process's output is drained in the background (its end
	// is what the test waits for); the neighbour's is read by the test.
	go io.Copy(io.Discard, so)

	rc, live, err := sb.Get(ctx, "work", true)
	if err != nil || live {
		t.Fatalf("consistent get: live %v %v", live, err)
	}
	if err := stopped.Stop(ctx); err != nil {
		t.Fatalf("stop during the freeze: %v", err)
	}
	// Before the fix the warden was given up StopGrace (TERM → KILL) plus
	// StopGrace+5s (KILL → no reap) after the stop: hold the freeze past
	// both, with a margin.
	hold := grace + grace + 5*time.Second + 3*time.Second
	select {
	case <-time.After(hold):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	io.Copy(io.Discard, rc)
	if err := rc.Close(); err != nil {
		t.Fatal(err)
	}

	res, err := stopped.Wait(ctx)
	if res.Reason != "signaled" {
		t.Fatalf("the process stopped during the freeze: %+v %v, want signaled", res, err)
	}
	// The neighbour streams on after the thaw (lines still come), and ends
	// normally once told to.
	for i := 0; i < 3; i++ {
		if l := paLine(t, no, "the neighbour after the thaw"); l != "tick\n" {
			t.Fatalf("the neighbour printed %q", l)
		}
	}
	if _, _, r, err := runOut(t, sb, spec.Process{Argv: []string{"touch", "/tmp/done"}}); err != nil || r.ExitCode != 0 {
		t.Fatalf("touch: %+v %v", r, err)
	}
	go io.Copy(io.Discard, no)
	if res, err := neighbour.Wait(ctx); err != nil || res.Reason != "exited" || res.ExitCode != 0 {
		t.Fatalf("the neighbour: %+v %v, want exited 0", res, err)
	}
	if types := sandboxTypes(t, e.rt, sb.ID()); count(types, "sandbox.warden_lost") != 0 || count(types, "sandbox.warden_started") != 1 {
		t.Fatalf("sandbox history %v: want the one warden, never lost", types)
	}
}
