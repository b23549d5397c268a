package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/client"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
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
	e := testkit.NewAPI(t, stockade.Options{StopGrace: grace})
	sb := e.Sandbox(t, spec.Kept)
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
	go func() { _, _ = io.Copy(io.Discard, so) }()

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
	_, _ = io.Copy(io.Discard, rc)
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
	if _, _, r, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"touch", "/tmp/done"}}); err != nil || r.ExitCode != 0 {
		t.Fatalf("touch: %+v %v", r, err)
	}
	go func() { _, _ = io.Copy(io.Discard, no) }()
	if res, err := neighbour.Wait(ctx); err != nil || res.Reason != "exited" || res.ExitCode != 0 {
		t.Fatalf("the neighbour: %+v %v, want exited 0", res, err)
	}
	if types := testkit.SandboxTypes(t, e.RT, sb.ID()); testkit.Count(types, "sandbox.warden_lost") != 0 || testkit.Count(types, "sandbox.warden_started") != 1 {
		t.Fatalf("sandbox history %v: want the one warden, never lost", types)
	}
}

// paDetached is sb as the client made it: it can start detached processes.
func paDetached(t *testing.T, sb host.Sandbox) *client.Sandbox {
	t.Helper()
	d, ok := sb.(*client.Sandbox)
	if !ok {
		t.Fatalf("a sandbox of the client is %T", sb)
	}
	return d
}

// paRestart kills the server with SIGKILL and starts another on the same
// journal; it returns the new server and a client of it (closed when t
// ends).
func paRestart(t *testing.T, ctx context.Context, e *testkit.CLIEnv, s *testkit.Served, c *client.Client) (*testkit.Served, *client.Client) {
	t.Helper()
	if err := s.Stop(t, syscall.SIGKILL); err == nil {
		t.Fatal("serve after SIGKILL exited 0")
	}
	_ = c.Close()
	next := e.Serve(t, ctx)
	return next, next.Dial(t)
}

// paLogs reads a process's whole recording: every chunk in order, no gap;
// it returns the bytes and whether the recording says complete.
func paLogs(t *testing.T, ctx context.Context, c *client.Client, id string) (string, bool) {
	t.Helper()
	var got bytes.Buffer
	sum, err := c.Logs(ctx, id, func(ch host.OutputChunk) error {
		if ch.Gap != 0 {
			return fmt.Errorf("a gap of %d bytes at %d", ch.Gap, ch.Offset)
		}
		if int64(got.Len()) != ch.Offset {
			return fmt.Errorf("chunk at %d after %d bytes", ch.Offset, got.Len())
		}
		got.Write(ch.Data)
		return nil
	})
	if err != nil {
		t.Fatalf("logs of %s: %v", id, err)
	}
	return got.String(), sum.Complete
}

// paRecorded waits until the process's recording holds at least n bytes.
func paRecorded(t *testing.T, ctx context.Context, c *client.Client, id string, n int) {
	t.Helper()
	for {
		var have int
		// The read loop creates the recording as it starts, which may be
		// just after the start returned: not there yet is "no bytes yet".
		if _, err := c.Logs(ctx, id, func(ch host.OutputChunk) error { have += len(ch.Data); return nil }); err != nil && !spec.IsCode(err, spec.CodeNotFound) {
			t.Fatalf("logs of %s: %v", id, err)
		}
		if have >= n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the recording of %s holds %d bytes, never %d: %v", id, have, n, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// paLines is what `seq from to` prints, each line padded to 64 bytes.
func paLines(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "%063d\n", i)
	}
	return b.String()
}

// paSeq is a shell loop printing paLines(from, to).
func paSeq(from, to int) string {
	return fmt.Sprintf("i=%d; while [ $i -le %d ]; do printf '%%063d\\n' $i; i=$((i+1)); done", from, to)
}

// TestPaReattachOldDetached: a detached process more than two minutes old
// when its server is killed (-9) and restarted is reattached, and its whole
// output, before and after the restart, is in its recording, complete.
func TestPaReattachOldDetached(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	e, first, c, sb := testkit.ServedKeptSandbox(t, ctx)
	const age = 2*time.Minute + 10*time.Second
	script := paSeq(1, 100) + "; while [ ! -e /tmp/go ]; do sleep 0.2; done; " + paSeq(101, 300)
	id, err := paDetached(t, sb).StartDetached(ctx, spec.Process{Argv: []string{"sh", "-c", script}})
	if err != nil {
		t.Fatalf("start detached: %v", err)
	}
	started := time.Now()
	paRecorded(t, ctx, c, id, len(paLines(1, 100)))
	select { // the process's age, the point of the test
	case <-time.After(age - time.Since(started)):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	_, c2 := paRestart(t, ctx, e, first, c)
	again, err := c2.Sandbox(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, res, err := testkit.RunIn(ctx, again, "touch /tmp/go"); err != nil || res.ExitCode != 0 {
		t.Fatalf("touch: %+v %v", res, err)
	}
	if res, err := c2.Wait(ctx, id); err != nil || res.Reason != "exited" || res.ExitCode != 0 {
		t.Fatalf("the reattached process: %+v %v, want exited 0", res, err)
	}
	got, complete := paLogs(t, ctx, c2, id)
	if want := paLines(1, 300); got != want || !complete {
		t.Fatalf("the recording of a process reattached at %v old: %d bytes (want %d), complete %v; first difference at %d", age, len(got), len(want), complete, testkit.FirstDiff(got, want))
	}
}

// TestPaReattachMidOutput: a process prints without pause while its
// server is killed (-9) and restarted; more than 8 KiB come after the
// reattach, and the recording holds every byte once, in order.
func TestPaReattachMidOutput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e, first, c, sb := testkit.ServedKeptSandbox(t, ctx)
	// The first lines come at once; the rest slowly, so that the restart
	// is mid-output and much of it comes after the reattach.
	const n = 2000
	script := paSeq(1, 64) + fmt.Sprintf("; i=65; while [ $i -le %d ]; do printf '%%063d\\n' $i; i=$((i+1)); if [ $((i %% 20)) -eq 0 ]; then sleep 0.05; fi; done", n)
	id, err := paDetached(t, sb).StartDetached(ctx, spec.Process{Argv: []string{"sh", "-c", script}})
	if err != nil {
		t.Fatalf("start detached: %v", err)
	}
	paRecorded(t, ctx, c, id, len(paLines(1, 64)))
	second, c2 := paRestart(t, ctx, e, first, c)
	if res, err := c2.Wait(ctx, id); err != nil || res.Reason != "exited" || res.ExitCode != 0 {
		t.Fatalf("the reattached process: %+v %v, want exited 0\n%s", res, err, second.Logs.String())
	}
	// How much came after the reattach: the journal's recovery decision
	// says where the recording stood.
	got, complete := paLogs(t, ctx, c2, id)
	if want := paLines(1, n); got != want || !complete {
		t.Fatalf("the recording across the restart: %d bytes (want %d), complete %v; first difference at %d", len(got), len(want), complete, testkit.FirstDiff(got, want))
	}
	evs, err := c2.History(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.ID != id || ev.Type != "recovered" {
			continue
		}
		var r lifecycle.Recovered
		if err := json.Unmarshal(ev.Payload, &r); err != nil {
			t.Fatal(err)
		}
		var pid, pgid, acked int
		var output int
		var running bool
		if _, err := fmt.Sscanf(r.Observed, "warden: pid %d, pgid %d, running %v, output %d, acked %d", &pid, &pgid, &running, &output, &acked); err != nil {
			t.Fatalf("the recovery's observation %q: %v", r.Observed, err)
		}
		if after := len(got) - acked; after <= 8<<10 {
			t.Fatalf("only %d bytes came after the reattach (acked %d of %d): the test needs more than 8 KiB", after, acked, len(got))
		}
		return
	}
	t.Fatalf("no recovery decision journaled for %s", id)
}

// TestPaTimeoutKeptAcrossRestart: a process with a timeout outlives its
// client and server (kill -9) and is re-adopted by the next one: its
// timeout fires at the deadline journaled at its start, not one restarted
// from the recovery. Asserted on the journal: the deadline, the stop's
// time against it and against the recovery, and the reason timeout.
func TestPaTimeoutKeptAcrossRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e, first, c, sb := testkit.ServedKeptSandbox(t, ctx)
	const timeout = 45 * time.Second
	// Attached: its client goes with the killed server, the process
	// outlives both.
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"sleep", "600"}, Stdout: spec.Discard, Stderr: spec.Discard, Timeout: timeout})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	id := p.ID()
	// Let a good part of the timeout pass before the crash, so that a
	// timeout restarted at the recovery ends well after the journaled
	// deadline.
	select {
	case <-time.After(timeout / 2):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	_, c2 := paRestart(t, ctx, e, first, c)
	res, err := c2.Wait(ctx, id)
	if res.Reason != "timeout" {
		t.Fatalf("the re-adopted process with a timeout: %+v %v, want timeout", res, err)
	}
	evs, err := c2.History(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	var deadline, recovered, stopping time.Time
	var reason lifecycle.Reason
	for _, ev := range evs {
		if ev.ID != id {
			continue
		}
		switch ev.Type {
		case "process.reserved":
			var r lifecycle.ProcessReserved
			if err := json.Unmarshal(ev.Payload, &r); err != nil {
				t.Fatal(err)
			}
			deadline = r.Deadline
		case "recovered":
			recovered = ev.Time
		case "process.stopping":
			var s lifecycle.ProcessStopping
			if err := json.Unmarshal(ev.Payload, &s); err != nil {
				t.Fatal(err)
			}
			stopping, reason = ev.Time, s.Reason
		}
	}
	switch {
	case deadline.IsZero() || recovered.IsZero() || stopping.IsZero():
		t.Fatalf("journal of %s: deadline %v, recovered %v, stopping %v: want all three", id, deadline, recovered, stopping)
	case reason != lifecycle.ReasonTimeout:
		t.Fatalf("the stop of %s is journaled with reason %q, want timeout", id, reason)
	case stopping.Before(deadline):
		t.Fatalf("the timeout fired at %v, before the journaled deadline %v", stopping, deadline)
	case !stopping.Before(recovered.Add(timeout)):
		t.Fatalf("the timeout fired at %v, a full timeout after the recovery at %v: it was restarted, not kept (deadline %v)", stopping, recovered, deadline)
	case !recovered.Before(deadline):
		t.Fatalf("the recovery at %v came after the deadline %v: the test proves nothing", recovered, deadline)
	}
}

// TestPaStrayRecordedAndForgotten (issue 19, defect 5): a process the
// journal has ended but its warden still runs (its exit journaled, the
// runtime killed before it told the warden to forget it: the exit is
// appended here while no server runs) is a stray to the next runtime's
// reattach. It is killed, what it printed since its recording's end is
// recorded like any output (every byte once, in order; the recording
// ends complete), and it is gone from the sandbox.
func TestPaStrayRecordedAndForgotten(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e, first, c, sb := testkit.ServedKeptSandbox(t, ctx)
	script := paSeq(1, 10) + "; while [ ! -e /tmp/go ]; do sleep 0.1; done; " + paSeq(11, 400) + "; exec sleep 600"
	id, err := paDetached(t, sb).StartDetached(ctx, spec.Process{Argv: []string{"sh", "-c", script}, Stderr: spec.Discard})
	if err != nil {
		t.Fatalf("start detached: %v", err)
	}
	paRecorded(t, ctx, c, id, len(paLines(1, 10)))
	st, err := sb.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	workload := st.Created.Workload
	if err := first.Stop(t, syscall.SIGKILL); err == nil {
		t.Fatal("serve after SIGKILL exited 0")
	}
	_ = c.Close()
	// With no runtime: the rest is printed (the warden holds it), and the
	// journal gets the exit a runtime journals before it forgets.
	testkit.DockerExec(t, workload, "touch", "/tmp/go")
	paSleeping := func() string {
		return strings.TrimSpace(testkit.DockerExec(t, workload, "sh", "-c", "ps -o args | grep -c '^[s]leep 600' || true"))
	}
	for i := 0; paSleeping() != "1"; i++ {
		if i == 300 {
			t.Fatal("the stray never reached its sleep")
		}
		time.Sleep(100 * time.Millisecond)
	}
	code := 0
	paAppendExit(t, e.Journal, sb.ID(), id, lifecycle.ProcessExited{Reason: lifecycle.ReasonExited, ExitCode: &code})

	second := e.Serve(t, ctx)
	c2 := second.Dial(t)
	again, err := c2.Sandbox(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	// A launch reattaches the warden, whose table names the stray.
	if _, _, res, err := testkit.RunIn(ctx, again, "true"); err != nil || res.ExitCode != 0 {
		t.Fatalf("a process after the restart: %+v %v", res, err)
	}
	want := paLines(1, 400)
	for {
		got, complete := paLogs(t, ctx, c2, id)
		if complete {
			if got != want {
				t.Fatalf("the stray's recording: %d bytes (want %d); first difference at %d", len(got), len(want), testkit.FirstDiff(got, want))
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the stray's recording never ended: %d of %d bytes\n%s", len(got), len(want), second.Logs.String())
		case <-time.After(200 * time.Millisecond):
		}
	}
	for i := 0; paSleeping() != "0"; i++ {
		if i == 300 {
			t.Fatal("the stray still runs")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// paAppendExit appends a process's exit to a journal no runtime holds.
func paAppendExit(t *testing.T, path, sandbox, id string, ev lifecycle.ProcessExited) {
	t.Helper()
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = j.Close() }()
	typ, payload, err := lifecycle.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := j.Append(ctx, journal.Record{Key: journal.Key{Kind: journal.KindProcess, ID: id}, Parent: sandbox, Type: typ, Payload: payload, Terminal: true}); err != nil {
		t.Fatal(err)
	}
}

// TestPaGiveUpOneProcessOnly (issue 19, defect 1, the scoped give-up): a
// process leaves the group its warden made for it (it joins the warden's
// own) and ignores TERM, so its stop reaches nothing and the warden never
// reports it reaped. That process alone is given up (journaled lost); the
// warden still answers, so its link stays up: the streaming neighbour goes
// on and ends normally, and no warden is journaled lost.
func TestPaGiveUpOneProcessOnly(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{StopGrace: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, err := e.RT.CreateSandbox(ctx, spec.Sandbox{Image: dockertest.PythonImageID(t, e.Docker), Policy: testkit.SmallPolicy(), Lifetime: spec.Kept})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	neighbour, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", "while [ ! -e /tmp/done ]; do echo tick; sleep 0.1; done"}, Stderr: spec.Discard})
	if err != nil {
		t.Fatal(err)
	}
	no := bufio.NewReader(neighbour.Stdout())
	paLine(t, no, "the neighbour's first line")
	escape := "import os, signal, time\n" +
		"signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" +
		"os.setpgid(0, os.getpgid(os.getppid()))\n" +
		"print('escaped', flush=True)\n" +
		"time.sleep(600)\n"
	esc, err := sb.Start(ctx, spec.Process{Argv: []string{"python3", "-c", escape}, Stderr: spec.Discard})
	if err != nil {
		t.Fatal(err)
	}
	eo := bufio.NewReader(esc.Stdout())
	if l := paLine(t, eo, "the escaping process"); l != "escaped\n" {
		t.Fatalf("the escaping process printed %q", l)
	}
	go func() { _, _ = io.Copy(io.Discard, eo) }()
	if err := esc.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// The neighbour is read meanwhile: its stream must not stall.
	lines := make(chan error, 1)
	go func() {
		for {
			l, err := no.ReadString('\n')
			if err != nil {
				lines <- err
				return
			}
			if l != "tick\n" {
				lines <- fmt.Errorf("the neighbour printed %q", l)
				return
			}
		}
	}()
	res, err := esc.Wait(ctx)
	if res.Reason != "lost" {
		t.Fatalf("the process whose stop the warden could not report: %+v %v, want lost", res, err)
	}
	if _, _, r, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"touch", "/tmp/done"}}); err != nil || r.ExitCode != 0 {
		t.Fatalf("touch after the give-up: %+v %v", r, err)
	}
	if err := <-lines; !errors.Is(err, io.EOF) {
		t.Fatalf("the neighbour's stream: %v", err)
	}
	if res, err := neighbour.Wait(ctx); err != nil || res.Reason != "exited" || res.ExitCode != 0 {
		t.Fatalf("the neighbour: %+v %v, want exited 0", res, err)
	}
	if types := testkit.SandboxTypes(t, e.RT, sb.ID()); testkit.Count(types, "sandbox.warden_lost") != 0 || testkit.Count(types, "sandbox.warden_started") != 1 {
		t.Fatalf("sandbox history %v: want the one warden, never lost", types)
	}
}
