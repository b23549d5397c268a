package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	stockadev1 "github.com/stockade/stockade/api/stockade/v1"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/spec"
)

// processes serves the Processes service.
type processes struct {
	stockadev1.UnimplementedProcessesServer
	s *Server
}

func invalid(format string, args ...any) error {
	return toStatus(spec.Errorf(spec.CodeInvalidArgument, "server", format, args...))
}

// Exec starts a process and, unless detached, carries its streams until
// its result is sent (see the proto for the protocol).
func (v processes) Exec(stream stockadev1.Processes_ExecServer) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	st := first.GetStart()
	if st == nil {
		return invalid("the first message of an exec must be a start")
	}
	p := spec.Process{Argv: st.Argv, Env: st.Env, Dir: st.Dir, Stdin: st.Stdin, Stdout: spec.Pipe, Stderr: spec.Pipe,
		Timeout: st.Timeout.AsDuration(), OutputQuota: st.OutputQuota}
	if r := st.Record; r != nil {
		p.Record = spec.Record{Off: r.Off, Head: r.Head, Tail: r.Tail}
	}
	if st.Rows > math.MaxUint16 || st.Cols > math.MaxUint16 {
		return invalid("terminal size %dx%d: each dimension is at most %d", st.Rows, st.Cols, math.MaxUint16)
	}
	p.TTY, p.Rows, p.Cols = st.Tty, uint16(st.Rows), uint16(st.Cols)
	p.NoChanges, p.StopWithCaller = st.NoChanges, st.StopWithCaller
	if st.DiscardStdout {
		p.Stdout = spec.Discard
	}
	if st.DiscardStderr {
		p.Stderr = spec.Discard
	}
	if st.Detached {
		if st.Stdin {
			return invalid("a detached process cannot take stdin: nobody would be left to write it")
		}
		// Nobody reads a detached process's output (the recorder keeps
		// it, once it exists): piped, it would block the process.
		p.Stdout, p.Stderr = spec.Discard, spec.Discard
	}
	sb, err := v.s.h.Sandbox(ctx, st.SandboxId)
	if err != nil {
		return toStatus(err)
	}
	// A client that goes away during the start leaves a process nobody
	// reads: the runtime's Start detaches from it (or stops it, when it is
	// tied to its caller).
	proc, err := sb.Start(ctx, p)
	if err != nil {
		if proc != nil {
			v.abandon(proc, p.StopWithCaller)
			endInput(proc, v.s.log)
		}
		return toStatus(err)
	}
	v.s.remember(proc)
	if err := stream.Send(&stockadev1.ExecResponse{Msg: &stockadev1.ExecResponse_Started{Started: &stockadev1.ExecStarted{ProcessId: proc.ID()}}}); err != nil {
		if !st.Detached {
			v.abandon(proc, p.StopWithCaller)
			endInput(proc, v.s.log)
		}
		return err
	}
	if st.Detached {
		return nil
	}
	return v.attach(ctx, stream, sb, proc, p.StopWithCaller)
}

// attach pumps the process's output to the client and the client's input
// to the process. This goroutine is the stream's only sender: each output
// stream's reader hands it one chunk at a time and reads the next only once
// that one was taken, and Send blocks while the client's window is full, so
// an unread client stops the reads from the process. The answers to the
// client's resizes go out through it too, until the result.
func (v processes) attach(ctx context.Context, stream stockadev1.Processes_ExecServer, sb host.Sandbox, proc host.Process, tied bool) error {
	out := make(chan *stockadev1.ExecResponse)
	replies := make(chan *stockadev1.ExecResponse)
	var readers sync.WaitGroup
	for _, o := range []struct {
		rc     io.ReadCloser
		stream stockadev1.Stream
	}{{proc.Stdout(), stockadev1.Stream_STREAM_STDOUT}, {proc.Stderr(), stockadev1.Stream_STREAM_STDERR}} {
		if o.rc == nil {
			continue
		}
		readers.Add(1)
		go func() {
			defer readers.Done()
			pump(ctx, o.rc, o.stream, out)
		}()
	}
	go func() {
		readers.Wait()
		close(out)
	}()
	bad := make(chan error, 1)
	go receive(ctx, stream, proc, bad, replies, v.s.log)

	for ended := false; !ended; {
		select {
		case msg, ok := <-out:
			if !ok {
				ended = true
				break
			}
			if err := stream.Send(msg); err != nil {
				return v.gone(sb, proc, err, tied)
			}
		case msg := <-replies:
			if err := stream.Send(msg); err != nil {
				return v.gone(sb, proc, err, tied)
			}
		case err := <-bad:
			v.abandon(proc, tied)
			return err
		case <-ctx.Done():
			return v.gone(sb, proc, ctx.Err(), tied)
		}
	}
	// The output has ended; resizes are still answered while the exit is
	// awaited (not_found once the process is gone).
	type waited struct {
		res spec.Result
		err error
	}
	end := make(chan waited, 1)
	go func() {
		res, err := proc.Wait(ctx)
		end <- waited{res, err}
	}()
	for {
		select {
		case w := <-end:
			if w.err != nil && ctx.Err() != nil {
				return v.gone(sb, proc, ctx.Err(), tied)
			}
			return stream.Send(&stockadev1.ExecResponse{Msg: &stockadev1.ExecResponse_Result{Result: wireResult(w.res)}})
		case msg := <-replies:
			if err := stream.Send(msg); err != nil {
				return v.gone(sb, proc, err, tied)
			}
		case err := <-bad:
			v.abandon(proc, tied)
			return err
		}
	}
}

// pump reads rc in chunks and hands each to the sender. Each chunk is a
// fresh buffer: the sender may still hold the one before.
func pump(ctx context.Context, rc io.ReadCloser, stream stockadev1.Stream, out chan<- *stockadev1.ExecResponse) {
	for {
		buf := make([]byte, Chunk)
		n, err := rc.Read(buf)
		if n > 0 {
			msg := &stockadev1.ExecResponse{Msg: &stockadev1.ExecResponse_Output{Output: &stockadev1.Output{Stream: stream, Data: buf[:n]}}}
			select {
			case out <- msg:
			case <-ctx.Done():
				return
			}
		}
		if err != nil {
			return // the end (io.EOF), or the process's failure: the result says which
		}
	}
}

// receive applies the client's messages to the process until the client
// half-closes (stdin is then closed too: no more input can come) or the
// call ends. A message that breaks the protocol is sent to bad; the answer
// to a resize goes to replies, for the stream's sender.
func receive(ctx context.Context, stream stockadev1.Processes_ExecServer, proc host.Process, bad chan<- error, replies chan<- *stockadev1.ExecResponse, log *slog.Logger) {
	stdin := proc.Stdin()
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			if stdin != nil {
				closeStdin(stdin, proc, log)
			}
			return
		}
		if err != nil {
			// The call ended (the client went): its input ends with it,
			// as a pipe's does when its writer dies, so a process reading
			// it (a shell) is not left waiting for ever. The sender sees
			// the end.
			if stdin != nil {
				closeStdin(stdin, proc, log)
			}
			return
		}
		switch x := m.Msg.(type) {
		case *stockadev1.ExecRequest_Stdin:
			if stdin == nil {
				bad <- invalid("stdin sent to process %s, which was started without stdin", proc.ID())
				return
			}
			// A write blocks while the process does not read: Recv is not
			// called meanwhile, so the client's sends block in turn. A
			// failed write (the process closed its stdin, or ended) drops
			// the rest, as a pipe to an exited reader would.
			if _, err := stdin.Write(x.Stdin); err != nil {
				stdin = discard{}
			}
		case *stockadev1.ExecRequest_CloseStdin:
			if stdin != nil {
				closeStdin(stdin, proc, log)
			}
		case *stockadev1.ExecRequest_Signal:
			// A signal that races the process's end (not_found) is no
			// fault of the call: its output and result still go out. Any
			// other failure is logged; the stream carries on.
			if err := proc.Signal(ctx, syscall.Signal(x.Signal)); err != nil && ctx.Err() == nil && !spec.IsCode(err, spec.CodeNotFound) {
				log.Warn("a signal on an exec stream failed", "process", proc.ID(), "signal", x.Signal, "err", err)
			}
		case *stockadev1.ExecRequest_Resize:
			// Answered, success or typed error, on the stream; a failed
			// resize leaves the process and the call as they were.
			var err error
			if r := x.Resize; r.Rows > math.MaxUint16 || r.Cols > math.MaxUint16 {
				err = spec.Errorf(spec.CodeInvalidArgument, "server", "terminal size %dx%d: each dimension is at most %d", r.Rows, r.Cols, math.MaxUint16)
			} else {
				err = proc.Resize(ctx, uint16(r.Rows), uint16(r.Cols))
			}
			ans := &stockadev1.Resized{Seq: x.Resize.Seq}
			if err != nil {
				ans.Error = wireError(err)
			}
			select {
			case replies <- &stockadev1.ExecResponse{Msg: &stockadev1.ExecResponse_Resized{Resized: ans}}:
			case <-ctx.Done():
				return
			}
		default:
			bad <- invalid("an exec takes one start, then stdin, close_stdin, signal and resize messages")
			return
		}
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
func (discard) Close() error                { return nil }

// gone ends an attached call whose client is gone (or whose stream broke).
// The process has lost its caller: it runs on detached (its input ended,
// its output recorded), as an embedded one whose caller closes its streams
// unread does, or, tied to its caller, it is stopped (cancelled). When the
// server itself is stopping, it runs on either way, for the next runtime. A
// one-shot sandbox has lost its caller too (stockade run, killed): once the
// process has ended, it is removed, as recovery removes one whose runtime
// died.
func (v processes) gone(sb host.Sandbox, proc host.Process, err error, tied bool) error {
	if v.s.isStopping() {
		return status.Errorf(codes.Unavailable, "the server is stopping; process %s runs on", proc.ID())
	}
	v.abandon(proc, tied)
	go func() {
		// A one-shot sandbox lives for its process: once that has ended
		// (run on detached, or stopped with its caller), it is removed.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		st, serr := sb.State(ctx)
		cancel()
		if serr != nil || st.Spec.Lifetime != spec.OneShot {
			return
		}
		<-proc.Done()
		ctx, cancel = context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if rerr := sb.Remove(ctx); rerr != nil && !spec.IsCode(rerr, spec.CodeNotFound) {
			v.s.log.Warn("removing a one-shot sandbox whose client went away failed", "sandbox", sb.ID(), "err", rerr)
		}
	}()
	return toStatus(spec.Wrap(spec.CodeCancelled, "server", err, "the client of process %s went away", proc.ID()))
}

// endInput closes the stdin of a process whose client went before its
// input was attached: nobody can write to it any more.
func endInput(proc host.Process, log *slog.Logger) {
	if stdin := proc.Stdin(); stdin != nil {
		closeStdin(stdin, proc, log)
	}
}

// closeStdin closes a process's stdin at the client's word. A failure is
// logged: the process may never see the end of its input.
func closeStdin(stdin io.WriteCloser, proc host.Process, log *slog.Logger) {
	if err := stdin.Close(); err != nil {
		log.Warn("closing the stdin of a process on an exec stream failed", "process", proc.ID(), "err", err)
	}
}

// abandon closes the process's output streams unread: a process tied to
// its caller ends cancelled (one with no piped stream is stopped instead),
// any other runs on detached, its output recorded.
func (v processes) abandon(proc host.Process, tied bool) {
	piped := false
	for _, rc := range []io.ReadCloser{proc.Stdout(), proc.Stderr()} {
		if rc != nil {
			_ = rc.Close() // unread from now on: detached, or (tied) ended by this
			piped = true
		}
	}
	if tied && !piped {
		if err := proc.Stop(context.Background()); err != nil {
			v.s.log.Warn("stopping a process whose client went away failed", "process", proc.ID(), "err", err)
		}
	}
}

func (v processes) Signal(ctx context.Context, req *stockadev1.SignalRequest) (*stockadev1.SignalResponse, error) {
	p, err := v.s.process(ctx, req.ProcessId)
	if err == nil {
		err = p.Signal(ctx, syscall.Signal(req.Signal))
	}
	return &stockadev1.SignalResponse{}, toStatus(err)
}

func (v processes) Stop(ctx context.Context, req *stockadev1.StopProcessRequest) (*stockadev1.StopProcessResponse, error) {
	p, err := v.s.process(ctx, req.ProcessId)
	if err == nil {
		err = p.Stop(ctx)
	}
	return &stockadev1.StopProcessResponse{}, toStatus(err)
}

// Wait waits for a process started here; for any other, it answers from
// the journal once the process has exited there.
func (v processes) Wait(ctx context.Context, req *stockadev1.WaitRequest) (*stockadev1.WaitResponse, error) {
	p, err := v.s.process(ctx, req.ProcessId)
	if err != nil {
		return nil, toStatus(err)
	}
	res, err := p.Wait(ctx)
	if res.Reason == "" {
		// No end: the call's context ended, or the runtime closed, first
		// (the error says which). A result carries its own typed error.
		return nil, toStatus(err)
	}
	return &stockadev1.WaitResponse{Result: wireResult(res)}, nil
}

// Logs streams a process's recorded output, then its summary.
func (v processes) Logs(req *stockadev1.LogsRequest, stream stockadev1.Processes_LogsServer) error {
	sum, err := v.s.h.Logs(stream.Context(), req.ProcessId, func(ch host.OutputChunk) error {
		return stream.Send(wireChunk(ch))
	})
	if err != nil {
		return toStatus(err)
	}
	return stream.Send(&stockadev1.LogsChunk{Summary: wireSummary(sum)})
}

// Attach streams a process's output from an offset (host.Process.Attach),
// then its summary and result. The output reaches the stream no faster
// than the client reads it: the recording holds what is not yet sent.
func (v processes) Attach(req *stockadev1.AttachRequest, stream stockadev1.Processes_AttachServer) error {
	ctx := stream.Context()
	p, err := v.s.h.Process(ctx, req.ProcessId)
	if err != nil {
		return toStatus(err)
	}
	end, err := p.Attach(ctx, host.AttachOptions{From: req.From}, func(ch host.OutputChunk) error {
		return stream.Send(&stockadev1.AttachMessage{Msg: &stockadev1.AttachMessage_Chunk{Chunk: wireChunk(ch)}})
	})
	if err != nil {
		return toStatus(err) // the attach ended first
	}
	return stream.Send(&stockadev1.AttachMessage{Msg: &stockadev1.AttachMessage_End{End: &stockadev1.AttachEnd{
		Output: wireSummary(end.Output), Result: wireResult(end.Result)}}})
}

func wireChunk(ch host.OutputChunk) *stockadev1.LogsChunk {
	return &stockadev1.LogsChunk{Stream: wireStreamName(ch.Stream), Offset: ch.Offset, Data: ch.Data, Gap: ch.Gap, Lost: ch.Lost}
}

func wireSummary(s host.OutputSummary) *stockadev1.OutputSummary {
	return &stockadev1.OutputSummary{Complete: s.Complete, Torn: s.Torn, StdoutBytes: s.StdoutBytes, StderrBytes: s.StderrBytes,
		Recorded: s.Recorded, Missing: s.Missing, Dropped: s.Dropped, Head: s.Head, Tail: s.Tail}
}

func wireStreamName(s string) stockadev1.Stream {
	switch s {
	case "stdout":
		return stockadev1.Stream_STREAM_STDOUT
	case "stderr":
		return stockadev1.Stream_STREAM_STDERR
	}
	return stockadev1.Stream_STREAM_UNSPECIFIED
}
