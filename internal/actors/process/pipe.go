package process

import (
	"errors"
	"io"
	"sync"

	"github.com/stockade/stockade/spec"
)

// pipe is a piped output stream: a bounded buffer between the read loop and
// the consumer. Its capacity is the consumer's credit (the high-water mark):
// when it is full the read loop blocks in Write and stops pulling frames from
// the connection, which is the backpressure that reaches the process.
type pipe struct {
	mu       sync.Mutex
	readable sync.Cond
	writable sync.Cond
	buf      []byte // ring of hwm bytes, allocated at the first write
	hwm      int
	start, n int
	werr     error // set when the writer closed: io.EOF or the failure
	wclosed  bool
	rclosed  bool
	// onAbandon is called (once, outside the lock) when the consumer
	// closes the stream before reading it to its end, and writes fail
	// from then on. Nil: the consumer detaches instead, and writes after
	// its close are dropped (the process runs on, its output recorded
	// before it reaches the pipe).
	onAbandon func()
}

func newPipe(hwm int, onAbandon func()) *pipe {
	p := &pipe{hwm: hwm, onAbandon: onAbandon}
	p.readable.L = &p.mu
	p.writable.L = &p.mu
	return p
}

var errAbandoned = spec.Errorf(spec.CodeCancelled, "process", "the consumer closed an output stream without draining it")

// Write copies all of b into the buffer, blocking while it is full. Once
// the consumer has closed its end it fails with a cancelled error, or drops
// b when the consumer detached (no onAbandon).
func (p *pipe) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	written := 0
	if p.buf == nil && len(b) > 0 {
		// A quiet stream costs nothing until it speaks.
		p.buf = make([]byte, p.hwm)
	}
	for len(b) > 0 {
		for p.n == len(p.buf) && !p.rclosed && !p.wclosed {
			p.writable.Wait()
		}
		if p.rclosed {
			if p.onAbandon == nil {
				return written + len(b), nil // detached: nobody reads it
			}
			return written, errAbandoned
		}
		if p.wclosed { // aborted by CloseWrite from the process actor
			return written, p.werr
		}
		end := (p.start + p.n) % len(p.buf)
		limit := len(p.buf) - p.n
		if end+limit > len(p.buf) {
			limit = len(p.buf) - end
		}
		k := copy(p.buf[end:end+limit], b)
		p.n += k
		written += k
		b = b[k:]
		p.readable.Signal()
	}
	return written, nil
}

// CloseWrite ends the stream: readers get err (io.EOF when nil) once the
// buffer is drained. Called while a Write is blocked, it aborts that Write.
func (p *pipe) CloseWrite(err error) {
	if err == nil {
		err = io.EOF
	}
	p.mu.Lock()
	if !p.wclosed {
		p.wclosed, p.werr = true, err
	}
	p.readable.Broadcast()
	p.writable.Broadcast()
	p.mu.Unlock()
}

// Read reads what is buffered, blocking while the buffer is empty and the
// stream has not ended.
func (p *pipe) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.n == 0 && !p.wclosed && !p.rclosed {
		p.readable.Wait()
	}
	if p.rclosed {
		return 0, io.ErrClosedPipe
	}
	if p.n == 0 {
		return 0, p.werr
	}
	limit := p.n
	if p.start+limit > len(p.buf) {
		limit = len(p.buf) - p.start
	}
	k := copy(b, p.buf[p.start:p.start+limit])
	p.start = (p.start + k) % len(p.buf)
	p.n -= k
	p.writable.Signal()
	return k, nil
}

// Close is the consumer's close. Closing before the end of the stream
// abandons it (the writer fails and onAbandon tells the process), or, with
// no onAbandon, detaches from it (the writer's bytes are dropped).
func (p *pipe) Close() error {
	p.mu.Lock()
	if p.rclosed {
		p.mu.Unlock()
		return nil
	}
	p.rclosed = true
	abandoned := !(p.wclosed && p.n == 0)
	p.writable.Broadcast()
	p.readable.Broadcast()
	p.mu.Unlock()
	if abandoned && p.onAbandon != nil {
		p.onAbandon()
	}
	return nil
}

// WriteTo hands buffered bytes to w straight from the ring (io.Copy uses
// it): no intermediate buffer, one wake-up per contiguous run instead of per
// small read. It returns at the end of the stream (nil at a clean end).
func (p *pipe) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		p.mu.Lock()
		for p.n == 0 && !p.wclosed && !p.rclosed {
			p.readable.Wait()
		}
		if p.rclosed {
			p.mu.Unlock()
			return total, io.ErrClosedPipe
		}
		if p.n == 0 {
			err := p.werr
			p.mu.Unlock()
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return total, err
		}
		// The writer only fills space outside [start, start+n): this run
		// stays put while w writes it, unlocked.
		run := min(p.n, len(p.buf)-p.start)
		seg := p.buf[p.start : p.start+run]
		p.mu.Unlock()
		k, err := w.Write(seg)
		p.mu.Lock()
		p.start = (p.start + k) % len(p.buf)
		p.n -= k
		p.writable.Signal()
		p.mu.Unlock()
		total += int64(k)
		if err == nil && k < run {
			err = io.ErrShortWrite
		}
		if err != nil {
			return total, err
		}
	}
}
