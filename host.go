package stockade

import (
	"context"
	"io"

	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// Host returns the runtime as a host.Runtime: the interface the served
// runtime's client (client.Dial) also implements, so a Go host switches
// between embedded and served with one line. Closing it closes rt.
func (rt *Runtime) Host() host.Runtime { return hostRuntime{rt} }

// ReplaySandboxAt folds a sandbox's stream of this runtime's journal up to
// sequence at (0: to its end), as ReplaySandbox does for any open journal.
func (rt *Runtime) ReplaySandboxAt(id string, at uint64) (lifecycle.Sandbox, error) {
	return ReplaySandbox(rt.journal, id, at)
}

// ReplayProcessAt is ReplaySandboxAt for a process's stream.
func (rt *Runtime) ReplayProcessAt(id string, at uint64) (lifecycle.Process, error) {
	return ReplayProcess(rt.journal, id, at)
}

var (
	_ host.Runtime = hostRuntime{}
	_ host.Sandbox = hostSandbox{}
	_ host.Process = hostProcess{}
)

type hostRuntime struct{ rt *Runtime }

func (h hostRuntime) CreateSandbox(ctx context.Context, s host.SandboxSpec) (host.Sandbox, error) {
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

func (h hostRuntime) History(_ context.Context, id string) ([]host.HistoryEvent, error) {
	return h.rt.History(id)
}

func (h hostRuntime) Recovery(context.Context) (host.RecoveryReport, error) {
	r := h.rt.Recovery()
	out := host.RecoveryReport{Processes: r.Processes, Duration: r.Duration}
	for _, s := range r.Sandboxes {
		msg := s.Error
		if msg == "" && s.Err != nil {
			msg = s.Err.Error()
		}
		out.Sandboxes = append(out.Sandboxes, host.RecoveredSandbox{ID: s.ID, From: s.From, Decision: string(s.Decision), Observed: s.Observed, Settled: s.Settled, Error: msg})
	}
	for _, o := range r.Orphans {
		out.Orphans = append(out.Orphans, string(o.Kind)+" "+o.Name)
	}
	return out, nil
}

func (h hostRuntime) Egress(_ context.Context, id string) ([]egress.Decision, error) {
	var out []egress.Decision
	err := h.rt.Egress(id, func(d egress.Decision) error { out = append(out, d); return nil })
	return out, err
}

func (h hostRuntime) Close() error { return h.rt.Close() }

type hostSandbox struct{ *Sandbox }

func (s hostSandbox) Start(ctx context.Context, p spec.Process) (host.Process, error) {
	h, err := s.Sandbox.Start(ctx, p)
	if h == nil {
		return nil, err
	}
	return hostProcess{h}, err
}

func (s hostSandbox) Get(ctx context.Context, path string, pause bool) (io.ReadCloser, bool, error) {
	return s.Sandbox.Get(ctx, path, pause)
}

// hostProcess gives a process handle the ID method the interface asks for
// (the handle's ID is a field).
type hostProcess struct{ *Process }

func (p hostProcess) ID() string { return p.Process.ID }

// HostProcess presents a process as a host.Process.
func HostProcess(p *Process) host.Process { return hostProcess{p} }
