package api

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// shellTimes parses the first line of the shell's `times` (its own user
// and system time, as the kernel counts them for it: "0m1.230s 0m0.010s").
func shellTimes(t *testing.T, out string) time.Duration {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 {
		t.Fatalf("no `times` output in %q", out)
	}
	var total time.Duration
	for _, f := range strings.Fields(lines[len(lines)-2]) {
		var m int
		var s float64
		if _, err := fmt.Sscanf(f, "%dm%fs", &m, &s); err != nil {
			t.Fatalf("`times` said %q: %v", lines[len(lines)-2], err)
		}
		total += time.Duration(m)*time.Minute + time.Duration(s*float64(time.Second))
	}
	return total
}

// TestAPIUsageMeasured: on the real daemon, a CPU-bound process's journaled
// CPU time (the warden's wait4) is within 10% of what the kernel told the
// process itself; a memory hog's peak RSS and the sandbox's cgroup peak
// hold its buffer; the ledger of the stopped, labelled sandbox is complete,
// holds both processes as their results gave them, and its cgroup CPU time
// covers the processes'.
func TestAPIUsageMeasured(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{UsageEvery: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	batch := fmt.Sprintf("usage-%d", time.Now().UnixNano())
	sb, err := e.RT.CreateSandbox(ctx, spec.Sandbox{Image: e.Image, Policy: testkit.SmallPolicy(), Lifetime: spec.Kept, Labels: map[string]string{"batch": batch}})
	if err != nil {
		t.Fatal(err)
	}
	out, _, spin, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"/bin/sh", "-c", "i=0; while [ $i -lt 600000 ]; do i=$((i+1)); done; times"}})
	if err != nil || spin.ExitCode != 0 {
		t.Fatalf("the CPU-bound process: %+v, %v", spin, err)
	}
	kernel := shellTimes(t, out)
	u := spin.Usage
	if u == nil || u.Source != spec.UsageRusage {
		t.Fatalf("the CPU-bound process's usage: %+v", u)
	}
	if ratio := u.CPU().Seconds() / kernel.Seconds(); kernel < 100*time.Millisecond || ratio < 0.9 || ratio > 1.1 {
		t.Fatalf("journaled CPU %v (user %v, system %v), the kernel told the process %v: ratio %.3f, want within 10%%", u.CPU(), u.User, u.System, kernel, ratio)
	}
	if u.Wall < kernel/2 {
		t.Fatalf("wall %v under the CPU time %v", u.Wall, kernel)
	}
	const buf = 96 << 20
	_, _, hog, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"dd", "if=/dev/zero", "of=/dev/null", fmt.Sprintf("bs=%d", buf), "count=2"}, Stderr: spec.Discard})
	if err != nil || hog.ExitCode != 0 || hog.Usage == nil {
		t.Fatalf("the memory hog: %+v, %v", hog, err)
	}
	if hog.Usage.MaxRSS < buf {
		t.Fatalf("the hog's peak RSS %d, under its %d-byte buffer", hog.Usage.MaxRSS, buf)
	}
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err := e.RT.Usage(ctx, host.UsageQuery{Labels: map[string]string{"batch": batch}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Sandboxes) != 1 {
		t.Fatalf("%d sandboxes labelled %s", len(rep.Sandboxes), batch)
	}
	s := rep.Sandboxes[0]
	w := s.Workload
	if !s.Complete || w.Samples < 2 || w.MemoryPeak < buf || w.MemoryGiBSeconds <= 0 || w.PidsPeak < 2 {
		t.Fatalf("the sandbox's ledger: complete %t, %+v", s.Complete, w)
	}
	procCPU := u.CPU() + hog.Usage.CPU()
	if w.CPU < procCPU*9/10 {
		t.Fatalf("the cgroup counted %v of CPU, under its processes' %v", w.CPU, procCPU)
	}
	if len(s.Processes) != 2 || s.Processes[0].Usage == nil || *s.Processes[0].Usage != *u || s.Processes[1].Usage == nil || *s.Processes[1].Usage != *hog.Usage {
		t.Fatalf("the ledger's processes %+v, want the results' usage %+v and %+v", s.Processes, u, hog.Usage)
	}
	if s.OutputBytes != spin.StdoutBytes+spin.StderrBytes+hog.StdoutBytes+hog.StderrBytes || rep.Total.CPU != w.CPU || rep.Total.Processes != 2 {
		t.Fatalf("output %d, totals %+v", s.OutputBytes, rep.Total)
	}
	t.Logf("cpu: process %v (kernel %v), cgroup %v; hog rss %d, cgroup peak %d, %.4f GiB·s over %d samples", u.CPU(), kernel, w.CPU,
		hog.Usage.MaxRSS, w.MemoryPeak, w.MemoryGiBSeconds, w.Samples)
}
