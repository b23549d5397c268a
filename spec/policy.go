package spec

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// NetworkKind says what a sandbox's network reaches.
type NetworkKind string

const (
	// NetworkIsolated: network mode none, loopback only (the default).
	NetworkIsolated NetworkKind = "isolated"
	// NetworkOpen: a bridge network of the sandbox's own, with a route to
	// everything the host reaches.
	NetworkOpen NetworkKind = "open"
	// NetworkBridge is NetworkOpen's old name, still accepted (and still
	// found in older journals); WithDefaults turns it into NetworkOpen.
	NetworkBridge NetworkKind = "bridge"
	// NetworkAllowlist: an internal network with no route out; the
	// sandbox's egress proxy admits what Policy.Egress allows.
	NetworkAllowlist NetworkKind = "allowlist"
)

// Canonical returns the kind under its current name.
func (k NetworkKind) Canonical() NetworkKind {
	if k == NetworkBridge {
		return NetworkOpen
	}
	return k
}

// User is the uid:gid every process in a sandbox runs as.
type User struct {
	UID int64 `json:"uid"`
	GID int64 `json:"gid"`
}

func (u User) String() string { return fmt.Sprintf("%d:%d", u.UID, u.GID) }

// Policy is a sandbox's isolation and resource policy.
//
// A zero field means its default (DefaultPolicy) once WithDefaults is
// applied, as CreateSandbox does: a caller states only what differs. No zero
// value is ever used as such, because each would be wrong or dangerous: zero
// cpus, memory or pids admit nothing, a zero network is no network kind, and
// a zero User is uid 0, root, which a sandbox never runs as.
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
	// Egress is the allowlist network's rules (none for other kinds). An
	// allowlist with no rules admits nothing.
	Egress []EgressRule `json:"egress,omitempty"`
	User   User         `json:"user"`
}

// Defaults, as the defaults table of docs/design.md gives them.
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
	// NoOutputQuota as a process's OutputQuota lets it write without
	// bound (its recording is still bounded by Record): a long-running
	// service's logs, or a stream its caller reads whole.
	NoOutputQuota = math.MaxInt64
)

// Input limits. Each is refused with an invalid_argument error naming the
// field and the limit, before anything is journaled or asked of Docker.
const (
	// MaxArgs and MaxEnv bound how many argv and env strings a process has.
	MaxArgs = 4096
	MaxEnv  = 1024
	// MaxArgBytes bounds one argv or env string: the kernel's
	// MAX_ARG_STRLEN (32 pages) less the string's NUL; execve refuses more.
	MaxArgBytes = 128<<10 - 1
	// MaxArgvEnvBytes bounds argv and env together, each string counted
	// with its NUL as execve counts it. It stays well under ARG_MAX (a
	// quarter of the stack limit, 2 MiB with the usual 8 MiB stack, shared
	// with the sandbox's fixed environment and the exec wrapper's own
	// arguments), and it keeps a process's journal record small: JSON
	// escapes a byte into at most 6 (\u003c), so a maximal spec encodes to
	// about 1.6 MiB, under the journal's 4 MiB record limit (a test in the
	// root package checks the two against each other).
	MaxArgvEnvBytes = 256 << 10
	// MaxPathBytes bounds a working directory or dataset target: PATH_MAX
	// less its NUL.
	MaxPathBytes = 4095
	// MaxDatasets bounds a sandbox's dataset mounts.
	MaxDatasets = 64
	// MaxImageRefBytes bounds an image reference (a tag or ID) before it is
	// resolved; Docker's own limit on a repository name is 255.
	MaxImageRefBytes = 1024
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

// WithDefaults returns p with each zero field taken from DefaultPolicy. User
// is defaulted only as a whole: a zero User means the default 65532:65532,
// while a User with one id set keeps its zero other id, which Validate then
// refuses (root's group), rather than guessing what was meant. Non-zero
// fields, bad ones included, are kept for Validate to judge.
func (p Policy) WithDefaults() Policy {
	d := DefaultPolicy()
	if p.CPUs == 0 {
		p.CPUs = d.CPUs
	}
	if p.MemoryBytes == 0 {
		p.MemoryBytes = d.MemoryBytes
	}
	if p.Pids == 0 {
		p.Pids = d.Pids
	}
	if p.HomeBytes == 0 {
		p.HomeBytes = d.HomeBytes
	}
	if p.TmpBytes == 0 {
		p.TmpBytes = d.TmpBytes
	}
	if p.Network == "" {
		p.Network = d.Network
	}
	p.Network = p.Network.Canonical()
	if p.User == (User{}) {
		p.User = d.User
	}
	return p
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
	case p.Network.Canonical() != NetworkIsolated && p.Network.Canonical() != NetworkOpen && p.Network != NetworkAllowlist:
		return bad("network", "%q is not %q, %q or %q", p.Network, NetworkIsolated, NetworkOpen, NetworkAllowlist)
	case p.User.UID < 0 || p.User.UID > maxID:
		return bad("user.uid", "%d is outside 0..%d", p.User.UID, int64(maxID))
	case p.User.GID < 0 || p.User.GID > maxID:
		return bad("user.gid", "%d is outside 0..%d", p.User.GID, int64(maxID))
	case p.User.UID == 0 || p.User.GID == 0:
		return bad("user", "%s: a sandbox never runs as root", p.User)
	}
	return validateEgress(p.Network, p.Egress)
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

// Sandbox is what CreateSandbox is asked to make, and what the journal
// keeps of it. As asked, Image may be a tag and From a SANDBOX/NAME, and
// zero fields mean their defaults (WithDefaults); the runtime resolves and
// fills them before the spec is judged (Validate) and journaled.
type Sandbox struct {
	// Image is the sandbox image: a tag or an image ID as asked, pinned by
	// exact ID (sha256:…) once resolved; a tag is resolved once.
	Image string `json:"image"`
	// Policy; each zero field means its default (Policy.WithDefaults), so
	// the zero Policy is DefaultPolicy().
	Policy   Policy    `json:"policy"`
	Datasets []Dataset `json:"datasets,omitempty"`
	// Lifetime; "" means Kept.
	Lifetime Lifetime `json:"lifetime"`
	// TTL, if positive, stops the sandbox that long after creation.
	TTL time.Duration `json:"ttl,omitempty"`
	// Env is every process's environment before its own (a process's
	// variable of the same name wins); Dir is its default working
	// directory. Labels are the caller's names for the sandbox: journaled
	// and listed, never Docker labels. The three, like Lifetime and TTL,
	// are applied at a warm pool's claim, so they never force a cold start
	// (see PoolKey).
	Env    []string          `json:"env,omitempty"`
	Dir    string            `json:"dir,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	// Secrets are env variables whose values are never written down
	// (SecretVar): the journal keeps their names and refs. Applied at a
	// pool's claim, as Env is.
	Secrets []SecretVar `json:"secrets,omitempty"`
	// From is the checkpoint whose workspace the sandbox starts with,
	// written in before any process runs (journaled sandbox.restored): its
	// id (ck-…), or as asked a name unique among its sandbox's checkpoints
	// given as SANDBOX/NAME. Its Env and Dir are the defaults for the
	// fields left empty. A sandbox with a From is never a pool's.
	From string `json:"from,omitempty"`
}

// Bounds on a sandbox's labels.
const (
	MaxLabels          = 64
	MaxLabelKeyBytes   = 63
	MaxLabelValueBytes = 256
)

// Valid reports whether l is a known lifetime.
func (l Lifetime) Valid() bool { return l == OneShot || l == Kept }

// PoolKey is what a warm pool's sandbox and a request must share for the
// request to claim it: everything fixed once the workload started (the
// image, the limits, the network kind, the user, the datasets). The rest
// (lifetime, TTL, env, dir, labels, allowlist rules) is applied at the
// claim. Two specs with equal keys get the same container body.
func (s Sandbox) PoolKey() string {
	p := s.Policy
	p.Egress = nil
	b, _ := json.Marshal(struct {
		Image    string    `json:"image"`
		Policy   Policy    `json:"policy"`
		Datasets []Dataset `json:"datasets,omitempty"`
	}{s.Image, p, s.Datasets})
	return string(b)
}

// ProcessDefaults returns p with the sandbox's env before its own (a name p
// sets itself is not repeated) and the sandbox's dir when p names none.
func (s Sandbox) ProcessDefaults(p Process) Process {
	if p.Dir == "" {
		p.Dir = s.Dir
	}
	if len(s.Env) == 0 {
		return p
	}
	own := map[string]bool{}
	for _, e := range p.Env {
		name, _, _ := strings.Cut(e, "=")
		own[name] = true
	}
	env := make([]string, 0, len(s.Env)+len(p.Env))
	for _, e := range s.Env {
		if name, _, _ := strings.Cut(e, "="); !own[name] {
			env = append(env, e)
		}
	}
	p.Env = append(env, p.Env...)
	return p
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

// ValidateImageRef checks the shape of an image reference that is still to
// be resolved (a tag or an ID): not empty, bounded, free of NUL, control
// characters and spaces, none of which any reference holds. Its grammar
// and whether it names an image are the engine's to say (ResolveImage).
func ValidateImageRef(ref string) error {
	if ref == "" {
		return Errorf(CodeInvalidArgument, "sandbox", "no image given")
	}
	if len(ref) > MaxImageRefBytes {
		return Errorf(CodeInvalidArgument, "sandbox", "image reference is %d bytes, over the limit of %d", len(ref), MaxImageRefBytes)
	}
	for _, c := range ref {
		if c <= ' ' || c == 0x7f {
			return Errorf(CodeInvalidArgument, "sandbox", "image reference %q holds a space, NUL or control character", ref)
		}
	}
	return nil
}

// cleanTarget cleans an absolute dataset target, so "//workspace",
// "/workspace/" and "/a/../workspace" are all "/workspace". It reports false
// for a relative target or one that climbs above / ("/../x").
func cleanTarget(t string) (string, bool) {
	if !strings.HasPrefix(t, "/") {
		return "", false
	}
	rel, ok := CleanRelPath(strings.TrimLeft(t, "/"))
	if !ok {
		return "", false
	}
	if rel == "." {
		return "/", true
	}
	return "/" + rel, true
}

// WithDefaults returns s as CreateSandbox makes it: the policy's zero fields
// defaulted (Policy.WithDefaults), an empty lifetime made Kept, and dataset
// targets cleaned, so what is journaled, mounted and read back is the path
// Validate judged.
func (s Sandbox) WithDefaults() Sandbox {
	s.Policy = s.Policy.WithDefaults()
	if s.Lifetime == "" {
		s.Lifetime = Kept
	}
	if len(s.Datasets) > 0 {
		ds := make([]Dataset, len(s.Datasets))
		for i, d := range s.Datasets {
			if c, ok := cleanTarget(d.Target); ok {
				d.Target = c
			}
			ds[i] = d
		}
		s.Datasets = ds
	}
	return s
}

// Validate checks the spec's shape: a pinned image ID, a valid policy, a
// known lifetime, datasets with absolute, distinct targets clear of the
// sandbox's own mounts.
func (s Sandbox) Validate() error {
	if !IsImageID(s.Image) {
		return Errorf(CodeInvalidArgument, "sandbox", "image %q is not pinned by exact ID (sha256:<64 hex>)", s.Image)
	}
	return s.validateBody()
}

// ValidateUnpinned is Validate for a spec whose image is still a reference
// to resolve: everything but the pinning is checked, so bad input is refused
// before Docker is asked to resolve anything.
func (s Sandbox) ValidateUnpinned() error {
	if err := ValidateImageRef(s.Image); err != nil {
		return err
	}
	return s.validateBody()
}

func (s Sandbox) validateBody() error {
	if err := s.Policy.Validate(); err != nil {
		return err
	}
	if s.Lifetime != OneShot && s.Lifetime != Kept {
		return Errorf(CodeInvalidArgument, "sandbox", "lifetime %q is neither %q nor %q", s.Lifetime, OneShot, Kept)
	}
	if s.TTL < 0 {
		return Errorf(CodeInvalidArgument, "sandbox", "ttl %v is negative", s.TTL)
	}
	if err := s.validateDefaults(); err != nil {
		return err
	}
	if len(s.Datasets) > MaxDatasets {
		return Errorf(CodeInvalidArgument, "sandbox", "datasets: %d mounts, over the limit of %d", len(s.Datasets), MaxDatasets)
	}
	seen := map[string]bool{}
	for i, d := range s.Datasets {
		if !IsImageID(d.Image) {
			return Errorf(CodeInvalidArgument, "sandbox", "datasets[%d].image %q is not pinned by exact ID", i, d.Image)
		}
		if len(d.Target) > MaxPathBytes {
			return Errorf(CodeInvalidArgument, "sandbox", "datasets[%d].target is %d bytes, over the limit of %d", i, len(d.Target), MaxPathBytes)
		}
		if strings.IndexByte(d.Target, 0) >= 0 {
			return Errorf(CodeInvalidArgument, "sandbox", "datasets[%d].target %q contains a NUL byte", i, d.Target)
		}
		t, ok := cleanTarget(d.Target)
		if !ok || t == "/" {
			return Errorf(CodeInvalidArgument, "sandbox", "datasets[%d].target %q is not an absolute path below /", i, d.Target)
		}
		for _, reserved := range []string{"/workspace", "/tmp", "/home/sandbox", "/proc", "/sys", "/dev"} {
			if t == reserved || strings.HasPrefix(t, reserved+"/") {
				return Errorf(CodeInvalidArgument, "sandbox", "datasets[%d].target %q overlaps %s", i, d.Target, reserved)
			}
		}
		if seen[t] {
			return Errorf(CodeInvalidArgument, "sandbox", "datasets[%d].target %q is used twice", i, d.Target)
		}
		seen[t] = true
	}
	return nil
}

// validateDefaults checks env and dir as a process's are checked (one
// stands in for both: a sandbox's env is a process's before its own) and
// the labels' bounds.
// ValidateDefaults checks what a sandbox gives every process (env, dir,
// secrets) and its labels, as Validate does.
func (s Sandbox) ValidateDefaults() error { return s.validateDefaults() }

func (s Sandbox) validateDefaults() error {
	if err := (Process{Argv: []string{"-"}, Env: s.Env, Dir: s.Dir, Stdout: Discard, Stderr: Discard}).Validate(); err != nil {
		var se *Error
		if errors.As(err, &se) {
			return Errorf(CodeInvalidArgument, "sandbox", "%s", strings.Replace(se.Msg, "argv and env", "env", 1))
		}
		return err
	}
	if err := validateSecrets(s.Secrets, s.Env); err != nil {
		return err
	}
	if s.From != "" && !IsCheckpointID(s.From) {
		return Errorf(CodeInvalidArgument, "sandbox", "from: %q is not a checkpoint id (ck- and 20 lowercase hex digits)", clip(s.From))
	}
	if len(s.Labels) > MaxLabels {
		return Errorf(CodeInvalidArgument, "sandbox", "labels: %d, over the limit of %d", len(s.Labels), MaxLabels)
	}
	for k, v := range s.Labels {
		if k == "" || len(k) > MaxLabelKeyBytes {
			return Errorf(CodeInvalidArgument, "sandbox", "label key %q is empty or over %d bytes", clip(k), MaxLabelKeyBytes)
		}
		for _, c := range k {
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-' || c == '/') {
				return Errorf(CodeInvalidArgument, "sandbox", "label key %q: only letters, digits and . _ - / are allowed", clip(k))
			}
		}
		if len(v) > MaxLabelValueBytes {
			return Errorf(CodeInvalidArgument, "sandbox", "label %s: the value is %d bytes, over the limit of %d", k, len(v), MaxLabelValueBytes)
		}
		for _, c := range v {
			if c < ' ' || c == 0x7f {
				return Errorf(CodeInvalidArgument, "sandbox", "label %s: the value holds a control character", k)
			}
		}
	}
	return nil
}

// IsCheckpointID reports whether s is a checkpoint's id: "ck-" and 20
// lowercase hex digits (the start of its manifest's sha256).
func IsCheckpointID(s string) bool {
	h, ok := strings.CutPrefix(s, "ck-")
	if !ok || len(h) != 20 {
		return false
	}
	for _, c := range h {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
