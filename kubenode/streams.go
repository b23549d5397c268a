package kubenode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	utilexec "k8s.io/utils/exec"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/spec"
)

// firstSizeWait bounds the wait for a terminal's first size before its
// process starts.
const firstSizeWait = time.Second

func (p *Provider) lookup(ns, name, container string) (*podRun, error) {
	r := p.get(ns, name)
	if r == nil {
		return nil, errdefs.NotFoundf("pod %s/%s is not on node %s", ns, name, p.node)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if container != "" && container != r.container {
		return nil, errdefs.NotFoundf("pod %s/%s has no container %q (it has %q)", ns, name, container, r.container)
	}
	return r, nil
}

// GetContainerLogs serves `kubectl logs` from the recorder: the container's
// current process (or, with --previous, the one before), --tail and
// --limit-bytes applied; -f follows until the process ends. Timestamps and
// --since are refused: a recording keeps bytes in order, not their times.
// Bytes the recording's bounds left out are one line saying how many.
func (p *Provider) GetContainerLogs(ctx context.Context, ns, name, container string, opts api.ContainerLogOpts) (io.ReadCloser, error) {
	r, err := p.lookup(ns, name, container)
	if err != nil {
		return nil, err
	}
	if opts.Timestamps || opts.SinceSeconds > 0 || !opts.SinceTime.IsZero() {
		return nil, errdefs.InvalidInput("--timestamps and --since are not supported: a stockade recording keeps the output's bytes in order, not their times")
	}
	r.mu.Lock()
	id := r.procID
	if opts.Previous {
		id = r.prevID
	} else if id == "" && r.backoff {
		id = r.prevID // in its back-off: the process that ended, as a kubelet shows
	}
	r.mu.Unlock()
	if id == "" {
		if opts.Previous {
			return nil, errdefs.InvalidInputf("pod %s/%s's container has not been restarted: there is no previous process", ns, name)
		}
		// As a kubelet says of a container that has not started: a 400,
		// not an empty 200 that reads as a silent process.
		return nil, errdefs.InvalidInputf("container %q in pod %s/%s is waiting to start: its sandbox or process is not made yet", r.container, ns, name)
	}
	pr, pw := io.Pipe()
	go func() {
		w := io.Writer(pw)
		if opts.LimitBytes > 0 {
			w = &limitWriter{w: pw, left: int64(opts.LimitBytes)}
		}
		err := p.writeLogs(ctx, id, opts, w)
		if errors.Is(err, errLimit) {
			err = nil
		}
		_ = pw.CloseWithError(err) // the reader learns the error
	}()
	return pr, nil
}

func (p *Provider) writeLogs(ctx context.Context, id string, opts api.ContainerLogOpts, w io.Writer) error {
	var all bytes.Buffer
	printed, _, err := p.readFrom(ctx, id, 0, &all, &all)
	if err != nil {
		return err
	}
	out := all.Bytes()
	if opts.Tail > 0 { // 0: all (the handler reads an absent --tail as 0)
		out = lastLines(out, opts.Tail)
	}
	if _, err := w.Write(out); err != nil {
		return err
	}
	if !opts.Follow {
		return nil
	}
	return p.follow(ctx, id, printed, w, w)
}

// follow writes the process's output past from as the recorder takes it
// (the recorder wakes an attach at each write: no polling) until the
// process has ended and its recording is complete, or ctx ends.
func (p *Provider) follow(ctx context.Context, id string, from int64, stdout, stderr io.Writer) error {
	proc, err := p.rt.Host().Process(ctx, id)
	if err != nil {
		return err
	}
	_, err = proc.Attach(ctx, host.AttachOptions{From: from}, func(ch host.OutputChunk) error {
		return writeChunk(ch.Stream, ch.Data, ch.Gap, stdout, stderr)
	})
	if ctx.Err() != nil {
		return nil // the client went
	}
	return err
}

// writeChunk writes one recorded chunk: a gap as one line on stderr.
func writeChunk(stream string, data []byte, gap int64, stdout, stderr io.Writer) error {
	var err error
	switch stream {
	case "":
		_, err = fmt.Fprintf(stderr, "[stockade: %d bytes of output not recorded here]\n", gap)
	case "stderr":
		_, err = stderr.Write(data)
	default:
		_, err = stdout.Write(data)
	}
	return err
}

// readFrom writes the recorded output past offset from (a gap as one line
// on stderr) and returns where the recording ends and whether it is
// complete.
func (p *Provider) readFrom(ctx context.Context, id string, from int64, stdout, stderr io.Writer) (int64, bool, error) {
	end := from
	sum, err := p.rt.Logs(ctx, id, func(ch stockade.OutputChunk) error {
		chEnd := ch.Offset + int64(len(ch.Data)) + ch.Gap
		if chEnd <= end {
			return nil
		}
		data := ch.Data
		if skip := end - ch.Offset; skip > 0 && ch.Stream != "" {
			data = data[skip:]
		}
		end = chEnd
		return writeChunk(ch.Stream, data, ch.Gap, stdout, stderr)
	})
	if spec.IsCode(err, spec.CodeNotFound) {
		return from, false, nil // not recording yet
	}
	return end, sum.Complete, err
}

func lastLines(b []byte, n int) []byte {
	if n <= 0 {
		return nil
	}
	i := len(b)
	if i > 0 && b[i-1] == '\n' {
		i--
	}
	for ; n > 0; n-- {
		j := bytes.LastIndexByte(b[:i], '\n')
		if j < 0 {
			return b
		}
		i = j
		if n == 1 {
			return b[j+1:]
		}
	}
	return b
}

var errLimit = fmt.Errorf("log limit reached")

type limitWriter struct {
	w    io.Writer
	left int64
}

func (l *limitWriter) Write(b []byte) (int, error) {
	if l.left <= 0 {
		return 0, errLimit
	}
	n := len(b)
	if int64(len(b)) > l.left {
		b = b[:l.left]
	}
	m, err := l.w.Write(b)
	l.left -= int64(m)
	if err == nil && m < n {
		err = errLimit
	}
	return m, err
}

// RunInContainer serves `kubectl exec`: a new process in the pod's
// sandbox (journaled and recorded like any), with stdin, a terminal and its
// resizes as asked. A non-zero exit is the exec's exit code.
func (p *Provider) RunInContainer(ctx context.Context, ns, name, container string, cmd []string, attach api.AttachIO) error {
	r, err := p.lookup(ns, name, container)
	if err != nil {
		return err
	}
	r.mu.Lock()
	id := r.sandboxID
	r.mu.Unlock()
	if id == "" {
		return errdefs.InvalidInputf("pod %s/%s has no sandbox yet", ns, name)
	}
	sb, err := p.rt.Sandbox(ctx, id)
	if err != nil {
		return err
	}
	// kubectl exec's process goes with its client, as a container
	// runtime's does: it is tied to its caller.
	// An exec's streams go to its caller whole (`kubectl exec … cat` of
	// any size, `kubectl cp`): no output quota; the recording is bounded.
	ps := spec.Process{Argv: cmd, TTY: attach.TTY(), Stdin: attach.Stdin() != nil, Stdout: spec.Discard, Stderr: spec.Discard,
		StopWithCaller: true, OutputQuota: spec.NoOutputQuota}
	if attach.Stdout() != nil {
		ps.Stdout = spec.Pipe
	}
	if attach.Stderr() != nil && !ps.TTY {
		ps.Stderr = spec.Pipe
	}
	if ps.TTY {
		// The client sends its terminal's size as the stream opens: the
		// process starts with it (a program that reads its size at once,
		// stty or a full-screen editor, sees the right one), later
		// sizes are resizes.
		select {
		case sz, ok := <-attach.Resize():
			if ok && sz.Width > 0 && sz.Height > 0 {
				ps.Rows, ps.Cols = sz.Height, sz.Width
			}
		case <-time.After(firstSizeWait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	h, err := sb.Start(ctx, ps)
	if err != nil {
		return err
	}
	var copies sync.WaitGroup
	pipe := func(dst io.WriteCloser, src io.ReadCloser) {
		if src == nil {
			return
		}
		copies.Go(func() {
			_, _ = io.Copy(dst, src) // a client gone is the context's to say
			_ = src.Close()
		})
	}
	pipe(attach.Stdout(), h.Stdout())
	pipe(attach.Stderr(), h.Stderr())
	if in := h.Stdin(); in != nil {
		go func() {
			_, _ = io.Copy(in, attach.Stdin()) // the client's stdin ended
			_ = in.Close()
		}()
	}
	if ps.TTY {
		go resizeFrom(ctx, attach.Resize(), h)
	}
	waited := make(chan struct{})
	go func() { //nolint:gosec // G118: the stop must outlive the request whose end it answers
		select {
		case <-ctx.Done():
			// The client went away: the exec's process goes too.
			_ = h.Stop(context.WithoutCancel(ctx))
		case <-waited:
		}
	}()
	copies.Wait()
	res, werr := h.Wait(context.WithoutCancel(ctx))
	close(waited)
	if werr != nil && res.Reason == "" {
		return werr
	}
	if res.ExitCode != 0 {
		return utilexec.CodeExitError{Err: fmt.Errorf("process %s ended %s with exit code %d", h.ID(), res.Reason, res.ExitCode), Code: res.ExitCode}
	}
	return nil
}

func resizeFrom(ctx context.Context, sizes <-chan api.TermSize, h *stockade.Process) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.Done():
			return
		case sz, ok := <-sizes:
			if !ok {
				return
			}
			if sz.Width > 0 && sz.Height > 0 {
				_ = h.Resize(ctx, sz.Height, sz.Width) // a process that just ended has no terminal to size
			}
		}
	}
}

// AttachToContainer serves `kubectl attach`: the container's process's
// output from now on (from the recorder), and, when the container asked for
// stdin and this node started the process, the client's input (the
// process's stdin is not closed when the client leaves); a terminal's
// resizes are applied. It ends when the process does or the client leaves.
func (p *Provider) AttachToContainer(ctx context.Context, ns, name, container string, attach api.AttachIO) error {
	r, err := p.lookup(ns, name, container)
	if err != nil {
		return err
	}
	r.mu.Lock()
	id, h := r.procID, r.proc
	r.mu.Unlock()
	if id == "" {
		return errdefs.InvalidInputf("pod %s/%s's container is not running", ns, name)
	}
	if attach.Stdin() != nil {
		if h == nil || h.Stdin() == nil {
			return errdefs.InvalidInputf("pod %s/%s's container takes no stdin here (its spec has no stdin: true, or it was re-adopted after a restart of the node: a re-adopted process keeps no stdin)", ns, name)
		}
		in := h.Stdin()
		go func() {
			_, _ = io.Copy(in, attach.Stdin()) // stdin stays open: stdinOnce is not supported
		}()
	}
	if h != nil && attach.TTY() {
		go resizeFrom(ctx, attach.Resize(), h)
	}
	from, _, err := p.readFrom(ctx, id, 0, io.Discard, io.Discard)
	if err != nil {
		return err
	}
	stdout, stderr := io.Discard, io.Discard
	if w := attach.Stdout(); w != nil {
		stdout = w
	}
	if w := attach.Stderr(); w != nil {
		stderr = w
	}
	return p.follow(ctx, id, from, stdout, stderr)
}
