package core

import (
	"context"
	"io"

	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/inspect"
	"github.com/stockade/stockade/internal/actors/process"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/profile"
	"github.com/stockade/stockade/recorder"
	"github.com/stockade/stockade/spec"
)

// Host returns the runtime as a host.Runtime: the interface the served
// runtime's client (client.Dial) also implements, so a Go host switches
// between embedded and served with one line. Closing it closes rt.
func (rt *Runtime) Host() host.Runtime { return hostRuntime{rt} }

var (
	_ host.Runtime = hostRuntime{}
	_ host.Sandbox = hostSandbox{}
	_ host.Process = hostProcess{}
)

type hostRuntime struct{ rt *Runtime }

func (h hostRuntime) CreateSandbox(ctx context.Context, s spec.Sandbox) (host.Sandbox, error) {
	sb, err := h.rt.CreateSandbox(ctx, s)
	if err != nil {
		return nil, err
	}
	return hostSandbox{sb}, nil
}

func (h hostRuntime) Sandbox(_ context.Context, id string) (host.Sandbox, error) {
	sb, err := h.rt.Sandbox(id)
	if err != nil {
		return nil, err
	}
	return hostSandbox{sb}, nil
}

func (h hostRuntime) Sandboxes(ctx context.Context) ([]host.SandboxInfo, error) {
	return h.rt.Sandboxes(ctx)
}

func (h hostRuntime) History(ctx context.Context, id string) ([]host.HistoryEvent, error) {
	return h.rt.History(ctx, id)
}

func (h hostRuntime) ReplaySandbox(ctx context.Context, id string, at uint64) (lifecycle.Sandbox, error) {
	return h.rt.ReplaySandbox(ctx, id, at)
}

func (h hostRuntime) ReplayProcess(ctx context.Context, id string, at uint64) (lifecycle.Process, error) {
	return h.rt.ReplayProcess(ctx, id, at)
}

func (h hostRuntime) Live(ctx context.Context) ([]host.LiveEntity, error) { return h.rt.Live(ctx) }

func (h hostRuntime) Verify(ctx context.Context) error { return h.rt.Verify(ctx) }

func (h hostRuntime) Export(ctx context.Context, w io.Writer) error { return h.rt.Export(ctx, w) }

func (h hostRuntime) Recovery(context.Context) (host.RecoveryReport, error) {
	return h.rt.Recovery(), nil
}

func (h hostRuntime) Egress(_ context.Context, id string) ([]egress.Decision, error) {
	var out []egress.Decision
	err := h.rt.Egress(id, func(d egress.Decision) error { out = append(out, d); return nil })
	return out, err
}

func (h hostRuntime) Pools(ctx context.Context) ([]host.PoolInfo, error) { return h.rt.Pools(ctx) }

func (h hostRuntime) Checkpoints(ctx context.Context, sandboxID string) ([]host.CheckpointInfo, error) {
	return h.rt.Checkpoints(ctx, sandboxID)
}

func (h hostRuntime) RemoveCheckpoint(ctx context.Context, id string) error {
	return h.rt.RemoveCheckpoint(ctx, id)
}

func (h hostRuntime) Close() error { return h.rt.Close() }

func (h hostRuntime) Shutdown(ctx context.Context) error { return h.rt.Shutdown(ctx) }

func (h hostRuntime) Doctor(ctx context.Context) (profile.Report, error) {
	return Doctor(ctx, h.rt.profile)
}

type hostSandbox struct{ *Sandbox }

func (s hostSandbox) Files() host.Files { return host.FilesOf(s) }

// HostSandbox presents a sandbox as a host.Sandbox.
func HostSandbox(s *Sandbox) host.Sandbox { return hostSandbox{s} }

func (s hostSandbox) Start(ctx context.Context, p spec.Process) (host.Process, error) {
	h, err := s.Sandbox.Start(ctx, p)
	if h == nil {
		return nil, err
	}
	return hostProcess{h, s.rt}, err
}

func (s hostSandbox) Get(ctx context.Context, path string, pause bool) (io.ReadCloser, bool, error) {
	return s.Sandbox.Get(ctx, path, pause)
}

// hostProcess gives a process handle the methods the interface asks for
// beyond the handle's own: ID (the handle's is a field) and Attach (the
// runtime's recording).
type hostProcess struct {
	*process.Handle
	rt *Runtime
}

func (p hostProcess) ID() string { return p.Handle.ID }

func (p hostProcess) Attach(ctx context.Context, o host.AttachOptions, fn func(host.OutputChunk) error) (host.Attached, error) {
	return p.rt.Attach(ctx, p.Handle.ID, o, fn)
}

// HostProcess presents a process of rt as a host.Process.
func HostProcess(rt *Runtime, p *process.Handle) host.Process { return hostProcess{p, rt} }

func (h hostRuntime) Follow(ctx context.Context, sandboxID string, fn func(host.HistoryEvent) error) error {
	return h.rt.Follow(ctx, sandboxID, fn)
}

func (h hostRuntime) ResizePool(ctx context.Context, name string, size int) error {
	return h.rt.ResizePool(ctx, name, size)
}

func (h hostRuntime) Logs(_ context.Context, id string, fn func(host.OutputChunk) error) (host.OutputSummary, error) {
	sum, err := h.rt.Logs(id, func(c recorder.Chunk) error { return fn(outputChunk(c)) })
	return outputSummary(sum), err
}

func (h hostRuntime) Usage(ctx context.Context, q host.UsageQuery) (host.Usage, error) {
	return h.rt.Usage(ctx, q)
}

func (h hostRuntime) Changes(ctx context.Context, id string) (host.ProcessChanges, error) {
	return inspect.Changes(ctx, h, h.rt.recorder.Path(), id)
}

func (h hostRuntime) Process(ctx context.Context, id string) (host.Process, error) {
	return h.rt.foundProcess(ctx, id)
}

// outputChunk is a recorded chunk as host's API gives it.
func outputChunk(c recorder.Chunk) host.OutputChunk {
	out := host.OutputChunk{Offset: c.Offset, Data: c.Data, Gap: c.Gap, Lost: c.Lost}
	switch c.Stream {
	case recorder.TypeStdout:
		out.Stream = "stdout"
	case recorder.TypeStderr:
		out.Stream = "stderr"
	}
	return out
}

// outputSummary is a recording's summary as host's API gives it.
func outputSummary(s recorder.Summary) host.OutputSummary {
	return host.OutputSummary{Complete: s.Complete, Torn: s.Torn, StdoutBytes: s.StdoutBytes, StderrBytes: s.StderrBytes,
		Recorded: s.Recorded, Missing: s.Missing, Dropped: s.Dropped, Head: s.Head, Tail: s.Tail}
}
