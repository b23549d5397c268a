package serve

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/internal/metricstest"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// TestServeMetrics: `stockade serve --metrics 127.0.0.1:0` serves
// Prometheus metrics that move with what the server does on the real
// daemon: a sandbox and two processes (one exits 3) show as process starts,
// exits by reason, live entities by phase and journal commits, and the
// usage counters by the sandbox label asked (--metrics-label); no label
// carries a sandbox or process id.
func TestServeMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := testkit.NewCLI(t)
	image := dockertest.ImageID(t, dockertest.Client(t))
	s := e.Serve(t, ctx, "--metrics", "127.0.0.1:0", "--metrics-label", "team")
	// The socket answers a moment before the metrics line is printed.
	var m []string
	for deadline := time.Now().Add(30 * time.Second); m == nil; time.Sleep(20 * time.Millisecond) {
		m = regexp.MustCompile(`serving metrics on (http://\S+/metrics)`).FindStringSubmatch(s.Logs.String())
		if m == nil && time.Now().After(deadline) {
			t.Fatalf("serve did not say where its metrics are:\n%s", s.Logs.String())
		}
	}
	url := m[1]
	c := s.Dial(t)
	sb, err := c.CreateSandbox(ctx, spec.Sandbox{Image: image, Policy: testkit.SmallPolicy(), Lifetime: spec.Kept, Labels: map[string]string{"team": "infra"}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	var ids []string
	ids = append(ids, sb.ID())
	for _, cmd := range []string{"true", "exit 3"} {
		if _, _, res, err := testkit.RunIn(ctx, sb, cmd); err != nil || res.Reason != "exited" {
			t.Fatalf("%s: %+v %v", cmd, res, err)
		}
	}
	got := metricstest.Await(t, url, time.Minute,
		"stockade_process_starts_total 2",
		`stockade_process_exits_total{reason="exited"} 2`,
		`stockade_live_entities{kind="sandbox",last="sandbox.warden_started"} 1`,
		"stockade_journal_commit_seconds_bucket",
	)
	for _, id := range ids {
		if strings.Contains(got, id) {
			t.Fatalf("a metric label carries the id %s", id)
		}
	}
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	got = metricstest.Await(t, url, time.Minute,
		`stockade_usage_processes_total{label_team="infra",pool=""} 2`,
		`stockade_usage_process_cpu_seconds_total{label_team="infra",pool=""}`,
		`stockade_usage_workload_cpu_seconds_total{label_team="infra",pool=""}`,
		`stockade_usage_memory_gib_seconds_total{label_team="infra",pool=""}`,
	)
	if strings.Contains(got, `stockade_usage_workload_cpu_seconds_total{label_team="infra",pool=""} 0`+"\n") {
		t.Fatalf("the stopped sandbox's workload counted no CPU:\n%s", got)
	}
	if err := sb.Remove(ctx); err != nil {
		t.Fatal(err)
	}
}
