package dockerio

import (
	"context"
	"encoding/json"
	"io"
	"time"

	"github.com/stockade/stockade/spec"
)

// CgroupSample is one reading of a running workload's cgroup: counters
// since its container last started.
type CgroupSample struct {
	At time.Time
	// CPU is the cgroup's CPU time since the container started.
	CPU time.Duration
	// Memory is the working set now (the charge less inactive file
	// pages); MemoryPeak the largest charge since the start (0 where the
	// kernel keeps none).
	Memory, MemoryPeak int64
	// Pids is the task count now; PidsPeak the largest since the start
	// (0 where the kernel keeps none).
	Pids, PidsPeak int64
}

// Meters reads a sandbox's resource use from the daemon (the sandbox
// actor's usage ledger).
type Meters interface {
	// SampleUsage reads the workload's cgroup; a workload not running is
	// not_found.
	SampleUsage(ctx context.Context, sb Sandbox) (CgroupSample, error)
}

// maxStatsBody bounds the daemon's stats reply (a few KiB; per-CPU figures
// grow with the host's CPUs).
const maxStatsBody = 1 << 20

// SampleUsage reads the workload's cgroup: from the host's cgroupfs when
// the runtime shares the daemon's host (cgroup.go), else the daemon's stats
// once (no second reading for a rate: Docker's one-shot form).
func (a *Adapter) SampleUsage(ctx context.Context, sb Sandbox) (CgroupSample, error) {
	cli, err := a.ready(ctx)
	if err != nil {
		return CgroupSample{}, err
	}
	if s, ok := a.cgroups.sample(ctx, cli, sb.Workload); ok {
		return s, nil
	}
	r, err := cli.ContainerStatsOneShot(ctx, sb.Workload)
	if err != nil {
		return CgroupSample{}, translate(err, "dockerio.usage", "reading the stats of %s", sb.Workload)
	}
	defer func() { _ = r.Body.Close() }() // a read body: nothing to lose
	body, err := io.ReadAll(io.LimitReader(r.Body, maxStatsBody+1))
	if err != nil {
		return CgroupSample{}, spec.Wrap(spec.CodeEngine, "dockerio.usage", err, "reading the stats of %s", sb.Workload)
	}
	return parseStats(sb.Workload, body)
}

// statsReply is the part of the daemon's stats reply the ledger reads.
type statsReply struct {
	Read     time.Time `json:"read"`
	CPUStats struct {
		CPUUsage struct {
			TotalUsage uint64 `json:"total_usage"`
		} `json:"cpu_usage"`
	} `json:"cpu_stats"`
	MemoryStats struct {
		Usage    uint64            `json:"usage"`
		MaxUsage uint64            `json:"max_usage"`
		Stats    map[string]uint64 `json:"stats"`
	} `json:"memory_stats"`
	PidsStats struct {
		Current uint64 `json:"current"`
	} `json:"pids_stats"`
}

// parseStats reads a stats reply. The daemon answers for a container that
// is not running with every figure zero and no read time.
func parseStats(name string, body []byte) (CgroupSample, error) {
	if len(body) > maxStatsBody {
		return CgroupSample{}, spec.Errorf(spec.CodeEngine, "dockerio.usage", "the stats of %s are over %d bytes", name, maxStatsBody)
	}
	var s statsReply
	if err := json.Unmarshal(body, &s); err != nil {
		return CgroupSample{}, spec.Wrap(spec.CodeEngine, "dockerio.usage", err, "the daemon's stats of %s do not parse", name)
	}
	if s.Read.IsZero() || s.PidsStats.Current == 0 && s.CPUStats.CPUUsage.TotalUsage == 0 {
		return CgroupSample{}, spec.Errorf(spec.CodeNotFound, "dockerio.usage", "%s is not running: it has no cgroup to read", name)
	}
	const maxInt = 1<<63 - 1
	for _, v := range []uint64{s.CPUStats.CPUUsage.TotalUsage, s.MemoryStats.Usage, s.MemoryStats.MaxUsage, s.PidsStats.Current} {
		if v > maxInt {
			return CgroupSample{}, spec.Errorf(spec.CodeEngine, "dockerio.usage", "the daemon's stats of %s hold a figure out of range (%d)", name, v)
		}
	}
	mem := s.MemoryStats.Usage
	// The working set, as the kubelet counts it: cgroup v1 names the
	// inactive file pages total_inactive_file, v2 inactive_file.
	inactive, ok := s.MemoryStats.Stats["total_inactive_file"]
	if !ok {
		inactive = s.MemoryStats.Stats["inactive_file"]
	}
	if inactive < mem {
		mem -= inactive
	} else {
		mem = 0
	}
	return CgroupSample{
		At:         s.Read,
		CPU:        time.Duration(s.CPUStats.CPUUsage.TotalUsage),
		Memory:     int64(mem),
		MemoryPeak: int64(s.MemoryStats.MaxUsage),
		Pids:       int64(s.PidsStats.Current),
	}, nil
}
