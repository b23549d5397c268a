package serve

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// spinner burns about a second of CPU, then writes one line.
var spinner = []string{"/bin/sh", "-c", "i=0; while [ $i -lt 900000 ]; do i=$((i+1)); done; echo spun"}

// TestServeUsageAcrossKill: two sandboxes do the same work, a CPU-bound
// process each, under `stockade serve`. The twin runs alone, to its end,
// and is stopped: its ledger never saw a crash. Then the other's process
// runs across a kill -9 of the server and its restart, which re-adopts the
// sandbox. Both ledgers are complete and alike: the process's CPU (the
// warden's wait4, which went on counting with no runtime) and the
// workload's (the cgroup's cumulative counter, read on from the journaled
// sample) within a factor of 2 of the twin's (the same work's CPU time
// varies that much on a shared VM), the same output, the memory peaks
// within a factor of 2; and each ledger agrees with itself: the cgroup's
// CPU covers its process's and is far from twice it (nothing lost while
// no runtime ran, nothing counted again after the re-adoption).
func TestServeUsageAcrossKill(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e := testkit.NewCLI(t)
	image := dockertest.ImageID(t, dockertest.Client(t))
	first := e.Serve(t, ctx, "--usage-every", "200ms")
	c := first.Dial(t)
	mk := func(c host.Runtime) host.Sandbox {
		sb, err := c.CreateSandbox(ctx, spec.Sandbox{Image: image, Policy: testkit.SmallPolicy(), Lifetime: spec.Kept})
		if err != nil {
			t.Fatal(err)
		}
		return sb
	}
	twin := mk(c)
	p, err := twin.Start(ctx, spec.Process{Argv: spinner, Stdout: spec.Discard, Stderr: spec.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 {
		t.Fatalf("the twin's process: %+v %v", res, err)
	}
	if err := twin.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	crossed := mk(c)
	q, err := crossed.Start(ctx, spec.Process{Argv: spinner, Stdout: spec.Discard, Stderr: spec.Discard})
	if err != nil {
		t.Fatal(err)
	}
	crossedID := q.ID()
	time.Sleep(300 * time.Millisecond) // a sample or so in: the journaled one is of a running workload
	if err := first.Stop(t, syscall.SIGKILL); err == nil {
		t.Fatal("serve after SIGKILL exited 0")
	}
	_ = c.Close()
	second := e.Serve(t, ctx, "--usage-every", "200ms")
	c2 := second.Dial(t)
	defer func() { _ = c2.Close() }() // teardown
	found, err := c2.Process(ctx, crossedID)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := found.Wait(ctx); err != nil || res.ExitCode != 0 || res.Usage == nil {
		t.Fatalf("the process that ran across the kill: %+v %v", res, err)
	}
	sb, err := c2.Sandbox(ctx, crossed.ID())
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	var ledgers []host.SandboxUsage
	for _, id := range []string{crossed.ID(), twin.ID()} {
		u, err := c2.Usage(ctx, host.UsageQuery{Sandbox: id})
		if err != nil || len(u.Sandboxes) != 1 {
			t.Fatalf("usage of %s: %+v %v", id, u, err)
		}
		ledgers = append(ledgers, u.Sandboxes[0])
	}
	a, b := ledgers[0], ledgers[1]
	within := func(what string, x, y time.Duration) {
		// The same work's CPU time varies run to run on a shared VM (up
		// to a third here, with other work beside it); each ledger's own
		// consistency is checked below.
		if r := x.Seconds() / y.Seconds(); y <= 0 || r < 0.5 || r > 2 {
			t.Errorf("%s: %v across the kill, %v without: ratio %.2f", what, x, y, r)
		}
	}
	if len(a.Processes) != 1 || len(b.Processes) != 1 || a.Processes[0].Usage == nil || b.Processes[0].Usage == nil {
		t.Fatalf("processes: %+v and %+v", a.Processes, b.Processes)
	}
	within("the process's CPU", a.Processes[0].Usage.CPU(), b.Processes[0].Usage.CPU())
	within("the workload's CPU", a.Workload.CPU, b.Workload.CPU)
	// Each ledger agrees with itself: the cgroup's CPU covers its
	// process's (nothing lost across the kill) and is far from twice it
	// (nothing counted again after the re-adoption); the rest is the
	// warden's and Docker's execs'.
	for _, l := range []host.SandboxUsage{a, b} {
		p := l.Processes[0].Usage.CPU()
		if l.Workload.CPU < p*95/100 || l.Workload.CPU > p*13/10+300*time.Millisecond {
			t.Errorf("sandbox %s: the cgroup counted %v of CPU, its process %v", l.ID, l.Workload.CPU, p)
		}
	}
	if r := float64(a.Workload.MemoryPeak) / float64(b.Workload.MemoryPeak); b.Workload.MemoryPeak <= 0 || r < 0.5 || r > 2 {
		t.Errorf("memory peak %d across the kill, %d without", a.Workload.MemoryPeak, b.Workload.MemoryPeak)
	}
	if a.OutputBytes != b.OutputBytes || !a.Complete || !b.Complete || a.Processes[0].Usage.Source != spec.UsageRusage || a.Workload.Unsampled != 0 {
		t.Errorf("across the kill %+v; without %+v", a, b)
	}
	t.Logf("across the kill: process %v, workload %v (%d samples, %v bridged); without: process %v, workload %v",
		a.Processes[0].Usage.CPU(), a.Workload.CPU, a.Workload.Samples, a.Workload.Bridged, b.Processes[0].Usage.CPU(), b.Workload.CPU)
}
