package dockerio

import (
	"context"
	"testing"
	"time"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// TestDockerioUsageTwoWays: a running workload's cgroup read from the
// host's cgroupfs and from the daemon's stats API (an adapter told not to
// read the host's) agree: read in turn, each CPU time is at least the one
// before, whoever read it, and both see the workload's memory and tasks;
// stopped, the stats API says not_found too.
func TestDockerioUsageTwoWays(t *testing.T) {
	e := testkit.NewDio(t)
	daemon, err := dockerio.NewAdapter(dockerio.Options{NoHostCgroups: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = daemon.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := daemon.Preflight(ctx); err != nil {
		t.Fatal(err)
	}
	sb := e.Sandbox(t, nil)
	e.Sh(t, sb, "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done")
	var last time.Duration
	for i, a := range []dockerio.Engine{e.Adapter, daemon, e.Adapter, daemon} {
		s, err := a.SampleUsage(ctx, sb)
		if err != nil || s.CPU < last || s.CPU == 0 || s.Memory <= 0 || s.Pids < 1 {
			t.Fatalf("reading %d: %+v, %v (the one before: %v of CPU)", i, s, err, last)
		}
		// Only the host's cgroupfs has pids.peak (this machine's Linux
		// keeps one; the stats API does not carry it): the first adapter
		// read the host's, the second the daemon's.
		if host := a == e.Adapter; host != (s.PidsPeak > 0) {
			t.Fatalf("reading %d (from the host: %t) has pids peak %d", i, host, s.PidsPeak)
		}
		last = s.CPU
	}
	if _, err := e.Adapter.StopSandbox(ctx, sb, time.Second); err != nil {
		t.Fatal(err)
	}
	for _, a := range []dockerio.Engine{e.Adapter, daemon} {
		if _, err := a.SampleUsage(ctx, sb); !spec.IsCode(err, spec.CodeNotFound) {
			t.Errorf("stopped: %v, want not_found", err)
		}
	}
}
