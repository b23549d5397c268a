package egress

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"strconv"
	"sync"

	"github.com/stockade/stockade/spec"
)

// queueLen bounds the decisions received and not yet taken by Next: when it
// is full the reader stops reading the link (and the proxy, which never
// blocks on its runtime, drops its oldest decisions instead).
const queueLen = 64

// Control is the runtime's end of one control link to an egress proxy.
// Everything the proxy sends is untrusted: a line that breaks the protocol
// ends the link with a *ProtocolError, and no message makes the Control
// grow beyond queueLen decisions and one line.
//
// A Control's methods may be called from several goroutines; Apply calls
// run one at a time.
type Control struct {
	lr    *LineReader
	w     io.Writer
	c     io.Closer
	hello Hello

	decisions chan Decision // closed by the reader when it ends
	out       chan []byte   // lines for the writer goroutine
	applySem  chan struct{} // held by the running Apply

	mu       sync.Mutex
	handed   uint64        // rules messages handed to the writer
	answered uint64        // answers (applied or error) received
	answer   Message       // the latest answer
	answerCh chan struct{} // closed and replaced at each answer
	resumed  bool
	lastSeq  uint64 // the last decision's seq (or the resume point)
	err      error  // why the link ended; nil while it is live

	done      chan struct{} // closed when the link ends, err set
	doneOnce  sync.Once
	closed    chan struct{} // closed by Close
	closeOnce sync.Once
	connOnce  sync.Once
	connErr   error
}

// Open starts the runtime's side of a link: r carries the proxy's lines, w
// takes the runtime's, and c closes the link (closing it must end a Read
// blocked on r and a Write blocked on w; a net.Conn, or the streams of the
// `stockade-egress control` bridge, do). Open reads the proxy's hello, giving
// up when ctx ends; on any error it closes c. The Control owns c from then
// on: Close closes it, and so does the link's end.
func Open(ctx context.Context, r io.Reader, w io.Writer, c io.Closer) (*Control, error) {
	lr := NewLineReader(r)
	type result struct {
		m   Message
		err error
	}
	ch := make(chan result, 1)
	go func() {
		line, err := lr.ReadLine()
		if err != nil {
			ch <- result{err: err}
			return
		}
		m, err := ParseMessage(line)
		if err == nil && m.Kind != KindHello {
			err = &ProtocolError{Msg: "the first message is " + string(m.Kind) + ", not hello"}
		}
		setLine(err, lr.Line())
		ch <- result{m, err}
	}()
	var res result
	select {
	case res = <-ch:
	case <-ctx.Done():
		// Here and below: the handshake failed, and its error is the one
		// to report; a close error would only hide it.
		_ = c.Close()
		return nil, ctxErr(ctx, "waiting for the proxy's hello")
	}
	if res.err != nil {
		_ = c.Close()
		if errors.Is(res.err, io.EOF) {
			res.err = io.ErrUnexpectedEOF
		}
		return nil, spec.Wrap(spec.CodeEngine, "egress.control", res.err, "reading the proxy's hello")
	}
	if res.m.Hello.Version != ProtocolVersion {
		_ = c.Close()
		return nil, spec.Wrap(spec.CodeUnsupported, "egress.control", &VersionError{Got: res.m.Hello.Version}, "")
	}
	ctl := &Control{
		lr:        lr,
		w:         w,
		c:         c,
		hello:     res.m.Hello,
		decisions: make(chan Decision, queueLen),
		out:       make(chan []byte),
		applySem:  make(chan struct{}, 1),
		answerCh:  make(chan struct{}),
		done:      make(chan struct{}),
		closed:    make(chan struct{}),
	}
	go ctl.read()
	go ctl.write()
	return ctl, nil
}

// Hello returns the proxy's hello on this link.
func (c *Control) Hello() Hello { return c.hello }

// Apply sends rules as version and waits until the proxy answers that it
// applied them, ctx ends, or the link ends. The proxy answers each rules
// message in order, behind any decisions it sent before: a consumer that
// stops calling Next stalls Apply too (until ctx ends). A refusal is an
// invalid_argument error wrapping the proxy's *RemoteError, and the proxy
// keeps its old rules. When ctx ends first the rules may or may not have
// reached the proxy; Apply them again (with a later version) to know.
//
// self are the host's own addresses the proxy holds with the rules (only an
// explicit host rule admits them); nil keeps the proxy's.
func (c *Control) Apply(ctx context.Context, version uint64, rules []spec.EgressRule, self []netip.Addr) error {
	texts := make([]string, len(rules))
	for i, r := range rules {
		if texts[i] = r.String(); texts[i] == "" {
			return spec.Errorf(spec.CodeInvalidArgument, "egress.control", "rule %d is empty", i)
		}
	}
	line, err := Message{Kind: KindRules, Rules: texts, RulesVersion: version, Self: self}.AppendLine(nil)
	if err != nil {
		return spec.Wrap(spec.CodeInvalidArgument, "egress.control", err, "rules version %d", version)
	}
	select {
	case <-c.done:
		return c.linkErr()
	default:
	}
	select {
	case c.applySem <- struct{}{}:
	case <-ctx.Done():
		return ctxErr(ctx, "waiting to apply rules")
	case <-c.done:
		return c.linkErr()
	}
	defer func() { <-c.applySem }()

	// Answers come in the order rules were sent, so this message's answer
	// is answer number k, whatever became of earlier abandoned Applies.
	// handed is raised before the hand-off: an answer may arrive before
	// send returns.
	c.mu.Lock()
	c.handed++
	k := c.handed
	c.mu.Unlock()
	if err := c.send(ctx.Done(), line); err != nil {
		c.mu.Lock()
		c.handed--
		c.mu.Unlock()
		if ctx.Err() != nil {
			return ctxErr(ctx, "sending rules")
		}
		return err
	}
	ended := false
	for {
		c.mu.Lock()
		answered, answer, ch := c.answered, c.answer, c.answerCh
		c.mu.Unlock()
		if answered >= k {
			if answer.Kind == KindError {
				return spec.Wrap(spec.CodeInvalidArgument, "egress.control", &RemoteError{Msg: answer.Error}, "rules version %d refused", version)
			}
			if answer.Applied < version {
				return spec.Errorf(spec.CodeEngine, "egress.control", "the proxy applied rules version %d for version %d", answer.Applied, version)
			}
			return nil
		}
		if ended {
			return c.linkErr()
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctxErr(ctx, "waiting for rules version "+strconv.FormatUint(version, 10)+" to be applied")
		case <-c.done:
			ended = true // look once more: the answer may have come last
		}
	}
}

// Resume asks the proxy for every decision it keeps with a seq greater than
// after, then each new one. The proxy sends none before. It may be called
// once per link (ErrResumed). It blocks until the line is handed to the
// link's writer, or the link ends.
func (c *Control) Resume(after uint64) error {
	c.mu.Lock()
	if c.resumed {
		c.mu.Unlock()
		return ErrResumed
	}
	c.resumed, c.lastSeq = true, after
	c.mu.Unlock()
	line, err := Message{Kind: KindResume, Resume: after}.AppendLine(nil)
	if err != nil {
		return err
	}
	return c.send(nil, line)
}

// Next returns the next decision, in seq order (seqs may skip: the proxy
// dropped decisions nobody read in time). It blocks until one comes, ctx
// ends, or the link ends: then it returns the decisions already received,
// and after them io.EOF for a clean end or the error that ended the link.
// After Close it returns ErrClosed.
func (c *Control) Next(ctx context.Context) (Decision, error) {
	select {
	case <-c.closed:
		return Decision{}, ErrClosed
	default:
	}
	select {
	case d, ok := <-c.decisions:
		if !ok {
			c.mu.Lock()
			defer c.mu.Unlock()
			return Decision{}, c.err
		}
		return d, nil
	case <-ctx.Done():
		return Decision{}, ctxErr(ctx, "waiting for a decision")
	case <-c.closed:
		return Decision{}, ErrClosed
	}
}

// Err returns why the link ended: nil while it is live, io.EOF after a
// clean end, ErrClosed after Close, or the error that ended it.
func (c *Control) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close ends the link and closes its closer; decisions not yet taken are
// dropped. It returns the closer's error the first time and nil after.
func (c *Control) Close() error {
	first := false
	c.closeOnce.Do(func() {
		first = true
		close(c.closed)
		c.end(ErrClosed)
	})
	if !first {
		return nil
	}
	c.closeConn()
	return c.connErr
}

func (c *Control) closeConn() {
	c.connOnce.Do(func() { c.connErr = c.c.Close() })
}

// end records why the link ended (the first reason wins) and closes it, so
// that the reader and the writer return.
func (c *Control) end(err error) {
	c.doneOnce.Do(func() {
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
		close(c.done)
		if !errors.Is(err, ErrClosed) {
			c.closeConn()
		}
	})
}

// linkErr is the link's end as an error for Apply and Resume (a clean end
// is an error for them).
func (c *Control) linkErr() error {
	c.mu.Lock()
	err := c.err
	c.mu.Unlock()
	if errors.Is(err, io.EOF) {
		return spec.Wrap(spec.CodeEngine, "egress.control", io.ErrUnexpectedEOF, "the proxy closed the link")
	}
	return err
}

// send hands line to the writer goroutine.
func (c *Control) send(cancel <-chan struct{}, line []byte) error {
	select {
	case c.out <- line:
		return nil
	case <-cancel:
		return context.Canceled // the caller reports its ctx
	case <-c.done:
		return c.linkErr()
	}
}

func (c *Control) write() {
	for {
		select {
		case line := <-c.out:
			if _, err := c.w.Write(line); err != nil {
				c.end(spec.Wrap(spec.CodeEngine, "egress.control", err, "writing to the proxy"))
				return
			}
		case <-c.done:
			return
		}
	}
}

func (c *Control) read() {
	defer close(c.decisions)
	for {
		line, err := c.lr.ReadLine()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				err = spec.Wrap(spec.CodeEngine, "egress.control", err, "reading from the proxy")
			}
			c.end(err)
			return
		}
		m, err := ParseMessage(line)
		if err == nil {
			err = c.take(m)
		}
		if err != nil {
			setLine(err, c.lr.Line())
			c.end(spec.Wrap(spec.CodeEngine, "egress.control", err, "from the proxy"))
			return
		}
		if m.Kind == KindDecision {
			select {
			case c.decisions <- m.Decision:
			case <-c.closed:
				return
			}
		}
	}
}

// take checks m against the link's state and records answers.
func (c *Control) take(m Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch m.Kind {
	case KindDecision:
		switch {
		case !c.resumed:
			return &ProtocolError{Msg: "a decision before resume"}
		case m.Decision.Seq <= c.lastSeq:
			return &ProtocolError{Msg: "decision " + strconv.FormatUint(m.Decision.Seq, 10) + " after " + strconv.FormatUint(c.lastSeq, 10)}
		}
		c.lastSeq = m.Decision.Seq
	case KindApplied, KindError:
		if c.answered == c.handed {
			if m.Kind == KindError {
				return &RemoteError{Msg: m.Error}
			}
			return &ProtocolError{Msg: "applied " + strconv.FormatUint(m.Applied, 10) + " with no rules pending"}
		}
		c.answered++
		c.answer = m
		close(c.answerCh)
		c.answerCh = make(chan struct{})
	default:
		return &ProtocolError{Msg: "a " + string(m.Kind) + " message from the proxy"}
	}
	return nil
}

// setLine numbers a *ProtocolError that came without a line.
func setLine(err error, line int64) {
	var pe *ProtocolError
	if errors.As(err, &pe) && pe.Line == 0 {
		pe.Line = line
	}
}

func ctxErr(ctx context.Context, what string) error {
	code := spec.CodeCancelled
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		code = spec.CodeTimeout
	}
	return spec.Wrap(code, "egress.control", ctx.Err(), "%s", what)
}
