package metrics_test

import (
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/journaltest"
	"github.com/stockade/stockade/internal/metricstest"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/metrics"
	"github.com/stockade/stockade/spec"
)

// TestUsageCountersByLabel: the usage counters sum each process's use and
// each sandbox's workload samples by pool and the label keys asked, never
// an id; a second runtime's metrics over the same journal (a restart)
// count only what its samples add to the last one journaled.
func TestUsageCountersByLabel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.db")
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := metrics.New(j, metrics.Sources{UsageLabels: []string{"team", "task.kind"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	img := "sha256:" + strings.Repeat("ab", 32)
	sb := journal.Key{Kind: journal.KindSandbox, ID: "sbusagectr"}
	pr := journal.Key{Kind: journal.KindProcess, ID: "pusagectr"}
	sample := func(cpu time.Duration, gibS float64) lifecycle.UsageSampled {
		return lifecycle.UsageSampled{Usage: spec.WorkloadUsage{At: time.Now(), CPU: cpu, MemoryGiBSeconds: gibS, Samples: 1}, RunCPU: cpu}
	}
	labels := map[string]string{"team": "infra", "task.kind": "build", "run": "unique-per-sandbox-9f1"}
	for _, s := range []struct {
		k  journal.Key
		ev lifecycle.Event
	}{
		{sb, lifecycle.SandboxReserved{Owner: j.Owner(), Spec: spec.Sandbox{Image: img, Policy: spec.DefaultPolicy(), Lifetime: spec.Kept, Labels: labels}, Pool: "py"}},
		{sb, lifecycle.SandboxCreated{Workload: "w", Export: "e", Volume: "v"}},
		{sb, lifecycle.SandboxStarted{}},
		{sb, sample(2*time.Second, 0.5)},
		{pr, lifecycle.ProcessReserved{Sandbox: sb.ID, Spec: spec.Process{Argv: []string{"make"}}}},
		{pr, lifecycle.ProcessStarted{Group: 7}},
		{pr, lifecycle.ProcessExited{Reason: lifecycle.ReasonExited, ExitCode: code(0), StdoutBytes: 100, StderrBytes: 20,
			Usage: &spec.ProcessUsage{Source: spec.UsageRusage, Wall: 3 * time.Second, User: time.Second, System: 500 * time.Millisecond}}},
		{sb, sample(5*time.Second, 1.5)},
	} {
		journaltest.Append(t, j, s.k, s.ev)
	}
	const lbl = `{label_task_kind="build",label_team="infra",pool="py"}`
	got := metricstest.Await(t, srv.URL+"/metrics", 30*time.Second,
		"stockade_usage_workload_cpu_seconds_total"+lbl+" 5\n",
		"stockade_usage_memory_gib_seconds_total"+lbl+" 1.5\n",
		"stockade_usage_process_cpu_seconds_total"+lbl+" 1.5\n",
		"stockade_usage_process_wall_seconds_total"+lbl+" 3\n",
		"stockade_usage_output_bytes_total"+lbl+" 120\n",
		"stockade_usage_processes_total"+lbl+" 1\n",
	)
	for _, id := range []string{sb.ID, pr.ID, "unique-per-sandbox"} {
		if strings.Contains(got, id) {
			t.Fatalf("a label carries %s:\n%s", id, got)
		}
	}
	srv.Close()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	<-m.Done()

	// A restart: the new metrics start from zero and count only what the
	// next sample adds to the journaled one.
	j, err = journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = j.Close() }() // teardown
	m, err = metrics.New(j, metrics.Sources{UsageLabels: []string{"team", "task.kind"}})
	if err != nil {
		t.Fatal(err)
	}
	srv = httptest.NewServer(m.Handler())
	defer srv.Close()
	journaltest.Append(t, j, sb, sample(7*time.Second, 2))
	metricstest.Await(t, srv.URL+"/metrics", 30*time.Second,
		"stockade_usage_workload_cpu_seconds_total"+lbl+" 2\n",
		"stockade_usage_memory_gib_seconds_total"+lbl+" 0.5\n",
	)
}

// TestUsageLabelValuesBounded: the values a usage label takes are the API
// callers'; past the bound a new one is counted as "other", so no caller
// grows the series without end.
func TestUsageLabelValuesBounded(t *testing.T) {
	j, err := journal.Open(filepath.Join(t.TempDir(), "j.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = j.Close() }() // teardown
	m, err := metrics.New(j, metrics.Sources{UsageLabels: []string{"run"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	img := "sha256:" + strings.Repeat("ab", 32)
	for i := range 105 {
		sb := journal.Key{Kind: journal.KindSandbox, ID: fmt.Sprintf("sbbound%03d", i)}
		pr := journal.Key{Kind: journal.KindProcess, ID: fmt.Sprintf("pbound%03d", i)}
		journaltest.Append(t, j, sb, lifecycle.SandboxReserved{Owner: j.Owner(), Spec: spec.Sandbox{Image: img, Policy: spec.DefaultPolicy(), Lifetime: spec.Kept,
			Labels: map[string]string{"run": fmt.Sprintf("r%03d", i)}}})
		journaltest.Append(t, j, pr, lifecycle.ProcessReserved{Sandbox: sb.ID, Spec: spec.Process{Argv: []string{"true"}}})
		journaltest.Append(t, j, pr, lifecycle.ProcessExited{Reason: lifecycle.ReasonExited, ExitCode: code(0)})
	}
	got := metricstest.Await(t, srv.URL+"/metrics", 30*time.Second,
		`stockade_usage_processes_total{label_run="other",pool=""} 5`+"\n",
		`stockade_usage_processes_total{label_run="r098",pool=""} 1`+"\n",
	)
	if n := strings.Count(got, "stockade_usage_processes_total{"); n != 101 {
		t.Fatalf("%d series, want 100 values and other", n)
	}
}
