package warden

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// TestWardenCrashMidStream: kill -9 of `stockade serve` while a process in
// a kept sandbox is streaming. The process keeps running inside the
// sandbox (its warden holds what the dead runtime never acknowledged); the
// restarted server reattaches, re-adopts it WITH its streams from the
// recorded offset, and its recording ends complete: every byte exactly
// once, in order. A second process that ended while the server was down
// has its exit code recorded.
func TestWardenCrashMidStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e, first, c, sb := testkit.ServedKeptSandbox(t, ctx)
	// Half the lines, then wait for a go-ahead the test gives after the
	// restart, then the other half: the crash is mid-stream.
	const n = 60000
	script := fmt.Sprintf("seq 1 %d; while [ ! -e /tmp/go ]; do sleep 0.1; done; seq %d %d", n/2, n/2+1, n)
	rec := spec.Record{Head: 8 << 20, Tail: spec.MinRecordBound}
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", script}, Stderr: spec.Discard, Record: rec})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	quick, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", "while [ ! -e /tmp/go-quick ]; do sleep 0.1; done; exit 7"}, Stdout: spec.Discard, Stderr: spec.Discard})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	sleeper, err := sb.Start(ctx, spec.Process{Argv: []string{"sleep", "300"}, Stdout: spec.Discard, Stderr: spec.Discard})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	r := bufio.NewReader(p.Stdout())
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the first half: %v", err)
		}
		if line == fmt.Sprintf("%d\n", n/2) {
			break
		}
	}
	streamed, quickID, sleeperID := p.ID(), quick.ID(), sleeper.ID()
	st, err := sb.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	workload := st.Created.Workload

	if err := first.Stop(t, syscall.SIGKILL); err == nil {
		t.Fatal("serve after SIGKILL exited 0")
	}
	_ = c.Close()
	// While no runtime runs, the quick process is let go and ends: the
	// warden keeps its code for the next runtime.
	testkit.DockerExec(t, workload, "touch", "/tmp/go-quick")
	for i := 0; ; i++ {
		if out := testkit.DockerExec(t, workload, "sh", "-c", "ps -o args | grep -c '[g]o-quick' || true"); strings.TrimSpace(out) == "0" {
			break
		}
		if i == 300 {
			t.Fatal("the quick process did not end")
		}
		time.Sleep(100 * time.Millisecond)
	}
	second := e.Serve(t, ctx)
	c2 := second.Dial(t)
	again, err := c2.Sandbox(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	// The go-ahead; the quick process ends with 7, the streamed one
	// prints its second half into the re-adopted stream.
	if _, _, res, err := testkit.RunIn(ctx, again, "touch /tmp/go"); err != nil || res.ExitCode != 0 {
		t.Fatalf("touch: %+v %v", res, err)
	}
	if res, err := c2.Wait(ctx, quickID); err != nil || res.ExitCode != 7 || res.Reason != "exited" {
		t.Fatalf("the process that ended while the server was down: %+v %v, want exited 7", res, err)
	}
	if res, err := c2.Wait(ctx, streamed); err != nil || res.ExitCode != 0 || res.Reason != "exited" {
		t.Fatalf("the re-adopted streaming process: %+v %v, want exited 0", res, err)
	}
	var got bytes.Buffer
	sum, err := c2.Logs(ctx, streamed, func(ch host.OutputChunk) error {
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
		t.Fatalf("logs: %v", err)
	}
	var want strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	if got.String() != want.String() {
		t.Fatalf("the recording after the crash holds %d bytes, want %d (every line once, in order); first difference at %d", got.Len(), want.Len(), testkit.FirstDiff(got.String(), want.String()))
	}
	if !sum.Complete || sum.StdoutBytes != int64(want.Len()) {
		t.Fatalf("the recording's summary: %+v, want complete with %d bytes", sum, want.Len())
	}
	// A re-adopted process is stopped like any other.
	if err := c2.StopProcess(ctx, sleeperID); err != nil {
		t.Fatalf("stop a re-adopted process: %v", err)
	}
	if res, err := c2.Wait(ctx, sleeperID); err != nil || res.Reason != "signaled" {
		t.Fatalf("the stopped re-adopted process: %+v %v, want signaled", res, err)
	}
	if err := c2.Verify(ctx); err != nil {
		t.Fatalf("verify: %v", err)
	}
}
