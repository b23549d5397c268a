package sandbox

import (
	"math"
	"testing"
	"time"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/lifecycle"
)

// TestMeter: the ledger sums a workload's cgroup samples over the runs of
// its container, integrates memory between samples, bridges a stretch no
// sample saw, and takes up a journaled sample as if it had never stopped:
// a restart over the same run counts nothing twice and loses no CPU time.
func TestMeter(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	const gib = 1 << 30
	sample := func(s int, cpu time.Duration, mem int64) dockerio.CgroupSample {
		return dockerio.CgroupSample{At: at(s), CPU: cpu, Memory: mem, MemoryPeak: mem, Pids: 2}
	}
	every := 10 * time.Second
	for _, tc := range []struct {
		name    string
		run     func(m *meter)
		cpu     time.Duration
		gibS    float64
		bridged time.Duration
		samples int64
	}{
		{"one run", func(m *meter) {
			m.add(sample(0, 0, gib), every)
			m.add(sample(10, time.Second, gib), every)
			m.add(sample(20, 3*time.Second, 3*gib), every)
		}, 3 * time.Second, 10 + 20, 0, 3},
		{"a late sample is ignored", func(m *meter) {
			m.add(sample(10, time.Second, gib), every)
			m.add(sample(5, 9*time.Second, gib), every)
		}, time.Second, 0, 0, 1},
		{"two runs, the stop between them", func(m *meter) {
			m.add(sample(0, 0, gib), every)
			m.add(sample(10, 2*time.Second, gib), every)
			m.endRun()
			m.add(sample(100, time.Second, gib), every) // a new run's counters: nothing ran in between
			m.add(sample(110, 4*time.Second, gib), every)
		}, 6 * time.Second, 10 + 10, 0, 4},
		{"a restart unseen: the counters went back", func(m *meter) {
			m.add(sample(0, 5*time.Second, gib), every)
			m.add(sample(10, time.Second, gib), every)
		}, 6 * time.Second, 0, 0, 2},
		{"a stretch no sample saw is bridged", func(m *meter) {
			m.add(sample(0, 0, gib), every)
			m.add(sample(100, 10*time.Second, gib), every)
		}, 10 * time.Second, 100, 100 * time.Second, 2},
		{"taken up after a restart: same run, exact", func(m *meter) {
			var first meter
			first.add(sample(0, 0, gib), every)
			first.add(sample(10, 2*time.Second, gib), every)
			m.restore(first.event(false, false))
			m.add(sample(70, 9*time.Second, gib), every) // the runtime was down 60 s
		}, 9 * time.Second, 70, 60 * time.Second, 3},
		{"taken up after a stop", func(m *meter) {
			var first meter
			first.add(sample(0, 0, gib), every)
			first.add(sample(10, 2*time.Second, gib), every)
			first.endRun()
			m.restore(first.event(true, true))
			m.add(sample(50, time.Second, gib), every)
		}, 3 * time.Second, 10, 0, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m meter
			tc.run(&m)
			u := m.total
			if u.CPU != tc.cpu || math.Abs(u.MemoryGiBSeconds-tc.gibS) > 1e-9 || u.Bridged != tc.bridged || u.Samples != tc.samples {
				t.Fatalf("cpu %v, %.3f GiB·s, bridged %v, %d samples; want %v, %.3f, %v, %d", u.CPU, u.MemoryGiBSeconds, u.Bridged, u.Samples,
					tc.cpu, tc.gibS, tc.bridged, tc.samples)
			}
		})
	}
}

// TestMeterEventRoundTrip: what restore takes is what event gives.
func TestMeterEventRoundTrip(t *testing.T) {
	var m meter
	m.add(dockerio.CgroupSample{At: time.Unix(10, 0), CPU: time.Second, Memory: 5, MemoryPeak: 7, Pids: 3}, time.Second)
	ev := m.event(false, false)
	var back meter
	back.restore(ev)
	if back.total != m.total || back.runCPU != m.runCPU || back.base != m.base || !back.inRun {
		t.Fatalf("restored %+v from %+v", back, m)
	}
	if ev != (lifecycle.UsageSampled{Usage: m.total, RunCPU: time.Second, RunMemory: 5}) {
		t.Fatalf("event %+v", ev)
	}
}

// TestMeterAnchored: a run's memory integral starts at its start, from
// nothing, not at its first sample; a long first stretch is bridged.
func TestMeterAnchored(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const gib = 1 << 30
	var m meter
	m.anchor(t0)
	m.add(dockerio.CgroupSample{At: t0.Add(10 * time.Second), CPU: time.Second, Memory: 2 * gib}, 10*time.Second)
	if m.total.MemoryGiBSeconds != 10 || m.total.Bridged != 0 || m.total.Samples != 1 {
		t.Fatalf("anchored at the start: %+v", m.total)
	}
	var r meter
	r.anchor(t0)
	r.add(dockerio.CgroupSample{At: t0.Add(100 * time.Second), CPU: time.Second, Memory: 2 * gib}, 10*time.Second)
	if r.total.MemoryGiBSeconds != 100 || r.total.Bridged != 100*time.Second {
		t.Fatalf("anchored long before the first sample: %+v", r.total)
	}
}
