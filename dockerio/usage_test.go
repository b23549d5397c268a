package dockerio

import (
	"testing"
	"time"

	"github.com/stockade/stockade/spec"
)

// TestParseStats: the daemon's stats of a running workload give its CPU
// time, working set (the charge less inactive file pages, cgroup v1's name
// or v2's), peak and tasks; a workload not running, a reply that does not
// parse, or a figure out of range is a typed error.
func TestParseStats(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		want CgroupSample
		code spec.Code
	}{
		{"cgroup v1", `{"read":"2026-12-06T10:00:00Z","cpu_stats":{"cpu_usage":{"total_usage":1500000000}},"memory_stats":{"usage":300,"max_usage":900,"stats":{"total_inactive_file":100}},"pids_stats":{"current":4}}`,
			CgroupSample{At: time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC), CPU: 1500 * time.Millisecond, Memory: 200, MemoryPeak: 900, Pids: 4}, ""},
		{"cgroup v2", `{"read":"2026-12-06T10:00:00Z","cpu_stats":{"cpu_usage":{"total_usage":7}},"memory_stats":{"usage":300,"stats":{"inactive_file":50}},"pids_stats":{"current":1}}`,
			CgroupSample{At: time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC), CPU: 7, Memory: 250, Pids: 1}, ""},
		{"more inactive than charged", `{"read":"2026-12-06T10:00:00Z","cpu_stats":{"cpu_usage":{"total_usage":7}},"memory_stats":{"usage":30,"stats":{"inactive_file":50}},"pids_stats":{"current":1}}`,
			CgroupSample{At: time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC), CPU: 7, Pids: 1}, ""},
		{"not running", `{"read":"0001-01-01T00:00:00Z","cpu_stats":{},"memory_stats":{},"pids_stats":{}}`, CgroupSample{}, spec.CodeNotFound},
		{"stopped, read set", `{"read":"2026-12-06T10:00:00Z","cpu_stats":{"cpu_usage":{"total_usage":0}},"pids_stats":{}}`, CgroupSample{}, spec.CodeNotFound},
		{"not JSON", `<html>`, CgroupSample{}, spec.CodeEngine},
		{"out of range", `{"read":"2026-12-06T10:00:00Z","cpu_stats":{"cpu_usage":{"total_usage":18446744073709551615}},"pids_stats":{"current":1}}`, CgroupSample{}, spec.CodeEngine},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStats("w", []byte(tc.body))
			if tc.code != "" {
				if !spec.IsCode(err, tc.code) {
					t.Fatalf("got %+v, %v; want %s", got, err, tc.code)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// FuzzParseStats: whatever the daemon answers, the parse gives a sample
// with no negative figure, or a typed error.
func FuzzParseStats(f *testing.F) {
	f.Add([]byte(`{"read":"2026-12-06T10:00:00Z","cpu_stats":{"cpu_usage":{"total_usage":1500000000}},"memory_stats":{"usage":300,"max_usage":900,"stats":{"total_inactive_file":100}},"pids_stats":{"current":4}}`))
	f.Add([]byte(`{"read":"2026-12-06T10:00:00Z","memory_stats":{"usage":1,"stats":{"inactive_file":18446744073709551615}},"pids_stats":{"current":9223372036854775808}}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"read":"x"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := parseStats("w", body)
		if err != nil {
			if spec.CodeOf(err) == spec.CodeInternal || spec.CodeOf(err) == "" {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if s.CPU < 0 || s.Memory < 0 || s.MemoryPeak < 0 || s.Pids < 0 {
			t.Fatalf("negative figure in %+v", s)
		}
	})
}

// TestFindCgroupNamesTheContainer: a pid's cgroups are the container's
// only when each path is named for the container's full id (cgroupfs'
// /docker/ID, a parent's /…/ID, systemd's docker-ID.scope); a path that
// merely holds the id, climbs, or is relative is refused.
func TestFindCgroupNamesTheContainer(t *testing.T) {
	const id = "5b9a389a5ccba9734818686274c787d14140530c166a160a26d55640c33aabda"
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{"/docker/" + id, true},
		{"/sandboxes/" + id, true},
		{"/system.slice/docker-" + id + ".scope", true},
		{"/docker/" + id + "/inner", false},
		{"/evil-" + id, false},
		{"/docker/" + id + "/../x/" + id, false},
		{"docker/" + id, false},
		{"/docker/" + id[:12], false},
	} {
		if got := cgroupNamesContainer(tc.path, id); got != tc.ok {
			t.Errorf("%q: %t, want %t", tc.path, got, tc.ok)
		}
	}
}
