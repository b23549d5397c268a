package core

import (
	"context"
	"errors"
	"io"
	"sync"
	"syscall"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// foundProcess returns any journaled process by id as a host.Process: the
// live handle while this runtime runs it (without its streams: they are
// its starter's), else one read from the journal, whose Wait waits for its
// exited fact. Either way Attach has its output. not_found when the
// journal holds no such process.
func (rt *Runtime) foundProcess(ctx context.Context, id string) (host.Process, error) {
	st, err := rt.ReplayProcess(ctx, id, 0)
	if err != nil {
		return nil, err
	}
	if !st.Terminal() {
		h, err := rt.liveProcess(ctx, st)
		switch {
		case err == nil:
			return foundLive{hostProcess{h, rt}}, nil
		case !spec.IsCode(err, spec.CodeNotFound) && !spec.IsCode(err, spec.CodeUnreconciled):
			return nil, err // cancelled, say: not a reason to read it from the journal
		}
	}
	p := &journaledProcess{rt: rt, id: id, sandbox: st.Sandbox, ended: st.Terminal()}
	return p, nil
}

// foundLive is a live process found by id: its handle, without the
// streams its starter holds (a second reader of a pipe would split its
// bytes). Attach has its output for any caller.
type foundLive struct{ hostProcess }

func (foundLive) Stdout() io.ReadCloser { return nil }
func (foundLive) Stderr() io.ReadCloser { return nil }
func (foundLive) Stdin() io.WriteCloser { return nil }

// journaledProcess is a process this runtime does not run (it ended, or
// its sandbox is out of service) as the journal shows it. It holds nothing
// until asked: Wait follows the journal under its caller's context, and
// only Done, once called, keeps one follower until the exit (or the
// runtime's close).
type journaledProcess struct {
	rt      *Runtime
	id      string
	sandbox string
	ended   bool
	once    sync.Once
	done    chan struct{}
}

var _ host.Process = (*journaledProcess)(nil)

// errExited ends a follow that saw the exit it waited for.
var errExited = errors.New("the process exited")

// awaitExit follows the journal until the process's exit is committed
// (nil), ctx ends, or the runtime closes. A follow that fell behind (a busy
// journal) starts again: each gives the sandbox's past first, the exit
// included if it came.
func (p *journaledProcess) awaitExit(ctx context.Context) error {
	for {
		err := p.rt.Follow(ctx, p.sandbox, func(e host.HistoryEvent) error {
			if e.ID == p.id && e.Type == (lifecycle.ProcessExited{}).Type() {
				return errExited
			}
			return nil
		})
		switch {
		case errors.Is(err, errExited):
			return nil
		case ctx.Err() != nil:
			return spec.Wrap(spec.CodeCancelled, "runtime", ctx.Err(), "waiting for process %s", p.id)
		case err != nil && !errors.Is(err, journal.ErrLagged):
			return err
		}
	}
}

func (p *journaledProcess) ID() string            { return p.id }
func (p *journaledProcess) Stdout() io.ReadCloser { return nil }
func (p *journaledProcess) Stderr() io.ReadCloser { return nil }
func (p *journaledProcess) Stdin() io.WriteCloser { return nil }

// Done is closed once the journal holds the process's exit (or the
// runtime closed): the first call starts the one follower that waits.
func (p *journaledProcess) Done() <-chan struct{} {
	p.once.Do(func() {
		p.done = make(chan struct{})
		if p.ended {
			close(p.done)
			return
		}
		go func() {
			defer close(p.done)
			_ = p.awaitExit(context.Background()) // the end, or the runtime's close: Wait says which
		}()
	})
	return p.done
}
func (p *journaledProcess) notLive() error {
	return spec.Errorf(spec.CodeNotFound, "runtime", "process %s is not running in this runtime: it ended, or its sandbox is out of service", p.id)
}

// Wait waits for the exit the journal records, under ctx; err is the
// result's typed error, or ctx's, or the runtime's close.
func (p *journaledProcess) Wait(ctx context.Context) (spec.Result, error) {
	if !p.ended {
		if err := p.awaitExit(ctx); err != nil {
			return spec.Result{ExitCode: -1}, err
		}
	}
	st, err := p.rt.ReplayProcess(ctx, p.id, 0)
	if err != nil {
		return spec.Result{ExitCode: -1}, err
	}
	res, ok := st.Result()
	if !ok {
		return spec.Result{ExitCode: -1}, spec.Errorf(spec.CodeCancelled, "runtime", "the runtime closed before process %s ended", p.id)
	}
	if res.Err != nil {
		return res, res.Err
	}
	return res, nil
}

// Signal and Stop reach a process only through the runtime that runs it.
func (p *journaledProcess) Signal(ctx context.Context, sig syscall.Signal) error {
	return p.again(ctx, func(h host.Process) error { return h.Signal(ctx, sig) })
}

func (p *journaledProcess) Stop(ctx context.Context) error {
	return p.again(ctx, func(h host.Process) error { return h.Stop(ctx) })
}

func (p *journaledProcess) Attach(ctx context.Context, o host.AttachOptions, fn func(host.OutputChunk) error) (host.Attached, error) {
	return p.rt.Attach(ctx, p.id, o, fn)
}

func (p *journaledProcess) Resize(context.Context, uint16, uint16) error {
	return spec.Errorf(spec.CodeInvalidArgument, "runtime", "process %s has no terminal here: only the caller that started it holds its stream", p.id)
}

// again asks the runtime for the live process once more (it may have been
// re-adopted since) and does op on it.
func (p *journaledProcess) again(ctx context.Context, op func(host.Process) error) error {
	h, err := p.rt.Process(ctx, p.id)
	if err != nil {
		return errors.Join(p.notLive(), err)
	}
	return op(hostProcess{h, p.rt})
}
