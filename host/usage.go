package host

import (
	"math"
	"time"

	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// UsageQuery picks the sandboxes a usage report covers: every condition
// given must hold.
type UsageQuery struct {
	// Sandbox is one sandbox's id ("": any).
	Sandbox string
	// Labels must each be among the sandbox's labels, with the same value.
	Labels map[string]string
	// Since keeps the sandboxes live at or after it: still live, or whose
	// last event is not before it (zero: any). Each sandbox picked is
	// reported whole, not the part of its life after Since.
	Since time.Time
	// Workspace measures each picked sandbox's /workspace/work (its
	// resources still there: not removed) by reading it through the
	// export container: as costly as a copy of it.
	Workspace bool
}

// WorkspaceSize is what a sandbox's /workspace/work holds, measured when
// asked (UsageQuery.Workspace).
type WorkspaceSize struct {
	At time.Time `json:"at"`
	// Bytes is the regular files' sizes summed; Files how many there
	// are (a hard link's each time it is listed).
	Bytes int64 `json:"bytes"`
	Files int64 `json:"files"`
}

// Usage is a usage report: each sandbox picked, oldest first, and their
// sum.
type Usage struct {
	Sandboxes []SandboxUsage `json:"sandboxes"`
	Total     UsageTotal     `json:"total"`
}

// SandboxUsage is what one sandbox used, from the journal (and, for a
// running one, a sample taken for the report).
type SandboxUsage struct {
	ID     string            `json:"id"`
	Labels map[string]string `json:"labels,omitempty"`
	// Pool is the warm pool the sandbox was made for ("": made cold).
	Pool     string          `json:"pool,omitempty"`
	Image    string          `json:"image"`
	Phase    lifecycle.Phase `json:"phase"`
	Reserved time.Time       `json:"reserved"`
	// Ended is when the workload exited (zero while it runs).
	Ended time.Time `json:"ended,omitzero"`
	// Workload is what the workload's cgroup counted.
	Workload spec.WorkloadUsage `json:"workload"`
	// Complete says the ledger is whole: the workload stopped and its
	// last reading was taken at the stop. A running sandbox's is not (it
	// goes on); nor is one whose workload died, or was stopped with no
	// runtime to read it, after its last sample (the time since that
	// sample is not counted).
	Complete bool `json:"complete"`
	// Processes is each process of the sandbox, oldest first.
	Processes []ProcessUsage `json:"processes,omitempty"`
	// OutputBytes is what the processes wrote to stdout and stderr.
	OutputBytes int64 `json:"output_bytes"`
	// Workspace is /workspace/work's size, when asked for and the
	// sandbox's resources are there (nil otherwise).
	Workspace *WorkspaceSize `json:"workspace,omitempty"`
	// Egress counts an allowlist sandbox's connections by verdict and the
	// bytes the allowed ones carried (both ways), from the proxy's
	// recorded decisions.
	EgressAllowed int64 `json:"egress_allowed"`
	EgressDenied  int64 `json:"egress_denied"`
	EgressBytes   int64 `json:"egress_bytes"`
}

// ProcessUsage is one process's use, as journaled with its end (Usage nil:
// it has not ended, or never started).
type ProcessUsage struct {
	ID       string             `json:"id"`
	Argv     []string           `json:"argv"`
	Phase    lifecycle.Phase    `json:"phase"`
	Reason   string             `json:"reason,omitempty"`
	ExitCode *int               `json:"exit_code,omitempty"`
	Output   int64              `json:"output_bytes"`
	Usage    *spec.ProcessUsage `json:"usage,omitempty"`
}

// UsageTotal sums a report's sandboxes.
type UsageTotal struct {
	Sandboxes int `json:"sandboxes"`
	Processes int `json:"processes"`
	// CPU is the workloads' CPU time; ProcessCPU the part of it their
	// processes' own rusage accounts for.
	CPU              time.Duration `json:"cpu_ns"`
	ProcessCPU       time.Duration `json:"process_cpu_ns"`
	MemoryGiBSeconds float64       `json:"memory_gib_s"`
	// MemoryPeak is the largest sandbox's peak (not a sum).
	MemoryPeak    int64 `json:"memory_peak"`
	OutputBytes   int64 `json:"output_bytes"`
	EgressAllowed int64 `json:"egress_allowed"`
	EgressDenied  int64 `json:"egress_denied"`
	EgressBytes   int64 `json:"egress_bytes"`
	// WorkspaceBytes sums the workspaces measured.
	WorkspaceBytes int64 `json:"workspace_bytes,omitempty"`
}

// Sum adds up the sandboxes of u into u.Total. Each sum saturates at the
// largest int64 rather than wrap.
func (u *Usage) Sum() {
	t := UsageTotal{Sandboxes: len(u.Sandboxes)}
	for _, s := range u.Sandboxes {
		t.Processes += len(s.Processes)
		t.CPU = time.Duration(sat(int64(t.CPU), int64(s.Workload.CPU)))
		t.MemoryGiBSeconds += s.Workload.MemoryGiBSeconds
		t.MemoryPeak = max(t.MemoryPeak, s.Workload.MemoryPeak)
		t.OutputBytes = sat(t.OutputBytes, s.OutputBytes)
		t.EgressAllowed = sat(t.EgressAllowed, s.EgressAllowed)
		t.EgressDenied = sat(t.EgressDenied, s.EgressDenied)
		t.EgressBytes = sat(t.EgressBytes, s.EgressBytes)
		if w := s.Workspace; w != nil {
			t.WorkspaceBytes = sat(t.WorkspaceBytes, w.Bytes)
		}
		for _, p := range s.Processes {
			if p.Usage != nil {
				t.ProcessCPU = time.Duration(sat(int64(t.ProcessCPU), sat(int64(p.Usage.User), int64(p.Usage.System))))
			}
		}
	}
	u.Total = t
}

// sat is a+b for figures that are not negative, saturating at the
// largest int64 (a negative one counts as zero).
func sat(a, b int64) int64 {
	a, b = max(a, 0), max(b, 0)
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// Matches reports whether a sandbox's folded state is one q picks.
func (q UsageQuery) Matches(s lifecycle.Sandbox) bool {
	if q.Sandbox != "" && s.ID != q.Sandbox {
		return false
	}
	for k, v := range q.Labels {
		if got, ok := s.Spec.Labels[k]; !ok || got != v {
			return false
		}
	}
	running := s.Phase == lifecycle.PhaseReserved || s.Phase == lifecycle.PhaseStarted || s.Phase == lifecycle.PhaseStopping
	return q.Since.IsZero() || running || !s.At.Before(q.Since)
}
