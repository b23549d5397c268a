// Package mcpserver serves a stockade runtime to agents over the Model
// Context Protocol (the official Go SDK, github.com/modelcontextprotocol/go-sdk):
// tools to make sandboxes, run commands, move files, and — what no peer's
// server has — say what a command changed, checkpoint, roll back, and read
// any process's output from any offset after any crash.
//
// New builds the server over a host.Runtime, so the same tools serve an
// embedded runtime and a `stockade serve` one alike (`stockade mcp` picks
// the server when one answers). Every tool takes and returns typed JSON
// (its schema derived from the Go types below); a bad input is a tool
// error whose text starts with stockade's error (op, code, message) and
// the session goes on. Output is bounded: a command's stdout and stderr
// are cut at a caller's bound with a marker naming the process and the
// offset to read on from (the logs tool), never held whole in memory.
package mcpserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/rerun"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/tracing"
)

// Version is the server's version as it introduces itself.
const Version = "0.1.0"

// Bounds of what a tool hands back at once.
const (
	// DefaultMaxOutput bounds each stream an exec returns, and a logs or
	// files_read window, unless the call asks for less or more.
	DefaultMaxOutput = 64 << 10
	// MaxOutput is the largest bound a call may ask for.
	MaxOutput = 4 << 20
	// MaxWriteBytes bounds one files_write's content (decoded).
	MaxWriteBytes = 16 << 20
	// MaxHistory bounds one history page, and maxHistoryBytes its
	// payloads (a page holds at least one event).
	MaxHistory      = 500
	maxHistoryBytes = 4 << 20
	// MaxMessageBytes bounds one inbound message on stdio: a files_write of
	// MaxWriteBytes in base64 fits. A larger one ends the session (the
	// stream cannot be resynchronised inside a message).
	MaxMessageBytes = 32 << 20
)

// Options configure New.
type Options struct {
	// Journal is the runtime's journal file, for the rerun tool (it reads
	// the recorded output and stdin beside it: the journal must be on
	// this machine). "": no rerun tool.
	Journal string

	// noSubscriptions: resources are read, not subscribed to (the
	// stateless HTTP transport has no session to notify).
	noSubscriptions bool
}

// New returns an MCP server whose tools drive rt, with the resources
// stockade://sandbox/ID/history and stockade://process/ID/output
// (subscribable: a subscriber hears of new events and new output).
func New(rt host.Runtime, opts Options) *mcp.Server {
	t := tools{rt: rt, journal: opts.Journal}
	subs := newSubscriptions(t)
	so := &mcp.ServerOptions{
		Instructions: "Sandboxes for running untrusted commands. Every command is journaled: after any crash, " +
			"logs reads a process's output from any offset and wait gives its exit; changes says what a command " +
			"did to /workspace; checkpoint and rollback go back. Paths are relative to /workspace or absolute under it; " +
			"commands run in /workspace/work by default.",
	}
	if !opts.noSubscriptions {
		so.SubscribeHandler, so.UnsubscribeHandler = subs.subscribe, subs.unsubscribe
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "stockade", Title: "stockade: sandboxes that remember", Version: Version}, so)
	s.AddReceivingMiddleware(callerSpan)
	subs.mu.Lock()
	subs.srv = s
	subs.mu.Unlock()
	t.addResources(s)
	add(s, "sandbox_create", "Make a sandbox (a locked-down container with an empty /workspace) and start it; claims a warm pooled one when one matches. Returns its id.", t.sandboxCreate)
	add(s, "sandbox_list", "List the live sandboxes with their phase, image, labels and running processes.", t.sandboxList)
	add(s, "sandbox_remove", "Stop a sandbox (every process ends) and delete it with its workspace.", t.sandboxRemove)
	add(s, "exec", "Run a command in a sandbox to its end and return its exit code, reason and output (each stream cut at max_output_bytes with a marker; read the rest with logs). argv runs a program; command runs a shell line (sh -c).", t.exec)
	add(s, "exec_background", "Start a command in a sandbox and return its process id at once; its output is recorded (read it with logs, wait for its end with wait).", t.execBackground)
	add(s, "logs", "Read a process's recorded output from a byte offset (stdout and stderr together, in the order written), at most max_bytes; says where to read on (next_offset) and whether the process has ended, with its exit: read on while more is true or ended is false. Works for any process, running or ended, after any restart.", t.logs)
	add(s, "wait", "Wait (at most max_wait_seconds) for a process to end and return its exit code and reason.", t.wait)
	add(s, "files_write", "Write a file in a sandbox's workspace (its missing parent directories are made). content is text, or base64 with encoding=base64.", t.filesWrite)
	add(s, "files_read", "Read a file of a sandbox's workspace from a byte offset, at most max_bytes (text, or base64 when it is not UTF-8); says the file's size and where to read on.", t.filesRead)
	add(s, "files_list", "List a directory of a sandbox's workspace: each entry's name, kind, size and mode.", t.filesList)
	add(s, "files_stat", "Describe a path of a sandbox's workspace: kind, size, mode, modification time, link target.", t.filesStat)
	add(s, "files_remove", "Remove a path of a sandbox's workspace and everything under it.", t.filesRemove)
	add(s, "changes", "What a finished process did to /workspace: created, modified, deleted and renamed paths (attributed to it, not to its neighbours), with unified diffs of small text files.", t.changes)
	add(s, "checkpoint", "Save a sandbox's /workspace/work (content-addressed, with the workload frozen) under an optional name; returns its id.", t.checkpoint)
	add(s, "rollback", "Restore a checkpoint (its id or name) into a sandbox's /workspace/work: every process of the sandbox is stopped first.", t.rollback)
	add(s, "history", "A sandbox's journaled events (its processes' included), oldest first, a page at a time from an offset.", t.history)
	add(s, "fork", "Make a new sandbox whose /workspace/work is a checkpoint's, or (given sandbox_id) a copy of a live sandbox's taken now; returns the new sandbox and the checkpoint it started from.", t.fork)
	if opts.Journal != "" {
		add(s, "rerun", "Run a sandbox's recorded session again (each process, its recorded stdin, in order) in a new sandbox and compare each with its record: exit, stdout, stderr, changes; reports the first divergence.", t.rerun)
	}
	return s
}

// add registers a tool whose handler returns (output, error): a stockade
// error becomes a tool error (the session goes on), its text the error's.
func add[In, Out any](s *mcp.Server, name, description string, h func(context.Context, In) (Out, error)) {
	mcp.AddTool(s, &mcp.Tool{Name: name, Description: description}, func(ctx context.Context, _ *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		out, err := h(ctx, in)
		if err != nil {
			var zero Out
			return nil, zero, toolError(err)
		}
		return nil, out, nil
	})
}

// toolError words an error for the agent: stockade's code first, then
// the message and its cause, once.
func toolError(err error) error {
	var se *spec.Error
	if !errors.As(err, &se) {
		return fmt.Errorf("%s: %w", spec.CodeInternal, err)
	}
	msg := string(se.Code)
	if se.Msg != "" {
		msg += ": " + se.Msg
	}
	if se.Cause != nil {
		msg += ": " + se.Cause.Error()
	}
	return errors.New(msg)
}

type tools struct {
	rt      host.Runtime
	journal string
}

func bad(format string, args ...any) error {
	return spec.Errorf(spec.CodeInvalidArgument, "mcp", format, args...)
}

// SandboxCreateIn is sandbox_create's input.
type SandboxCreateIn struct {
	Image       string            `json:"image,omitempty" jsonschema:"the image: a tag (resolved once and pinned) or an image ID; default stockade/toolbox:dev (make image builds it)"`
	Network     string            `json:"network,omitempty" jsonschema:"isolated (the default), open, or allow=HOST:PORT,... (an egress allowlist through the sandbox's proxy)"`
	MemoryBytes int64             `json:"memory_bytes,omitempty" jsonschema:"memory limit in bytes (0: 512 MiB)"`
	CPUs        float64           `json:"cpus,omitempty" jsonschema:"CPU limit (0: 1)"`
	Pids        int64             `json:"pids,omitempty" jsonschema:"process limit (0: 256)"`
	Env         []string          `json:"env,omitempty" jsonschema:"environment of every process, each as NAME=value"`
	Dir         string            `json:"dir,omitempty" jsonschema:"the processes' default working directory (absolute, or relative to /workspace; default /workspace/work)"`
	TTLSeconds  int64             `json:"ttl_seconds,omitempty" jsonschema:"stop the sandbox this long after it is made (0: never)"`
	Labels      map[string]string `json:"labels,omitempty" jsonschema:"your names for the sandbox"`
	OneShot     bool              `json:"one_shot,omitempty" jsonschema:"if the runtime that made it dies, the next one removes it instead of taking it back (default: kept)"`
}

// SandboxCreateOut is sandbox_create's result.
type SandboxCreateOut struct {
	ID    string `json:"id"`
	Image string `json:"image"`
}

// DefaultImage is sandbox_create's image when none is given (the CLI's).
const DefaultImage = "stockade/toolbox:dev"

func (t tools) sandboxCreate(ctx context.Context, in SandboxCreateIn) (SandboxCreateOut, error) {
	if in.Image == "" {
		in.Image = DefaultImage
	}
	s := spec.Sandbox{Image: in.Image, Env: in.Env, Dir: in.Dir, Labels: in.Labels, Lifetime: spec.Kept}
	if in.OneShot {
		s.Lifetime = spec.OneShot
	}
	if in.TTLSeconds < 0 {
		return SandboxCreateOut{}, bad("ttl_seconds %d is negative", in.TTLSeconds)
	}
	s.TTL = time.Duration(in.TTLSeconds) * time.Second
	s.Policy = spec.DefaultPolicy()
	if in.Network != "" {
		kind, rules, err := spec.ParseNetwork(in.Network)
		if err != nil {
			return SandboxCreateOut{}, err
		}
		s.Policy.Network, s.Policy.Egress = kind, rules
	}
	if in.MemoryBytes != 0 {
		s.Policy.MemoryBytes = in.MemoryBytes
	}
	if in.CPUs != 0 {
		s.Policy.CPUs = in.CPUs
	}
	if in.Pids != 0 {
		s.Policy.Pids = in.Pids
	}
	sb, err := t.rt.CreateSandbox(ctx, s)
	if err != nil {
		return SandboxCreateOut{}, err
	}
	st, err := sb.State(ctx)
	if err != nil {
		return SandboxCreateOut{ID: sb.ID()}, nil //nolint:nilerr // made; only its state could not be read
	}
	return SandboxCreateOut{ID: sb.ID(), Image: st.Spec.Image}, nil
}

// Empty is the input of a tool that takes none.
type Empty struct{}

// SandboxListOut is sandbox_list's result.
type SandboxListOut struct {
	Sandboxes []host.SandboxInfo `json:"sandboxes"`
}

func (t tools) sandboxList(ctx context.Context, _ Empty) (SandboxListOut, error) {
	list, err := t.rt.Sandboxes(ctx)
	if list == nil {
		list = []host.SandboxInfo{}
	}
	return SandboxListOut{Sandboxes: list}, err
}

// SandboxIn names a sandbox.
type SandboxIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
}

// Done says a tool did what it was asked.
type Done struct {
	Done bool `json:"done"`
}

func (t tools) sandboxRemove(ctx context.Context, in SandboxIn) (Done, error) {
	sb, err := t.rt.Sandbox(ctx, in.SandboxID)
	if err != nil {
		return Done{}, err
	}
	return Done{Done: true}, sb.Remove(ctx)
}

// ExecIn is exec's and exec_background's input.
type ExecIn struct {
	SandboxID      string   `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Argv           []string `json:"argv,omitempty" jsonschema:"the program and its arguments (give argv or command)"`
	Command        string   `json:"command,omitempty" jsonschema:"a shell command line, run with /bin/sh -c (give argv or command)"`
	Stdin          string   `json:"stdin,omitempty" jsonschema:"text given to the command's stdin (then closed)"`
	Dir            string   `json:"dir,omitempty" jsonschema:"working directory (absolute, or relative to /workspace; default the sandbox's)"`
	Env            []string `json:"env,omitempty" jsonschema:"environment added to the sandbox's, each as NAME=value"`
	TimeoutSeconds int64    `json:"timeout_seconds,omitempty" jsonschema:"stop the command after this long (0: no timeout)"`
	MaxOutputBytes int      `json:"max_output_bytes,omitempty" jsonschema:"the most bytes of each stream returned (default 65536; the rest stays in the recording: read it with logs)"`
	MaxWaitSeconds int64    `json:"max_wait_seconds,omitempty" jsonschema:"the longest the call waits for the command's end (default and limit 600); a command still running then goes on (ended false): follow it with logs and wait"`
}

// ExecOut is exec's result.
type ExecOut struct {
	ProcessID string `json:"process_id"`
	// Ended is false when the call stopped waiting (max_wait_seconds, or
	// the caller went) before the command ended: it runs on, recorded.
	Ended       bool   `json:"ended"`
	ExitCode    int    `json:"exit_code"`
	Reason      string `json:"reason"`
	Error       string `json:"error,omitempty"`
	Stdout      string `json:"stdout"`
	Stderr      string `json:"stderr"`
	StdoutBytes int64  `json:"stdout_bytes"`
	StderrBytes int64  `json:"stderr_bytes"`
	// Truncated: a stream had more than the bound; the text ends with a
	// marker, and logs reads the whole output.
	Truncated bool `json:"truncated,omitempty"`
}

func (in ExecIn) process(background bool) (spec.Process, error) {
	p := spec.Process{Argv: in.Argv, Dir: in.Dir, Env: in.Env, Stdin: in.Stdin != "" && !background}
	switch {
	case len(in.Argv) > 0 && in.Command != "":
		return p, bad("give argv or command, not both")
	case in.Command != "":
		p.Argv = []string{"/bin/sh", "-c", in.Command}
	case len(in.Argv) == 0:
		return p, bad("argv is empty and no command is given: say what to run")
	}
	if in.TimeoutSeconds < 0 {
		return p, bad("timeout_seconds %d is negative", in.TimeoutSeconds)
	}
	p.Timeout = time.Duration(in.TimeoutSeconds) * time.Second
	if background {
		if in.Stdin != "" {
			return p, bad("a background command takes no stdin")
		}
		p.Stdout, p.Stderr = spec.Discard, spec.Discard
	}
	return p, p.AsStarted().Validate()
}

func bound(n int) (int, error) {
	switch {
	case n < 0:
		return 0, bad("a byte bound of %d is negative", n)
	case n == 0:
		return DefaultMaxOutput, nil
	case n > MaxOutput:
		return 0, bad("a byte bound of %d is over the limit of %d", n, MaxOutput)
	}
	return n, nil
}

func (t tools) exec(ctx context.Context, in ExecIn) (ExecOut, error) {
	p, err := in.process(false)
	if err != nil {
		return ExecOut{}, err
	}
	limit, err := bound(in.MaxOutputBytes)
	if err != nil {
		return ExecOut{}, err
	}
	wait, err := maxWait(in.MaxWaitSeconds)
	if err != nil {
		return ExecOut{}, err
	}
	sb, err := t.rt.Sandbox(ctx, in.SandboxID)
	if err != nil {
		return ExecOut{}, err
	}
	proc, err := sb.Start(ctx, p)
	if err != nil {
		return ExecOut{}, err
	}
	out := ExecOut{ProcessID: proc.ID()}
	// Every call ends: past its wait, or with its caller, the streams are
	// let go (the process detaches and runs on, recorded), which ends the
	// reads below whatever holds the pipes open in the sandbox.
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	letGo := context.AfterFunc(wctx, func() {
		for _, c := range []io.Closer{proc.Stdout(), proc.Stderr()} {
			if c != nil {
				_ = c.Close() // what is unread stays in the recording
			}
		}
		if w := proc.Stdin(); w != nil {
			_ = w.Close() // end of input
		}
	})
	defer letGo()
	if p.Stdin {
		go func() {
			_, _ = io.Copy(proc.Stdin(), strings.NewReader(in.Stdin)) // a process that ends first stops reading: its result says how it ended
			_ = proc.Stdin().Close()                                  // end of input
		}()
	}
	var stdout, stderr capped
	stdout.limit, stderr.limit = limit, limit
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		stderr.drain(proc.Stderr())
	}()
	stdout.drain(proc.Stdout())
	wg.Wait()
	res, err := proc.Wait(wctx)
	out.Stdout, out.Stderr = stdout.text(proc.ID(), "stdout"), stderr.text(proc.ID(), "stderr")
	if err != nil && res.Reason == "" {
		if ctx.Err() != nil {
			return out, err // the caller went: the process runs on, recorded
		}
		out.ExitCode = -1 // not ended within the wait: logs and wait follow it
		return out, nil
	}
	out.Ended = true
	out.ExitCode, out.Reason, out.StdoutBytes, out.StderrBytes = res.ExitCode, res.Reason, res.StdoutBytes, res.StderrBytes
	if res.Err != nil {
		out.Error = res.Err.Error()
	}
	out.Truncated = stdout.cut > 0 || stderr.cut > 0
	return out, nil
}

// MaxWaitSeconds bounds how long one exec or wait call waits.
const MaxWaitSeconds = 600

// maxWait is a call's max_wait_seconds (0: the limit) as a duration.
func maxWait(s int64) (time.Duration, error) {
	switch {
	case s < 0:
		return 0, bad("max_wait_seconds %d is negative", s)
	case s == 0:
		s = MaxWaitSeconds
	case s > MaxWaitSeconds:
		return 0, bad("max_wait_seconds %d is over the limit of %d: wait that long at most, then call wait again", s, MaxWaitSeconds)
	}
	return time.Duration(s) * time.Second, nil
}

// capped keeps the first limit bytes of a stream and counts the rest.
type capped struct {
	limit int
	buf   []byte
	cut   int64
}

// drain reads r to its end (a piped stream must be read), keeping what
// fits.
func (c *capped) drain(r io.ReadCloser) {
	if r == nil {
		return
	}
	defer func() { _ = r.Close() }() // read to its end
	b := make([]byte, 32<<10)
	for {
		n, err := r.Read(b)
		keep := min(n, c.limit-len(c.buf))
		c.buf = append(c.buf, b[:keep]...)
		c.cut += int64(n - keep)
		if err != nil {
			return
		}
	}
}

// text is what was kept, as text, with a marker when some was cut.
func (c *capped) text(id, stream string) string {
	s := printable(c.buf)
	if c.cut > 0 {
		s += fmt.Sprintf("\n[stockade: %d more bytes of %s cut here; logs with process_id %s reads what the recording kept (by default its first 64 KiB and last 1 MiB)]", c.cut, stream, id)
	}
	return s
}

// printable is b as text: valid UTF-8 as is, anything else with its
// invalid bytes replaced (a JSON string holds text).
func printable(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// BackgroundOut is exec_background's result.
type BackgroundOut struct {
	ProcessID string `json:"process_id"`
}

// BackgroundIn is exec_background's input.
type BackgroundIn struct {
	SandboxID      string   `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Argv           []string `json:"argv,omitempty" jsonschema:"the program and its arguments (give argv or command)"`
	Command        string   `json:"command,omitempty" jsonschema:"a shell command line, run with /bin/sh -c (give argv or command)"`
	Dir            string   `json:"dir,omitempty" jsonschema:"working directory (absolute, or relative to /workspace; default the sandbox's)"`
	Env            []string `json:"env,omitempty" jsonschema:"environment added to the sandbox's, each as NAME=value"`
	TimeoutSeconds int64    `json:"timeout_seconds,omitempty" jsonschema:"stop the command after this long (0: no timeout)"`
}

func (t tools) execBackground(ctx context.Context, bin BackgroundIn) (BackgroundOut, error) {
	in := ExecIn{SandboxID: bin.SandboxID, Argv: bin.Argv, Command: bin.Command, Dir: bin.Dir, Env: bin.Env, TimeoutSeconds: bin.TimeoutSeconds}
	p, err := in.process(true)
	if err != nil {
		return BackgroundOut{}, err
	}
	sb, err := t.rt.Sandbox(ctx, in.SandboxID)
	if err != nil {
		return BackgroundOut{}, err
	}
	proc, err := sb.Start(ctx, p)
	if err != nil {
		return BackgroundOut{}, err
	}
	return BackgroundOut{ProcessID: proc.ID()}, nil
}

// LogsIn is logs' input.
type LogsIn struct {
	ProcessID string `json:"process_id" jsonschema:"the process's id"`
	Offset    int64  `json:"offset,omitempty" jsonschema:"the byte offset to read from (0: the start; the last call's next_offset to read on)"`
	MaxBytes  int    `json:"max_bytes,omitempty" jsonschema:"the most bytes returned (default 65536)"`
}

// LogsOut is logs' result.
type LogsOut struct {
	// Output is stdout and stderr together, in the order written; Stderr
	// repeats the window's stderr apart.
	Output string `json:"output"`
	Stderr string `json:"stderr,omitempty"`
	// NextOffset is where to read on.
	NextOffset int64 `json:"next_offset"`
	// More: the recording holds more past NextOffset now. A running
	// process (Ended false) may write more: read on while More is true or
	// Ended is false.
	More bool `json:"more"`
	// Missing counts bytes in the window the recording does not hold
	// (beyond its bounds, or lost).
	Missing  int64  `json:"missing,omitempty"`
	Ended    bool   `json:"ended"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

var errWindowFull = errors.New("the window is full")

func (t tools) logs(ctx context.Context, in LogsIn) (LogsOut, error) {
	limit, err := bound(in.MaxBytes)
	if err != nil {
		return LogsOut{}, err
	}
	if in.Offset < 0 {
		return LogsOut{}, bad("offset %d is negative: 0 is the start of the output", in.Offset)
	}
	// Ended is read first: a process ended before the read has its whole
	// recording in it.
	st, err := t.rt.ReplayProcess(ctx, in.ProcessID, 0)
	if err != nil {
		return LogsOut{}, err
	}
	out := LogsOut{NextOffset: in.Offset}
	if res, ok := st.Result(); ok {
		code := res.ExitCode
		out.Ended, out.ExitCode, out.Reason = true, &code, res.Reason
	}
	var all, errb []byte
	_, err = t.rt.Logs(ctx, in.ProcessID, func(c host.OutputChunk) error {
		end := c.Offset + int64(len(c.Data)) + c.Gap
		if end <= out.NextOffset {
			return nil
		}
		if len(all) >= limit {
			out.More = true
			return errWindowFull
		}
		if c.Stream == "" {
			out.Missing += end - max(c.Offset, out.NextOffset)
			out.NextOffset = end
			return nil
		}
		data := c.Data[max(0, out.NextOffset-c.Offset):]
		data = data[:min(len(data), limit-len(all))]
		all = append(all, data...)
		if c.Stream == "stderr" {
			errb = append(errb, data...)
		}
		out.NextOffset = max(c.Offset, out.NextOffset) + int64(len(data))
		if out.NextOffset < end {
			out.More = true
			return errWindowFull
		}
		return nil
	})
	if err != nil && !errors.Is(err, errWindowFull) && !spec.IsCode(err, spec.CodeNotFound) {
		return LogsOut{}, err
	}
	out.Output, out.Stderr = printable(all), printable(errb)
	return out, nil
}

// WaitIn is wait's input.
type WaitIn struct {
	ProcessID      string `json:"process_id" jsonschema:"the process's id"`
	MaxWaitSeconds int64  `json:"max_wait_seconds,omitempty" jsonschema:"the longest to wait (default 60, at most 600; call wait again to wait longer); the process runs on if it has not ended"`
}

// WaitOut is wait's result.
type WaitOut struct {
	Ended       bool   `json:"ended"`
	ExitCode    *int   `json:"exit_code,omitempty"`
	Reason      string `json:"reason,omitempty"`
	Error       string `json:"error,omitempty"`
	StdoutBytes int64  `json:"stdout_bytes,omitempty"`
	StderrBytes int64  `json:"stderr_bytes,omitempty"`
}

func (t tools) wait(ctx context.Context, in WaitIn) (WaitOut, error) {
	if in.MaxWaitSeconds == 0 {
		in.MaxWaitSeconds = 60
	}
	d, err := maxWait(in.MaxWaitSeconds)
	if err != nil {
		return WaitOut{}, err
	}
	p, err := t.rt.Process(ctx, in.ProcessID)
	if err != nil {
		return WaitOut{}, err
	}
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	res, err := p.Wait(wctx)
	if res.Reason == "" {
		if wctx.Err() != nil && ctx.Err() == nil {
			return WaitOut{}, nil // not ended yet: it runs on
		}
		return WaitOut{}, err
	}
	code := res.ExitCode
	out := WaitOut{Ended: true, ExitCode: &code, Reason: res.Reason, StdoutBytes: res.StdoutBytes, StderrBytes: res.StderrBytes}
	if res.Err != nil {
		out.Error = res.Err.Error()
	}
	return out, nil
}

// FilesWriteIn is files_write's input.
type FilesWriteIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Path      string `json:"path" jsonschema:"the file's path: relative to /workspace (work/x.py) or absolute under it"`
	Content   string `json:"content" jsonschema:"the file's content"`
	Encoding  string `json:"encoding,omitempty" jsonschema:"text (the default) or base64"`
	Mode      uint32 `json:"mode,omitempty" jsonschema:"permission bits, in decimal (JSON has no octal): 420 is 0644 (the default), 493 is 0755"`
}

// FileWritten is files_write's result.
type FileWritten struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
}

func (t tools) filesWrite(ctx context.Context, in FilesWriteIn) (FileWritten, error) {
	data := []byte(in.Content)
	switch in.Encoding {
	case "", "text":
	case "base64":
		var err error
		if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return FileWritten{}, bad("content is not base64: %v", err)
		}
	default:
		return FileWritten{}, bad("encoding %q is neither text nor base64", in.Encoding)
	}
	if len(data) > MaxWriteBytes {
		return FileWritten{}, bad("content of %d bytes is over the limit of %d: write it as files of at most that and join them with exec (cat part1 part2 > whole)", len(data), MaxWriteBytes)
	}
	if in.Mode > 0o777 {
		return FileWritten{}, bad("mode %d is over 511 (0777): give the permission bits in decimal, 420 for 0644, 493 for 0755", in.Mode)
	}
	sb, err := t.rt.Sandbox(ctx, in.SandboxID)
	if err != nil {
		return FileWritten{}, err
	}
	if err := sb.Files().WriteFile(ctx, in.Path, data, in.Mode); err != nil {
		return FileWritten{}, err
	}
	abs, err := spec.WorkspacePath(in.Path)
	return FileWritten{Path: abs, Size: int64(len(data))}, err
}

// FilesReadIn is files_read's input.
type FilesReadIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Path      string `json:"path" jsonschema:"the file's path: relative to /workspace or absolute under it"`
	Offset    int64  `json:"offset,omitempty" jsonschema:"the byte offset to read from"`
	MaxBytes  int    `json:"max_bytes,omitempty" jsonschema:"the most bytes returned (default 65536)"`
}

// FileRead is files_read's result.
type FileRead struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	Content string `json:"content"`
	// Encoding is text, or base64 for content that is not UTF-8.
	Encoding   string `json:"encoding"`
	NextOffset int64  `json:"next_offset"`
	More       bool   `json:"more"`
}

func (t tools) filesRead(ctx context.Context, in FilesReadIn) (FileRead, error) {
	limit, err := bound(in.MaxBytes)
	if err != nil {
		return FileRead{}, err
	}
	if in.Offset < 0 {
		return FileRead{}, bad("offset %d is negative", in.Offset)
	}
	sb, err := t.rt.Sandbox(ctx, in.SandboxID)
	if err != nil {
		return FileRead{}, err
	}
	r, fi, err := sb.Files().Read(ctx, in.Path)
	if err != nil {
		return FileRead{}, err
	}
	defer func() { _ = r.Close() }() // read only
	if _, err := io.CopyN(io.Discard, r, min(in.Offset, fi.Size)); err != nil {
		return FileRead{}, spec.Wrap(spec.CodeStreamFailure, "mcp", err, "reading %s", fi.Path)
	}
	data, err := io.ReadAll(io.LimitReader(r, int64(limit)))
	if err != nil {
		return FileRead{}, spec.Wrap(spec.CodeStreamFailure, "mcp", err, "reading %s", fi.Path)
	}
	out := FileRead{Path: fi.Path, Size: fi.Size, Encoding: "text", NextOffset: min(in.Offset, fi.Size) + int64(len(data))}
	out.More = out.NextOffset < fi.Size
	if utf8.Valid(data) {
		out.Content = string(data)
	} else {
		out.Content, out.Encoding = base64.StdEncoding.EncodeToString(data), "base64"
	}
	return out, nil
}

// ListIn is files_list's input.
type ListIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Path      string `json:"path,omitempty" jsonschema:"the directory, relative to /workspace or absolute under it (default /workspace)"`
}

// PathIn names a path of a sandbox.
type PathIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Path      string `json:"path" jsonschema:"relative to /workspace, or absolute under it"`
}

func (t tools) filesList(ctx context.Context, in ListIn) (host.Listing, error) {
	if in.Path == "" {
		in.Path = "."
	}
	sb, err := t.rt.Sandbox(ctx, in.SandboxID)
	if err != nil {
		return host.Listing{}, err
	}
	return sb.Files().List(ctx, in.Path)
}

func (t tools) filesStat(ctx context.Context, in PathIn) (host.FileInfo, error) {
	sb, err := t.rt.Sandbox(ctx, in.SandboxID)
	if err != nil {
		return host.FileInfo{}, err
	}
	return sb.Files().Stat(ctx, in.Path)
}

func (t tools) filesRemove(ctx context.Context, in PathIn) (Done, error) {
	sb, err := t.rt.Sandbox(ctx, in.SandboxID)
	if err != nil {
		return Done{}, err
	}
	if err := sb.Files().Remove(ctx, in.Path); err != nil {
		return Done{}, err
	}
	return Done{Done: true}, nil
}

// ProcessIn names a process.
type ProcessIn struct {
	ProcessID string `json:"process_id" jsonschema:"the process's id"`
}

func (t tools) changes(ctx context.Context, in ProcessIn) (host.ProcessChanges, error) {
	return t.rt.Changes(ctx, in.ProcessID)
}

// CheckpointIn is checkpoint's input.
type CheckpointIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Name      string `json:"name,omitempty" jsonschema:"a name, unique among the sandbox's checkpoints"`
}

func (t tools) checkpoint(ctx context.Context, in CheckpointIn) (host.CheckpointInfo, error) {
	sb, err := t.rt.Sandbox(ctx, in.SandboxID)
	if err != nil {
		return host.CheckpointInfo{}, err
	}
	return sb.Checkpoint(ctx, in.Name)
}

// RollbackIn is rollback's input.
type RollbackIn struct {
	SandboxID  string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Checkpoint string `json:"checkpoint" jsonschema:"a checkpoint's id, or its name"`
}

func (t tools) rollback(ctx context.Context, in RollbackIn) (Done, error) {
	sb, err := t.rt.Sandbox(ctx, in.SandboxID)
	if err != nil {
		return Done{}, err
	}
	if err := sb.Rollback(ctx, in.Checkpoint); err != nil {
		return Done{}, err
	}
	return Done{Done: true}, nil
}

// HistoryIn is history's input.
type HistoryIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
	Offset    int    `json:"offset,omitempty" jsonschema:"how many events were already read (the last page's next_offset); 0 from the start"`
	Limit     int    `json:"limit,omitempty" jsonschema:"the most events returned (default and limit 500)"`
}

// Event is one journaled event (host.HistoryEvent, its payload decoded).
type Event struct {
	// Kind is sandbox or process; ID the entity's.
	Kind    string    `json:"kind"`
	ID      string    `json:"id"`
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"time"`
	Type    string    `json:"type"`
	Payload any       `json:"payload,omitempty"`
}

// HistoryOut is history's result.
type HistoryOut struct {
	Events []Event `json:"events"`
	// NextOffset is the next page's offset; More says there is one.
	NextOffset int  `json:"next_offset"`
	More       bool `json:"more"`
}

func (t tools) history(ctx context.Context, in HistoryIn) (HistoryOut, error) {
	return t.historyUpTo(ctx, in, MaxHistory)
}

// historyUpTo is history with its own bound on a page.
func (t tools) historyUpTo(ctx context.Context, in HistoryIn, most int) (HistoryOut, error) {
	limit := in.Limit
	switch {
	case limit < 0:
		return HistoryOut{}, bad("limit %d is negative", limit)
	case in.Offset < 0:
		return HistoryOut{}, bad("offset %d is negative: 0 is the first event", in.Offset)
	case limit == 0 || limit > most:
		limit = most
	}
	evs, err := t.rt.History(ctx, in.SandboxID)
	if err != nil {
		return HistoryOut{}, err
	}
	from := min(in.Offset, len(evs))
	to := min(from+limit, len(evs))
	page := make([]Event, 0, to-from)
	bytes := 0
	for i, e := range evs[from:to] {
		// A page is bounded in bytes too: payloads a sandbox's names
		// fill (a process's changes, its argv) can be large.
		if bytes += len(e.Payload); bytes > maxHistoryBytes && i > 0 {
			to = from + i
			break
		}
		ev := Event{Kind: e.Kind, ID: e.ID, Seq: e.Seq, Time: e.Time, Type: e.Type}
		if len(e.Payload) > 0 {
			if err := json.Unmarshal(e.Payload, &ev.Payload); err != nil {
				return HistoryOut{}, spec.Wrap(spec.CodeJournal, "mcp", err, "decoding event %d of %s", e.Seq, e.ID)
			}
			redact(ev.Payload)
		}
		page = append(page, ev)
	}
	return HistoryOut{Events: page, NextOffset: to, More: to < len(evs)}, nil
}

// redact removes what the journal keeps for the runtime alone from an
// event's payload: the warden's secret (sandbox.warden_started,
// sandbox.claimed), which proves the runtime to the warden; an agent that
// had it could write it into the sandbox, whose processes could then pose
// as the runtime.
func redact(payload any) {
	m, ok := payload.(map[string]any)
	if !ok {
		return
	}
	for k, v := range m {
		if k == "secret" {
			m[k] = "(withheld)"
			continue
		}
		redact(v)
	}
}

// ForkIn is fork's input.
type ForkIn struct {
	SandboxID  string            `json:"sandbox_id,omitempty" jsonschema:"a live sandbox to copy now (give sandbox_id or checkpoint)"`
	Checkpoint string            `json:"checkpoint,omitempty" jsonschema:"a checkpoint to start from: its id, or its name when no other sandbox's checkpoint has it (give sandbox_id or checkpoint)"`
	Labels     map[string]string `json:"labels,omitempty" jsonschema:"your names for the new sandbox"`
}

// ForkOut is fork's result.
type ForkOut struct {
	ID         string `json:"id"`
	Checkpoint string `json:"checkpoint"`
}

func (t tools) fork(ctx context.Context, in ForkIn) (ForkOut, error) {
	var s spec.Sandbox
	switch {
	case (in.SandboxID == "") == (in.Checkpoint == ""):
		return ForkOut{}, bad("give sandbox_id (a copy taken now) or checkpoint, one of them")
	case in.SandboxID != "":
		// The copy is the sandbox's own: its image and policy too.
		sb, err := t.rt.Sandbox(ctx, in.SandboxID)
		if err != nil {
			return ForkOut{}, err
		}
		st, err := sb.State(ctx)
		if err != nil {
			return ForkOut{}, err
		}
		ck, err := sb.Checkpoint(ctx, "")
		if err != nil {
			return ForkOut{}, err
		}
		s = spec.Sandbox{Image: st.Spec.Image, Policy: st.Spec.Policy, Datasets: st.Spec.Datasets, Lifetime: st.Spec.Lifetime, From: ck.ID}
	default:
		cks, err := t.rt.Checkpoints(ctx, "")
		if err != nil {
			return ForkOut{}, err
		}
		var named []host.CheckpointInfo
		for _, ck := range cks {
			if ck.ID == in.Checkpoint {
				s = spec.Sandbox{Image: ck.Image, From: ck.ID}
			}
			if ck.Name == in.Checkpoint {
				named = append(named, ck)
			}
		}
		switch {
		case s.From != "":
		case len(named) == 1:
			s = spec.Sandbox{Image: named[0].Image, From: named[0].ID}
		case len(named) > 1:
			return ForkOut{}, spec.Errorf(spec.CodeConflict, "mcp", "%d checkpoints are named %s (of sandboxes %s and %s, …): give the id (checkpoint returns it)", len(named), in.Checkpoint, named[0].Sandbox, named[1].Sandbox)
		default:
			return ForkOut{}, spec.Errorf(spec.CodeNotFound, "mcp", "no checkpoint %s in the store, by id or name (checkpoint returns the id)", in.Checkpoint)
		}
	}
	s.Labels = in.Labels
	from := s.From
	sb, err := t.rt.CreateSandbox(ctx, s)
	if err != nil {
		return ForkOut{}, err
	}
	return ForkOut{ID: sb.ID(), Checkpoint: from}, nil
}

// RerunIn is rerun's input.
type RerunIn struct {
	SandboxID      string `json:"sandbox_id" jsonschema:"the recorded sandbox (live or removed)"`
	Until          uint64 `json:"until,omitempty" jsonschema:"re-run only the processes reserved at or before this position of the sandbox's history (1-based; 0: all)"`
	TimeoutSeconds int64  `json:"timeout_seconds,omitempty" jsonschema:"bound each re-run process (0: its recorded timeout)"`
	Keep           bool   `json:"keep,omitempty" jsonschema:"keep the new sandbox afterwards"`
}

func (t tools) rerun(ctx context.Context, in RerunIn) (rerun.Report, error) {
	if in.TimeoutSeconds < 0 {
		return rerun.Report{}, bad("timeout_seconds %d is negative", in.TimeoutSeconds)
	}
	rep, err := rerun.Run(ctx, t.rt, in.SandboxID, rerun.Files(t.journal), rerun.Options{Until: in.Until, KeepSandbox: in.Keep, Timeout: time.Duration(in.TimeoutSeconds) * time.Second})
	if rep.Processes == nil {
		rep.Processes = []rerun.ProcessReport{}
	}
	return rep, err
}

// callerSpan parents the runtime's spans of a request on the caller's:
// the W3C traceparent (and tracestate) an MCP client puts in the request's
// _meta, as OpenTelemetry's MCP conventions place it.
func callerSpan(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if p := req.GetParams(); p != nil && !isNilPointer(p) {
			if meta := p.GetMeta(); len(meta) > 0 {
				ctx = tracing.Extract(ctx, func(k string) string {
					v, _ := meta[k].(string)
					return v
				})
			}
		}
		return next(ctx, method, req)
	}
}

// isNilPointer: a request's params may be a typed nil (its GetMeta would
// dereference it).
func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}
