package spec

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// NetworkKind says whether a sandbox gets its own bridge network.
type NetworkKind string

const (
	// NetworkIsolated: network mode none, loopback only (the default).
	NetworkIsolated NetworkKind = "isolated"
	// NetworkBridge: a bridge network of the sandbox's own.
	NetworkBridge NetworkKind = "bridge"
)

// User is the uid:gid every process in a sandbox runs as.
type User struct {
	UID int64 `json:"uid"`
	GID int64 `json:"gid"`
}

func (u User) String() string { return fmt.Sprintf("%d:%d", u.UID, u.GID) }

// Policy is a sandbox's isolation and resource policy.
type Policy struct {
	// CPUs is the CPU quota in cores (NanoCpus = CPUs × 1e9).
	CPUs float64 `json:"cpus"`
	// MemoryBytes is the memory limit; swap is never allowed (MemorySwap ==
	// Memory).
	MemoryBytes int64 `json:"memory_bytes"`
	// Pids is the maximum number of tasks in the sandbox.
	Pids int64 `json:"pids"`
	// HomeBytes and TmpBytes size the tmpfs mounts at /home/sandbox and /tmp.
	HomeBytes int64       `json:"home_bytes"`
	TmpBytes  int64       `json:"tmp_bytes"`
	Network   NetworkKind `json:"network"`
	User      User        `json:"user"`
}

// Defaults, as DESIGN.md's table gives them.
const (
	DefaultCPUs        = 1
	DefaultMemoryBytes = 512 << 20
	DefaultPids        = 256
	DefaultHomeBytes   = 64 << 20
	DefaultTmpBytes    = 64 << 20
	DefaultUID         = 65532
	DefaultGID         = 65532
	DefaultStopGrace   = 10 * time.Second
	// DefaultHighWaterMark is the credit, in bytes, a consumer of a piped
	// stream grants before the reader stops pulling from the socket.
	DefaultHighWaterMark = 64 << 10
	// DefaultReceiveChunk bounds one read from the Docker connection.
	DefaultReceiveChunk = 64 << 10
	// DefaultFrameLimit bounds one multiplexed frame's payload.
	DefaultFrameLimit = 1 << 20
	// DefaultOutputQuota bounds a process's combined stdout+stderr bytes.
	DefaultOutputQuota = 64 << 20
)

// DefaultPolicy returns the embedded default policy.
func DefaultPolicy() Policy {
	return Policy{
		CPUs:        DefaultCPUs,
		MemoryBytes: DefaultMemoryBytes,
		Pids:        DefaultPids,
		HomeBytes:   DefaultHomeBytes,
		TmpBytes:    DefaultTmpBytes,
		Network:     NetworkIsolated,
		User:        User{UID: DefaultUID, GID: DefaultGID},
	}
}

// maxID is the largest uid/gid Linux accepts (2^32-2; 2^32-1 is "no id").
const maxID = math.MaxUint32 - 1

// Validate checks that every field is well formed. It returns an
// invalid_argument *Error naming the first bad field. Whether a particular
// daemon can honour the policy (minimum memory, representable NanoCPUs) is the
// Docker adapter's check, reported as unsupported.
func (p Policy) Validate() error {
	bad := func(field string, format string, args ...any) error {
		return Errorf(CodeInvalidArgument, "policy", "%s: %s", field, fmt.Sprintf(format, args...))
	}
	switch {
	case math.IsNaN(p.CPUs) || math.IsInf(p.CPUs, 0) || p.CPUs <= 0:
		return bad("cpus", "%v is not a positive number of cores", p.CPUs)
	case p.MemoryBytes <= 0:
		return bad("memory_bytes", "%d is not positive", p.MemoryBytes)
	case p.Pids <= 0:
		return bad("pids", "%d is not positive", p.Pids)
	case p.HomeBytes <= 0:
		return bad("home_bytes", "%d is not positive", p.HomeBytes)
	case p.TmpBytes <= 0:
		return bad("tmp_bytes", "%d is not positive", p.TmpBytes)
	case p.Network != NetworkIsolated && p.Network != NetworkBridge:
		return bad("network", "%q is neither %q nor %q", p.Network, NetworkIsolated, NetworkBridge)
	case p.User.UID < 0 || p.User.UID > maxID:
		return bad("user.uid", "%d is outside 0..%d", p.User.UID, int64(maxID))
	case p.User.GID < 0 || p.User.GID > maxID:
		return bad("user.gid", "%d is outside 0..%d", p.User.GID, int64(maxID))
	case p.User.UID == 0 || p.User.GID == 0:
		return bad("user", "%s: a sandbox never runs as root", p.User)
	}
	return nil
}

// Lifetime says what happens to a sandbox whose caller is gone.
type Lifetime string

const (
	// OneShot sandboxes are stopped and removed by recovery if their
	// runtime died: nobody is left to use them.
	OneShot Lifetime = "one-shot"
	// Kept sandboxes survive their runtime and are re-adopted on recovery.
	Kept Lifetime = "kept"
)

// Dataset is a read-only image mounted into a sandbox.
type Dataset struct {
	// Image is the dataset image's exact ID (sha256:…).
	Image string `json:"image"`
	// Target is the absolute mount point inside the sandbox.
	Target string `json:"target"`
}

// Sandbox is what CreateSandbox is asked to make.
type Sandbox struct {
	// Image is the sandbox image, pinned by exact ID (sha256:…). A tag is
	// resolved once by the caller-facing API and pinned.
	Image    string    `json:"image"`
	Policy   Policy    `json:"policy"`
	Datasets []Dataset `json:"datasets,omitempty"`
	Lifetime Lifetime  `json:"lifetime"`
	// TTL, if positive, stops the sandbox that long after creation.
	TTL time.Duration `json:"ttl,omitempty"`
}

// IsImageID reports whether s is an exact image ID: "sha256:" followed by 64
// lowercase hex digits.
func IsImageID(s string) bool {
	const prefix = "sha256:"
	if len(s) != len(prefix)+64 || !strings.HasPrefix(s, prefix) {
		return false
	}
	for _, c := range s[len(prefix):] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Validate checks the spec's shape: a pinned image ID, a valid policy, a
// known lifetime, datasets with absolute, distinct targets.
func (s Sandbox) Validate() error {
	if !IsImageID(s.Image) {
		return Errorf(CodeInvalidArgument, "sandbox", "image %q is not pinned by exact ID (sha256:<64 hex>)", s.Image)
	}
	if err := s.Policy.Validate(); err != nil {
		return err
	}
	if s.Lifetime != OneShot && s.Lifetime != Kept {
		return Errorf(CodeInvalidArgument, "sandbox", "lifetime %q is neither %q nor %q", s.Lifetime, OneShot, Kept)
	}
	if s.TTL < 0 {
		return Errorf(CodeInvalidArgument, "sandbox", "ttl %v is negative", s.TTL)
	}
	seen := map[string]bool{}
	for i, d := range s.Datasets {
		if !IsImageID(d.Image) {
			return Errorf(CodeInvalidArgument, "sandbox", "datasets[%d].image %q is not pinned by exact ID", i, d.Image)
		}
		if !strings.HasPrefix(d.Target, "/") || strings.Contains(d.Target, "..") || d.Target == "/" {
			return Errorf(CodeInvalidArgument, "sandbox", "datasets[%d].target %q is not an absolute path below /", i, d.Target)
		}
		for _, reserved := range []string{"/workspace", "/tmp", "/home/sandbox", "/proc", "/sys", "/dev"} {
			if d.Target == reserved || strings.HasPrefix(d.Target, reserved+"/") {
				return Errorf(CodeInvalidArgument, "sandbox", "datasets[%d].target %q overlaps %s", i, d.Target, reserved)
			}
		}
		if seen[d.Target] {
			return Errorf(CodeInvalidArgument, "sandbox", "datasets[%d].target %q is used twice", i, d.Target)
		}
		seen[d.Target] = true
	}
	return nil
}

// StreamMode says what happens to a process's stdout or stderr.
type StreamMode string

const (
	// Pipe hands the stream to the caller as an io.ReadCloser that must be
	// read: stdout and stderr share one connection, so an unread piped
	// stream blocks the other and, in the end, the process.
	Pipe StreamMode = "pipe"
	// Discard reads and drops the stream (its bytes still count toward the
	// output quota).
	Discard StreamMode = "discard"
)

// Process is what Sandbox.Start is asked to run.
type Process struct {
	Argv []string `json:"argv"`
	// Env adds NAME=value variables to the sandbox's fixed environment.
	Env []string `json:"env,omitempty"`
	// Dir is the working directory; empty means /workspace/work.
	Dir    string     `json:"dir,omitempty"`
	Stdin  bool       `json:"stdin,omitempty"`
	Stdout StreamMode `json:"stdout"`
	Stderr StreamMode `json:"stderr"`
	// Timeout, if positive, stops the process (its group) that long after
	// it was reserved.
	Timeout time.Duration `json:"timeout,omitempty"`
	// OutputQuota bounds stdout+stderr bytes; 0 means DefaultOutputQuota.
	OutputQuota int64 `json:"output_quota,omitempty"`
}

// Validate checks argv, env, dir, stream modes, timeout and quota.
func (p Process) Validate() error {
	bad := func(format string, args ...any) error {
		return Errorf(CodeInvalidArgument, "process", format, args...)
	}
	if len(p.Argv) == 0 || p.Argv[0] == "" {
		return bad("argv is empty")
	}
	for i, a := range p.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return bad("argv[%d] contains a NUL byte", i)
		}
	}
	for i, e := range p.Env {
		name, _, ok := strings.Cut(e, "=")
		if !ok || name == "" || strings.IndexByte(e, 0) >= 0 {
			return bad("env[%d] %q is not NAME=value", i, e)
		}
	}
	if p.Dir != "" && (!strings.HasPrefix(p.Dir, "/") || strings.IndexByte(p.Dir, 0) >= 0) {
		return bad("dir %q is not an absolute path", p.Dir)
	}
	for name, m := range map[string]StreamMode{"stdout": p.Stdout, "stderr": p.Stderr} {
		if m != Pipe && m != Discard {
			return bad("%s mode %q is neither %q nor %q", name, m, Pipe, Discard)
		}
	}
	if p.Timeout < 0 {
		return bad("timeout %v is negative", p.Timeout)
	}
	if p.OutputQuota < 0 {
		return bad("output_quota %d is negative", p.OutputQuota)
	}
	return nil
}

// Result is how a process ended.
type Result struct {
	// ExitCode is the process's exit status, or -1 when it is unknown
	// (lost, or ended without Docker reporting a code).
	ExitCode int `json:"exit_code"`
	// Reason says why it ended (see DESIGN.md's exit reasons).
	Reason string `json:"reason"`
	// Err is the typed error for every reason but a plain exit.
	Err         error     `json:"-"`
	StdoutBytes int64     `json:"stdout_bytes"`
	StderrBytes int64     `json:"stderr_bytes"`
	Started     time.Time `json:"started"`
	Ended       time.Time `json:"ended"`
}
