package spec

import (
	"strings"
	"time"
)

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
	// OutputQuota bounds stdout+stderr bytes; 0 means DefaultOutputQuota,
	// NoOutputQuota none.
	OutputQuota int64 `json:"output_quota,omitempty"`
	// Record says what of the output the recorder keeps; the zero value
	// is the runtime's default (see Record).
	Record Record `json:"record,omitzero"`
	// TTY runs the process on a pseudo-terminal inside the sandbox: its
	// output is all on stdout (as on a terminal; stderr stays empty) and
	// stdin, if any, is the terminal's input. Rows and Cols are its first
	// size (zero: the kernel's default); Resize changes it. Only a
	// sandbox with a warden has terminals.
	TTY  bool   `json:"tty,omitempty"`
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
	// NoChanges: what the process does to /workspace is not tracked (its
	// exit says untracked). Tracking costs the process one round trip to
	// the warden per file it creates, deletes, renames or opens for
	// writing; a process that writes nothing pays nothing.
	NoChanges bool `json:"no_changes,omitempty"`
	// StopWithCaller ties the process to its caller: it is stopped
	// (cancelled) when the caller goes, that is when the context of a
	// Start that has not returned ends, when a piped stream is closed
	// before its end, or when a served client's stream ends. By default a
	// started process runs until it exits, its Timeout or its sandbox's
	// end, whoever started it: a caller that goes detaches, and the output
	// goes on into the recording (Process.Attach, Runtime.Logs).
	StopWithCaller bool `json:"stop_with_caller,omitempty"`
}

// Record bounds what the output recorder keeps of a process's output
// (stdout and stderr together, in arrival order): the first Head bytes and
// the last Tail bytes, the bytes between them counted as a gap. The zero
// value means the runtime's default (DefaultRecordHead, DefaultRecordTail,
// unless stockade.Options says otherwise); a zero field alone takes its
// default. Off records nothing.
type Record struct {
	Off  bool  `json:"off,omitempty"`
	Head int64 `json:"head,omitempty"`
	Tail int64 `json:"tail,omitempty"`
}

// Recording bounds.
const (
	DefaultRecordHead = 64 << 10
	DefaultRecordTail = 1 << 20
	// MinRecordBound keeps a bound from being so small that the tail
	// rotates a segment file per chunk.
	MinRecordBound = 4 << 10
	// MaxRecordBound bounds each of Head and Tail: a recording takes up
	// to Head + 2×Tail of the journal's disk, and a reader holds what it
	// keeps in memory.
	MaxRecordBound = 256 << 20
)

// Validate checks the bounds: each 0 (the default) or within
// [MinRecordBound, MaxRecordBound]; Off with a bound is contradictory.
func (r Record) Validate() error {
	if r.Off && (r.Head != 0 || r.Tail != 0) {
		return Errorf(CodeInvalidArgument, "record", "recording is off but head %d or tail %d is set", r.Head, r.Tail)
	}
	for _, b := range []struct {
		name string
		v    int64
	}{{"head", r.Head}, {"tail", r.Tail}} {
		if b.v != 0 && (b.v < MinRecordBound || b.v > MaxRecordBound) {
			return Errorf(CodeInvalidArgument, "record", "%s bound %d is outside [%d, %d] bytes (0 means the default)", b.name, b.v, MinRecordBound, MaxRecordBound)
		}
	}
	return nil
}

// Over returns r with its zero fields taken from def (the runtime's
// default); a process that sets a bound records even if def is Off.
func (r Record) Over(def Record) Record {
	if r.Off {
		return Record{Off: true}
	}
	if r == (Record{}) {
		if def.Off {
			return Record{Off: true}
		}
		r = def
	}
	// def.Off has no bounds (Validate): its zero fields fall through.
	if r.Head == 0 {
		r.Head = def.Head
	}
	if r.Tail == 0 {
		r.Tail = def.Tail
	}
	if r.Head == 0 {
		r.Head = DefaultRecordHead
	}
	if r.Tail == 0 {
		r.Tail = DefaultRecordTail
	}
	return r
}

// ValidEnvName reports whether name is a portable environment variable
// name: [A-Za-z_][A-Za-z0-9_]*. Anything else ("1X", "A-B", "A B") is
// handled differently by different shells and libcs, so it is refused.
func ValidEnvName(name string) bool {
	if name == "" {
		return false
	}
	for i, c := range name {
		switch {
		case c == '_', 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// AsStarted is p as a Start takes it: a Stdout or Stderr left "" is a
// pipe. Both sides of the API (embedded and the client) start from it and
// judge it with Validate, so they refuse the same specs.
func (p Process) AsStarted() Process {
	if p.Stdout == "" {
		p.Stdout = Pipe
	}
	if p.Stderr == "" {
		p.Stderr = Pipe
	}
	if p.Dir != "" && !strings.HasPrefix(p.Dir, "/") {
		// A relative working directory is a workspace path, as Put's and
		// Get's are; one that leaves /workspace stays as given and
		// Validate refuses it.
		if abs, err := WorkspacePath(p.Dir); err == nil {
			p.Dir = abs
		}
	}
	return p
}

// Validate checks argv, env, dir, stream modes, timeout and quota, and the
// size limits on argv and env (MaxArgs, MaxEnv, MaxArgBytes,
// MaxArgvEnvBytes) and dir (MaxPathBytes).
func (p Process) Validate() error {
	bad := func(format string, args ...any) error {
		return Errorf(CodeInvalidArgument, "process", format, args...)
	}
	if len(p.Argv) == 0 || p.Argv[0] == "" {
		return bad("argv is empty")
	}
	if len(p.Argv) > MaxArgs {
		return bad("argv has %d strings, over the limit of %d", len(p.Argv), MaxArgs)
	}
	if len(p.Env) > MaxEnv {
		return bad("env has %d entries, over the limit of %d", len(p.Env), MaxEnv)
	}
	total := 0
	for i, a := range p.Argv {
		if len(a) > MaxArgBytes {
			return bad("argv[%d] is %d bytes, over the limit of %d", i, len(a), MaxArgBytes)
		}
		if strings.IndexByte(a, 0) >= 0 {
			return bad("argv[%d] contains a NUL byte", i)
		}
		total += len(a) + 1
	}
	for i, e := range p.Env {
		if len(e) > MaxArgBytes {
			return bad("env[%d] is %d bytes, over the limit of %d", i, len(e), MaxArgBytes)
		}
		if strings.IndexByte(e, 0) >= 0 {
			return bad("env[%d] contains a NUL byte", i)
		}
		name, _, ok := strings.Cut(e, "=")
		if !ok || !ValidEnvName(name) {
			// The name only: a value may be a secret, and errors are shown.
			return bad("env[%d] (name %q) is not NAME=value with NAME matching [A-Za-z_][A-Za-z0-9_]*", i, clip(name))
		}
		total += len(e) + 1
	}
	if total > MaxArgvEnvBytes {
		return bad("argv and env are %d bytes together, over the limit of %d", total, MaxArgvEnvBytes)
	}
	if len(p.Dir) > MaxPathBytes {
		return bad("dir is %d bytes, over the limit of %d", len(p.Dir), MaxPathBytes)
	}
	if strings.IndexByte(p.Dir, 0) >= 0 {
		return bad("dir %q contains a NUL byte", p.Dir)
	}
	if p.Dir != "" && !strings.HasPrefix(p.Dir, "/") {
		return bad("dir %q is not absolute, nor a path relative to %s that stays within it", p.Dir, WorkspaceDir)
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
	if err := p.Record.Validate(); err != nil {
		return err
	}
	if !p.TTY && (p.Rows != 0 || p.Cols != 0) {
		return bad("a terminal size (%dx%d) without a terminal (tty)", p.Rows, p.Cols)
	}
	return nil
}

// Result is how a process ended.
type Result struct {
	// ExitCode is the process's exit status, or -1 when it is unknown
	// (lost, or ended without Docker reporting a code).
	ExitCode int `json:"exit_code"`
	// Reason says why it ended (see the exit reasons in docs/design.md).
	Reason string `json:"reason"`
	// Err is the typed error for every reason but a plain exit.
	Err         error     `json:"-"`
	StdoutBytes int64     `json:"stdout_bytes"`
	StderrBytes int64     `json:"stderr_bytes"`
	Started     time.Time `json:"started"`
	Ended       time.Time `json:"ended"`
	// Usage is what the process used (nil: not known, e.g. it never
	// started).
	Usage *ProcessUsage `json:"usage,omitempty"`
}
