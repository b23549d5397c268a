package client

import (
	"context"
	"errors"
	"io"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	stockadev1 "github.com/stockade/stockade/api/stockade/v1"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/spec"
)

// Start runs a process attached to this client: its streams come over one
// gRPC stream that lives until the result arrives, whatever becomes of
// ctx, which bounds only the start. Every piped stream must be read. The
// process outlives this client (its stream ending detaches it, its output
// recorded) unless p.StopWithCaller ties it to the stream.
func (s *Sandbox) Start(ctx context.Context, p spec.Process) (host.Process, error) {
	return s.start(ctx, p, false)
}

// StartDetached runs a process that does not depend on this client: its
// output is not streamed (it is discarded, and recorded once the recorder
// exists) and it takes no stdin. Wait, Signal and StopProcess reach it by
// the id returned.
func (s *Sandbox) StartDetached(ctx context.Context, p spec.Process) (string, error) {
	if p.Stdin {
		return "", spec.Errorf(spec.CodeInvalidArgument, "client", "a detached process cannot take stdin")
	}
	proc, err := s.start(ctx, p, true)
	if err != nil {
		return "", err
	}
	return proc.ID(), nil
}

func (s *Sandbox) start(ctx context.Context, p spec.Process, detached bool) (*Process, error) {
	// Judged as the embedded runtime judges it: a spec the wire could not
	// carry (a stream that is neither pipe nor discard) is refused here,
	// never sent as something else.
	p = p.AsStarted()
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, spec.Wrap(spec.CodeCancelled, "client", err, "starting a process in sandbox %s", s.id)
	}
	// The stream outlives ctx: it carries the process's output until the
	// result; ending it detaches the process (or, tied, stops it).
	// The caller's span goes with it, as its traceparent.
	sctx, cancel := context.WithCancel(trace.ContextWithSpanContext(context.Background(), trace.SpanContextFromContext(ctx)))
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	stream, err := s.c.execs.Exec(sctx)
	if err != nil {
		cancel()
		return nil, fromStatus(err)
	}
	start := &stockadev1.ExecStart{SandboxId: s.id, Argv: p.Argv, Env: p.Env, Dir: p.Dir, Stdin: p.Stdin, Detached: detached,
		OutputQuota: p.OutputQuota, DiscardStdout: p.Stdout == spec.Discard, DiscardStderr: p.Stderr == spec.Discard,
		Record: &stockadev1.Record{Off: p.Record.Off, Head: p.Record.Head, Tail: p.Record.Tail},
		Tty:    p.TTY, Rows: uint32(p.Rows), Cols: uint32(p.Cols), NoChanges: p.NoChanges, StopWithCaller: p.StopWithCaller}
	if p.Timeout != 0 {
		start.Timeout = durationpb.New(p.Timeout)
	}
	fail := func(err error) (*Process, error) {
		cancel()
		if ctx.Err() != nil {
			return nil, spec.Wrap(spec.CodeCancelled, "client", ctx.Err(), "starting a process in sandbox %s", s.id)
		}
		return nil, fromStatus(err)
	}
	if err := stream.Send(&stockadev1.ExecRequest{Msg: &stockadev1.ExecRequest_Start{Start: start}}); err != nil {
		_, err = stream.Recv() // the status says why the call ended
		return fail(err)
	}
	first, err := stream.Recv()
	if err != nil {
		return fail(err)
	}
	started := first.GetStarted()
	if started == nil {
		return fail(spec.Errorf(spec.CodeInternal, "client", "the server answered a start with %T", first.Msg))
	}
	if !stop() {
		// ctx ended just as the start was answered: the stream is being
		// cancelled, so the server stops the process.
		return fail(nil)
	}
	proc := &Process{c: s.c, id: started.ProcessId, stream: stream, cancel: cancel, done: make(chan struct{}), resizes: map[uint64]chan error{}}
	if detached {
		cancel()
		return proc, nil
	}
	if p.Stdout != spec.Discard {
		proc.stdout = newOutput(proc)
	}
	if p.Stderr != spec.Discard {
		proc.stderr = newOutput(proc)
	}
	if p.Stdin {
		proc.stdin = &stdin{p: proc}
	}
	go proc.receive()
	return proc, nil
}

// Process is a process attached to this client.
type Process struct {
	c      *Client
	id     string
	stream stockadev1.Processes_ExecClient
	cancel context.CancelFunc
	// sendMu serializes the stream's sends (stdin chunks, close-stdin,
	// resizes): SendMsg is not safe from two goroutines. It is held for one
	// message, so a resize goes out between two chunks of a long write.
	sendMu sync.Mutex
	// resizeMu guards the resizes awaiting their answer, by number.
	resizeMu  sync.Mutex
	resizeSeq uint64
	resizes   map[uint64]chan error
	// answered is set once the stream has ended: no answer comes any more.
	answered bool
	stdout   *output
	stderr   *output
	stdin    *stdin
	done     chan struct{}
	result   spec.Result
}

// ID is the process's id.
func (p *Process) ID() string { return p.id }

// Stdout is the piped stdout, or nil when discarded.
func (p *Process) Stdout() io.ReadCloser { return p.stdout.readCloser() }

// Stderr is the piped stderr, or nil when discarded.
func (p *Process) Stderr() io.ReadCloser { return p.stderr.readCloser() }

// Stdin is the process's stdin, or nil when not asked for.
func (p *Process) Stdin() io.WriteCloser {
	if p.stdin == nil {
		return nil
	}
	return p.stdin
}

// Done is closed when the process has exited and its result arrived.
func (p *Process) Done() <-chan struct{} { return p.done }

// Attach hands fn the process's output from o.From on, from the server's
// recording (host.Process.Attach): beside this process's own streams, not
// instead of them (they must still be read, or closed).
func (p *Process) Attach(ctx context.Context, o host.AttachOptions, fn func(host.OutputChunk) error) (host.Attached, error) {
	return p.c.Attach(ctx, p.id, o, fn)
}

// Wait waits for the exit; err is the result's typed error or ctx's.
func (p *Process) Wait(ctx context.Context) (spec.Result, error) {
	select {
	case <-p.done:
		return p.result, p.result.Err
	case <-ctx.Done():
		return spec.Result{ExitCode: -1}, spec.Wrap(spec.CodeCancelled, "client", ctx.Err(), "waiting for process %s", p.id)
	}
}

// Signal sends sig to the process's group.
func (p *Process) Signal(ctx context.Context, sig syscall.Signal) error {
	return p.c.Signal(ctx, p.id, sig)
}

// Stop stops the process's group: TERM, then KILL after the grace.
func (p *Process) Stop(ctx context.Context) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	err := p.c.StopProcess(ctx, p.id)
	if spec.IsCode(err, spec.CodeNotFound) {
		return nil // it ended meanwhile
	}
	return err
}

// Resize sets the size of the process's terminal. It is sent on the
// process's exec stream, in order with stdin (a resize sent after input
// the process has not read yet waits for it), and waits for the server's
// answer: invalid_argument for a process started without TTY or a zero
// dimension, as embedded. A process that has ended takes it as done (nil),
// as embedded.
func (p *Process) Resize(ctx context.Context, rows, cols uint16) error {
	ch := make(chan error, 1)
	p.resizeMu.Lock()
	if p.answered {
		p.resizeMu.Unlock()
		return nil
	}
	p.resizeSeq++
	seq := p.resizeSeq
	p.resizes[seq] = ch
	p.resizeMu.Unlock()
	p.sendMu.Lock()
	// A failed send means the stream has ended: its reader then settles
	// every waiting resize, this one included.
	_ = p.stream.Send(&stockadev1.ExecRequest{Msg: &stockadev1.ExecRequest_Resize{Resize: &stockadev1.Resize{Seq: seq, Rows: uint32(rows), Cols: uint32(cols)}}})
	p.sendMu.Unlock()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		p.resizeMu.Lock()
		delete(p.resizes, seq)
		p.resizeMu.Unlock()
		return spec.Wrap(spec.CodeCancelled, "client", ctx.Err(), "resizing the terminal of process %s", p.id)
	}
}

// answer settles the resize numbered seq.
func (p *Process) answer(seq uint64, err error) {
	p.resizeMu.Lock()
	ch, ok := p.resizes[seq]
	delete(p.resizes, seq)
	p.resizeMu.Unlock()
	if ok {
		ch <- err // buffered: never blocks
	}
}

// settleResizes answers every waiting resize once the stream has ended:
// err, or nil when the process's result arrived (it ended: nothing to
// resize).
func (p *Process) settleResizes(err error) {
	p.resizeMu.Lock()
	p.answered = true
	waiting := p.resizes
	p.resizes = nil
	p.resizeMu.Unlock()
	for _, ch := range waiting {
		ch <- err
	}
}

// receive is the stream's only reader: it writes each output chunk into
// its stream's pipe, which blocks until the consumer reads it, so a
// consumer that stops reading stops the receives and, through the window,
// the server's sends.
func (p *Process) receive() {
	defer close(p.done)
	for {
		m, err := p.stream.Recv()
		if err != nil {
			var serr error
			if !errors.Is(err, io.EOF) {
				serr = spec.Wrap(spec.CodeStreamFailure, "client", fromStatus(err), "the stream of process %s ended", p.id)
			}
			p.settleResizes(serr)
			p.end(err)
			return
		}
		switch x := m.Msg.(type) {
		case *stockadev1.ExecResponse_Output:
			o := p.stdout
			if x.Output.Stream == stockadev1.Stream_STREAM_STDERR {
				o = p.stderr
			}
			if o == nil {
				continue // a stream not asked for: nothing to deliver it to
			}
			if _, err := o.w.Write(x.Output.Data); err != nil {
				// The consumer closed it unread: the process lost its
				// reader, so ending the call stops it (cancelled).
				p.cancel()
			}
		case *stockadev1.ExecResponse_Resized:
			var rerr error
			if x.Resized.Error != nil {
				rerr = fromWire(x.Resized.Error)
			}
			p.answer(x.Resized.Seq, rerr)
		case *stockadev1.ExecResponse_Result:
			p.settleResizes(nil)
			p.result = fromResult(x.Result)
			p.closeOutputs(nil)
			p.cancel()
			return
		}
	}
}

// end settles a call that ended without a result: the client cancelled it
// (an output closed unread) or the server went away. The server keeps the
// outcome, so it is asked for it; a server that cannot answer leaves the
// process's end unknown.
func (p *Process) end(err error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, werr := p.c.Wait(ctx, p.id)
	if werr != nil && res.Reason == "" && (status.Code(err) == codes.Unavailable || spec.IsCode(werr, spec.CodeCancelled) && ctx.Err() == nil) {
		// The stream ended as the transport does when the server stops
		// or dies, and the server cannot say how the process ended: it
		// may well run on, so it is not reported lost.
		cause := fromStatus(err)
		if cause == nil || errors.Is(err, io.EOF) {
			cause = werr
		}
		gone := spec.Wrap(spec.CodeServerGone, "client", cause,
			"the server went away; process %s may still be running: follow it with `stockade logs -f %s`", p.id, p.id)
		res = spec.Result{ExitCode: -1, Reason: string(spec.CodeServerGone), Err: gone}
	} else if werr != nil && res.Reason == "" {
		cause := fromStatus(err)
		if errors.Is(err, io.EOF) {
			cause = spec.Errorf(spec.CodeInternal, "client", "the server ended the stream of process %s without a result", p.id)
		}
		res = spec.Result{ExitCode: -1, Reason: "lost", Err: errors.Join(cause, werr)}
	}
	p.result = res
	p.closeOutputs(res.Err)
	p.cancel()
}

func (p *Process) closeOutputs(err error) {
	for _, o := range []*output{p.stdout, p.stderr} {
		if o != nil {
			o.w.CloseWithError(err)
		}
	}
}

// output is a piped output stream: an io.Pipe, whose Write returns only
// once the consumer has read the chunk.
type output struct {
	r *io.PipeReader
	w *io.PipeWriter
}

func newOutput(*Process) *output {
	r, w := io.Pipe()
	return &output{r: r, w: w}
}

func (o *output) readCloser() io.ReadCloser {
	if o == nil {
		return nil
	}
	return o.r
}

// stdin sends the process's input on its stream.
type stdin struct {
	p *Process
	// mu serializes writes and the close: a write's chunks go out
	// together, though a resize may come between two of them.
	mu     sync.Mutex
	closed bool
}

// send sends one message of stdin's.
func (s *stdin) send(m *stockadev1.ExecRequest) error {
	s.p.sendMu.Lock()
	defer s.p.sendMu.Unlock()
	return s.p.stream.Send(m)
}

// Write sends p in chunks; a send blocks while the server's window is
// full, which is stdin's backpressure.
func (s *stdin) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, spec.Errorf(spec.CodeInvalidArgument, "client", "stdin of process %s is closed", s.p.id)
	}
	written := 0
	for len(b) > 0 {
		n := min(len(b), chunk)
		if err := s.send(&stockadev1.ExecRequest{Msg: &stockadev1.ExecRequest_Stdin{Stdin: b[:n]}}); err != nil {
			return written, spec.Wrap(spec.CodeStreamFailure, "client", err, "writing stdin of process %s", s.p.id)
		}
		written += n
		b = b[n:]
	}
	return written, nil
}

// Close half-closes stdin: the process sees end of input.
func (s *stdin) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if err := s.send(&stockadev1.ExecRequest{Msg: &stockadev1.ExecRequest_CloseStdin{CloseStdin: true}}); err != nil && !errors.Is(err, io.EOF) {
		return spec.Wrap(spec.CodeStreamFailure, "client", err, "closing stdin of process %s", s.p.id)
	}
	return nil
}

// Process returns a journaled process by id, running or ended (not_found
// when the journal has none), with no streams: Attach has its output. Wait
// waits for its end on the server, Signal and Stop reach it while it runs.
func (c *Client) Process(ctx context.Context, id string) (host.Process, error) {
	if _, err := c.ReplayProcess(ctx, id, 0); err != nil {
		return nil, err
	}
	return &foundProcess{c: c, id: id}, nil
}

// foundProcess is a process found by id: no streams, its end from the
// server.
type foundProcess struct {
	c    *Client
	id   string
	once sync.Once
	done chan struct{}
}

var _ host.Process = (*foundProcess)(nil)

func (p *foundProcess) ID() string            { return p.id }
func (p *foundProcess) Stdout() io.ReadCloser { return nil }
func (p *foundProcess) Stderr() io.ReadCloser { return nil }
func (p *foundProcess) Stdin() io.WriteCloser { return nil }

// Done is closed once the server says the process ended (or the client
// can no longer ask: Wait says why).
func (p *foundProcess) Done() <-chan struct{} {
	p.once.Do(func() {
		p.done = make(chan struct{})
		go func() {
			defer close(p.done)
			_, _ = p.c.Wait(context.Background(), p.id) // the end, or a closed client: Wait says which
		}()
	})
	return p.done
}

func (p *foundProcess) Wait(ctx context.Context) (spec.Result, error) {
	res, err := p.c.Wait(ctx, p.id)
	if err == nil && res.Err != nil {
		err = res.Err
	}
	return res, err
}

func (p *foundProcess) Signal(ctx context.Context, sig syscall.Signal) error {
	return p.c.Signal(ctx, p.id, sig)
}

func (p *foundProcess) Stop(ctx context.Context) error { return p.c.StopProcess(ctx, p.id) }

func (p *foundProcess) Attach(ctx context.Context, o host.AttachOptions, fn func(host.OutputChunk) error) (host.Attached, error) {
	return p.c.Attach(ctx, p.id, o, fn)
}

func (p *foundProcess) Resize(context.Context, uint16, uint16) error {
	return spec.Errorf(spec.CodeInvalidArgument, "client", "process %s has no terminal here: only the caller that started it holds its stream", p.id)
}
