package stockade

import (
	"context"
	"io"
	"syscall"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/core"
)

// Process is a process running in a sandbox, as Start or Runtime.Process
// hands it out.
type Process struct {
	h  *core.Process
	rt *core.Runtime
}

func processOf(rt *core.Runtime, h *core.Process, err error) (*Process, error) {
	if h == nil {
		return nil, err
	}
	return &Process{h: h, rt: rt}, err
}

// ID is the process's id in the journal.
func (p *Process) ID() string { return p.h.ID }

// Stdout is the piped stdout, or nil when it is discarded (and for a
// re-adopted process: see Attach). A piped stream must be read:
// stdout and stderr share one connection.
func (p *Process) Stdout() io.ReadCloser { return p.h.Stdout() }

// Stderr is the piped stderr, or nil when discarded.
func (p *Process) Stderr() io.ReadCloser { return p.h.Stderr() }

// Stdin is the process's stdin, or nil when it was not asked for. Close
// half-closes the connection: the process sees end of input.
func (p *Process) Stdin() io.WriteCloser { return p.h.Stdin() }

// Signal sends sig to the process's group.
func (p *Process) Signal(ctx context.Context, sig syscall.Signal) error { return p.h.Signal(ctx, sig) }

// Stop stops the process's group: TERM, then KILL after the grace period.
// It returns once the stop is under way; Wait for the exit.
func (p *Process) Stop(ctx context.Context) error { return p.h.Stop(ctx) }

// Resize sets a TTY process's terminal size (spec.Process.TTY).
func (p *Process) Resize(ctx context.Context, rows, cols uint16) error {
	return p.h.Resize(ctx, rows, cols)
}

// Attach hands fn the process's output from o.From on, recorded then live,
// every byte once in the order written, until it ends, and returns the
// recording's summary and the result (host.Process.Attach says all).
func (p *Process) Attach(ctx context.Context, o host.AttachOptions, fn func(host.OutputChunk) error) (host.Attached, error) {
	return p.rt.Attach(ctx, p.h.ID, o, fn)
}

// Wait waits for the exit. err is the result's typed error (nil for a plain
// exit, whatever its code) or the context's.
func (p *Process) Wait(ctx context.Context) (Result, error) { return p.h.Wait(ctx) }

// Done is closed when the process has exited and its exit is journaled.
func (p *Process) Done() <-chan struct{} { return p.h.Done() }
