package process

import (
	"context"
	"io"
	"syscall"

	"github.com/stockade/stockade/recorder"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// Handle is a running process as the API hands it out.
type Handle struct {
	ID     string
	pid    *actor.PID
	sys    *actor.ActorSystem
	stdout *pipe
	stderr *pipe
	stdin  *stdinWriter
	done   chan struct{}
	result spec.Result
}

// Stdout is the piped stdout, or nil when it is discarded. A piped stream
// must be read: stdout and stderr share one connection.
func (h *Handle) Stdout() io.ReadCloser { return readCloser(h.stdout) }

// Stderr is the piped stderr, or nil when discarded.
func (h *Handle) Stderr() io.ReadCloser { return readCloser(h.stderr) }

func readCloser(p *pipe) io.ReadCloser {
	if p == nil {
		return nil
	}
	return p
}

// Stdin is the process's stdin, or nil when it was not asked for. Close
// half-closes the connection: the process sees end of input.
func (h *Handle) Stdin() io.WriteCloser {
	if h.stdin == nil {
		return nil
	}
	return h.stdin
}

// Done is closed when the process has exited and its exit is journaled.
func (h *Handle) Done() <-chan struct{} { return h.done }

// Wait waits for the exit. err is the result's typed error (nil for a plain
// exit, whatever its code) or the context's.
func (h *Handle) Wait(ctx context.Context) (spec.Result, error) {
	select {
	case <-h.done:
		return h.result, h.result.Err
	case <-ctx.Done():
		return spec.Result{ExitCode: -1}, spec.Wrap(spec.CodeCancelled, "process", ctx.Err(), "waiting for process %s", h.ID)
	}
}

// Signal sends sig to the process's group.
func (h *Handle) Signal(ctx context.Context, sig syscall.Signal) error {
	return h.ask(ctx, func(r chan<- error) any { return Signal{Sig: sig, Reply: r} })
}

// Stop stops the process's group: TERM, then KILL after the grace period.
// It returns once the stop is under way; Wait for the exit.
func (h *Handle) Stop(ctx context.Context) error {
	return h.ask(ctx, func(r chan<- error) any { return Stop{Reason: lifecycle.ReasonSignaled, Reply: r} })
}

func (h *Handle) ask(ctx context.Context, mk func(chan<- error) any) error {
	select {
	case <-h.done:
		return h.endedErr()
	default:
	}
	reply := make(chan error, 1)
	h.sys.Root.Send(h.pid, mk(reply))
	select {
	case err := <-reply:
		return err
	case <-h.done:
		return h.endedErr()
	case <-ctx.Done():
		return spec.Wrap(spec.CodeCancelled, "process", ctx.Err(), "process %s", h.ID)
	}
}

// stdinWriter writes to the connection directly: a full socket buffer blocks
// Write, which is stdin's backpressure.
type stdinWriter struct {
	w   io.Writer
	h   *Handle
	rec *recorder.StdinRecording // nil: not recorded
}

func (s *stdinWriter) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	if s.rec != nil {
		s.rec.Write(p[:n]) // what the process was handed, for a re-run
	}
	if err != nil {
		err = spec.Wrap(spec.CodeStreamFailure, "process.stdin", err, "writing stdin of process %s", s.h.ID)
	}
	return n, err
}

// Close half-closes stdin and journals it.
func (s *stdinWriter) Close() error {
	return s.h.ask(context.Background(), func(r chan<- error) any { return stdinClose{reply: r} })
}

// endedErr answers a request to a process that has ended: nothing to do,
// unless its end could not be journaled (then nothing is reported done).
func (h *Handle) endedErr() error {
	if spec.IsCode(h.result.Err, spec.CodeJournal) {
		return h.result.Err
	}
	return nil
}

// Resize sets the size of the process's terminal (a TTY process only).
func (h *Handle) Resize(ctx context.Context, rows, cols uint16) error {
	return h.ask(ctx, func(r chan<- error) any { return Resize{Rows: rows, Cols: cols, Reply: r} })
}

// GetHandle asks a live process actor for its handle (made on demand for a
// re-adopted process: no piped streams; its output is recorded). The answer
// goes to the parent as HandleMade, not to a reply channel: the parent
// answers its callers, and answers them nil when the actor ends instead, so
// a request that reached an actor already stopping is never left waiting.
type GetHandle struct{}

// HandleMade tells the parent a process's handle (nil once the process has
// ended). It is sent before the process's Exited.
type HandleMade struct {
	ID     string
	Handle *Handle
}
