package spec

import "time"

// UsageSource says where a process's usage figures come from.
type UsageSource string

const (
	// UsageRusage: the warden's wait4 of the process (its own use and
	// that of the descendants it waited for).
	UsageRusage UsageSource = "rusage"
	// UsageWall: a Docker exec, of which Docker reports no resource use;
	// only the wall time, from its start to its end as the runtime saw
	// them, is known.
	UsageWall UsageSource = "wall"
)

// ProcessUsage is what one process used, journaled with its end.
type ProcessUsage struct {
	Source UsageSource   `json:"source"`
	Wall   time.Duration `json:"wall_ns"`
	User   time.Duration `json:"user_ns,omitempty"`
	System time.Duration `json:"sys_ns,omitempty"`
	// MaxRSS is the largest resident set, in bytes.
	MaxRSS int64 `json:"max_rss,omitempty"`
	// ReadBytes and WriteBytes are block I/O: what reached or came from
	// a device, not what the page cache absorbed.
	ReadBytes  int64 `json:"read_bytes,omitempty"`
	WriteBytes int64 `json:"write_bytes,omitempty"`
}

// CPU is the user and system time together.
func (u ProcessUsage) CPU() time.Duration { return u.User + u.System }

// WorkloadUsage is what a sandbox's workload used as its container's
// cgroup counted it, summed over every run of the container (a rollback
// stops and starts it), read by the runtime from the daemon: nothing in the
// sandbox reports it.
type WorkloadUsage struct {
	// At is when the last sample was taken.
	At time.Time `json:"at"`
	// CPU is the cgroup's CPU time (every process of the workload, the
	// warden and Docker's execs included).
	CPU time.Duration `json:"cpu_ns"`
	// MemoryPeak is the cgroup's largest charge (page cache included), in
	// bytes.
	MemoryPeak int64 `json:"memory_peak"`
	// MemoryGiBSeconds is the integral of the working set (the charge
	// less inactive file pages) over the time sampled, in GiB·s.
	MemoryGiBSeconds float64 `json:"memory_gib_s"`
	// PidsPeak is the largest task count a sample saw.
	PidsPeak int64 `json:"pids_peak"`
	// Samples is how many samples were taken.
	Samples int64 `json:"samples"`
	// Bridged is how much of the memory integral's time no sample saw
	// (the runtime was down): it is drawn as a straight line between the
	// samples either side.
	Bridged time.Duration `json:"bridged_ns,omitempty"`
	// Unsampled is how long the workload ran after a last sample with no
	// reading at its end (it died on its own, or stopped with no runtime
	// to read it; up to when the runtime learnt it): what it used then
	// is not counted. A biller bounds it by the policy's CPUs.
	Unsampled time.Duration `json:"unsampled_ns,omitempty"`
}
