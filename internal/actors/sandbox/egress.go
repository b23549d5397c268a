package sandbox

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/internal/actors"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/recorder"
	"github.com/stockade/stockade/spec"
)

// The egress part: an allowlist sandbox's proxy, seen from its actor. One
// loop off the mailbox holds a control link to the proxy, applies the
// journaled rules when the proxy's differ, and records every decision the
// proxy reports in the sandbox's decision log beside the journal. A link
// that ends is made again (the egress container made anew if it is gone)
// for as long as the sandbox runs.
//
// What it adds to the core:
//   - its messages: SetEgress (a caller's new rules: journaled, then
//     applied), and its loop's: egressUp, egressDown, egressGaveUp,
//     egressFailed (the sandbox fails closed), egressReplaced (journaled),
//     egressApplied;
//   - hooks: start (the workload started, or was re-adopted), stop (the
//     stopping intent, a removal, the actor's stop) and loopDone (a removal
//     waits for the loop, which may be making an egress container);
//   - for the pool's claim: applyRules (the claimant's rules).
//
// It keeps the core's sandbox handle up to date with what it journals (a
// new egress container, the rules' version).

// SetEgress replaces an allowlist sandbox's rules: journaled first, then
// applied by the proxy without a restart. Reply gets nil once the proxy
// holds them.
type SetEgress struct {
	Rules []spec.EgressRule
	Reply chan<- error
}

type (
	// egressUp: the loop has a link (the actor applies rules through it).
	egressUp struct {
		gen int
		ctl *egress.Control
	}
	egressDown struct{ gen int }
	// egressFailed: the egress role is not what was made; the sandbox
	// fails closed.
	egressFailed struct {
		gen int
		err error
	}
	// egressGaveUp: the engine cannot make a link at all (no proxy: the
	// fake engine); the loop ended.
	egressGaveUp struct {
		gen int
		err error
	}
	// egressReplaced: the loop made the egress container anew.
	egressReplaced struct {
		gen    int
		sb     dockerio.Sandbox
		reason string
	}
	egressApplied struct {
		version uint64
		err     error
		ctl     *egress.Control
	}
)

// egressPart is the actor's view of its proxy.
type egressPart struct {
	a      *sandboxActor
	gen    int
	cancel context.CancelFunc
	ctl    *egress.Control
	done   chan struct{}
	// mu guards sb, which the loop reads when it makes the egress anew:
	// the rules then in force go into its command line.
	mu sync.Mutex
	sb dockerio.Sandbox
	// waiting: SetEgress replies held for the next link (the loop is
	// making one: just after a create or a restart, or after a loss).
	waiting []chan<- error
	// One apply at a time, always of the journal's latest rules: applying
	// is set while one is in flight, again asks for one more after it,
	// and replies wait for the apply that carries their change.
	applying bool
	again    bool
	replies  []chan<- error
}

// handle takes the egress part's messages.
func (e *egressPart) handle(_ actor.Context, msg any) bool {
	switch m := msg.(type) {
	case SetEgress:
		e.set(m)
	case egressUp:
		e.onUp(m)
	case egressDown:
		e.onDown(m)
	case egressGaveUp:
		e.onGaveUp(m)
	case egressFailed:
		e.onFailed(m)
	case egressReplaced:
		e.onReplaced(m)
	case egressApplied:
		e.onApplied(m)
	default:
		return false
	}
	return true
}

// loopDone is closed once the link loop has ended (nil: never started).
func (e *egressPart) loopDone() <-chan struct{} { return e.done }

// egressRetry is the first pause before a lost link is made again; it
// doubles up to egressRetryMax while the link keeps failing.
const (
	egressRetry    = time.Second
	egressRetryMax = 30 * time.Second
)

// start starts the link loop (an allowlist sandbox that runs).
// ensure: read the egress role back first (recovery), making it anew if it
// is not as made.
func (e *egressPart) start(ensure bool) {
	a := e.a
	if a.sb.Egress == "" || e.cancel != nil {
		return
	}
	e.gen++
	e.mu.Lock()
	e.sb = a.sb
	e.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel, e.done = cancel, make(chan struct{})
	gen, done := e.gen, e.done
	a.deps.Loops.Add(1)
	go func() {
		defer a.deps.Loops.Done()
		defer close(done)
		e.loop(ctx, gen, ensure)
	}()
}

// stop ends the link loop (the sandbox stops, or the actor does).
// The proxy and its container stay: removal takes them with the rest.
func (e *egressPart) stop() {
	a := e.a
	if e.cancel == nil {
		return
	}
	e.cancel()
	e.cancel = nil
	for _, r := range e.waiting {
		r <- spec.Errorf(spec.CodeAdmissionClosed, "sandbox", "sandbox %s is stopping: its journaled rules were not applied", a.p.ID)
	}
	e.waiting = nil
	if e.ctl != nil {
		_ = e.ctl.Close() // given up on: only its connection's close error could come back
		e.ctl = nil
	}
}

func (e *egressPart) loop(ctx context.Context, gen int, ensure bool) {
	a := e.a
	var log *recorder.DecisionLog
	if a.deps.Recorder != nil {
		l, err := recorder.OpenDecisions(a.deps.Recorder.Path(), a.p.ID)
		if err != nil {
			a.deps.Log.Warn("the egress decision log cannot be opened: decisions go unrecorded", "sandbox", a.p.ID, "err", err)
		} else {
			log = l
			defer func() {
				if err := log.Close(); err != nil {
					a.deps.Log.Warn("closing the egress decision log failed: its last decisions may be lost", "sandbox", a.p.ID, "err", err)
				}
			}()
		}
	}
	pause := egressRetry
	fresh := false // the proxy was made anew: its decisions start over
	backoff := func() bool {
		ok := actors.Sleep(ctx, pause)
		pause = min(2*pause, egressRetryMax)
		return ok
	}
	for ctx.Err() == nil {
		e.mu.Lock()
		sb := e.sb
		e.mu.Unlock()
		if ensure {
			dctx, cancel := context.WithTimeout(ctx, a.deps.Config.DockerTimeout)
			next, replaced, err := a.engine.EnsureEgress(dctx, sb)
			cancel()
			if spec.IsCode(err, spec.CodeUnsupported) || spec.IsCode(err, spec.CodeConflict) {
				// Its network is not the one made (readback), or a
				// resource is not ours: the sandbox is not what was
				// made, and fails closed as a workload readback would.
				a.send(egressFailed{gen: gen, err: err})
				return
			}
			if err != nil {
				a.deps.Log.Warn("the egress role could not be made whole", "sandbox", a.p.ID, "err", err)
				if !backoff() {
					return
				}
				continue
			}
			if replaced {
				e.mu.Lock()
				e.sb = next
				e.mu.Unlock()
				a.send(egressReplaced{gen: gen, sb: next, reason: "the egress container was gone or not as made"})
				fresh = true
			}
			sb = next
		}
		ensure = true
		up, err := e.runLink(ctx, gen, sb, log, fresh)
		fresh = false
		a.send(egressDown{gen: gen})
		if ctx.Err() != nil {
			return
		}
		if spec.IsCode(err, spec.CodeUnsupported) && !up {
			a.send(egressGaveUp{gen: gen, err: err})
			return
		}
		if up {
			pause = egressRetry
		}
		a.deps.Log.Warn("the egress control link ended", "sandbox", a.p.ID, "err", err)
		if !backoff() {
			return
		}
	}
}

// runLink runs one control link until it ends; up says it was made.
func (e *egressPart) runLink(ctx context.Context, gen int, sb dockerio.Sandbox, log *recorder.DecisionLog, fresh bool) (up bool, err error) {
	a := e.a
	octx, cancel := context.WithTimeout(ctx, a.deps.Config.DockerTimeout)
	conn, err := a.engine.OpenEgress(octx, sb, &dockerio.LineLog{Log: func(line string) {
		a.deps.Log.Warn("egress", "sandbox", a.p.ID, "stderr", line)
	}, Max: 100})
	if err != nil {
		cancel()
		return false, err
	}
	ctl, err := egress.Open(octx, conn.R, conn.W, conn.C)
	cancel()
	if err != nil {
		_ = conn.C.Close() // the handshake's error is the one to report
		return false, err
	}
	defer func() { _ = ctl.Close() }() // the loop's end; a close error changes nothing then
	var last uint64
	if log != nil {
		last = log.Last()
	}
	h := ctl.Hello()
	if fresh || h.Next <= last {
		// The proxy is not the one the log heard last (made anew): its
		// sequence started over.
		last = 0
	}
	if last > 0 && h.Oldest > last+1 && log != nil {
		if err := log.Append(egress.Decision{Seq: h.Oldest - 1, Time: a.deps.Now(), Verdict: egress.VerdictLost,
			Reason: "decisions the proxy's ring dropped while no runtime read them"}); err != nil {
			a.deps.Log.Warn("recording the proxy's dropped decisions failed", "sandbox", a.p.ID, "err", err)
		}
	}
	if err := ctl.Resume(last); err != nil {
		return false, err
	}
	a.send(egressUp{gen: gen, ctl: ctl})
	rctx, stopRefresh := context.WithCancel(ctx)
	defer stopRefresh()
	go e.refreshHost(rctx, gen, ctl)
	for {
		d, err := ctl.Next(ctx)
		if err != nil {
			return true, err
		}
		if log != nil {
			if err := log.Append(d); err != nil {
				a.deps.Log.Warn("an egress decision could not be recorded", "sandbox", a.p.ID, "err", err)
			}
		}
		if a.deps.Recorder != nil {
			a.deps.Recorder.CountDecision(string(d.Verdict))
		}
		if f := a.deps.Decided; f != nil {
			f(a.p.ID, d)
		}
	}
}

// onUp keeps the link and brings the proxy's rules up to the
// journal's.
// linked reports whether a control link to the proxy is up.
func (e *egressPart) linked() bool { return e.ctl != nil }

func (e *egressPart) onUp(m egressUp) {
	if m.gen != e.gen || e.cancel == nil {
		_ = m.ctl.Close() // a stale link, dropped
		return
	}
	// Every new link applies the journal's rules, even when the proxy's
	// hello shows their version: the host's addresses go with them, and
	// may have changed since the proxy started. The link's loop sends its
	// egressUp again when they change (refreshHost).
	e.ctl = m.ctl
	waiting := e.waiting
	e.waiting = nil
	e.apply(waiting...)
	e.a.releaseCreate()
}

// hostRefresh is how often a link's loop reads the host's addresses again.
// Polling (net.Interfaces) needs no netlink subscription and no privilege;
// an address that appears is refused only by a wider rule's special range
// until the next read, at most this long after.
const hostRefresh = 5 * time.Second

// refreshHost sends egressUp for ctl again whenever the host's addresses
// change, until ctx ends: the actor then applies its rules with the new
// addresses.
func (e *egressPart) refreshHost(ctx context.Context, gen int, ctl *egress.Control) {
	a := e.a
	prev := dockerio.HostAddrs()
	t := time.NewTicker(hostRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if now := dockerio.HostAddrs(); now != nil && !slices.Equal(now, prev) {
			prev = now
			a.send(egressUp{gen: gen, ctl: ctl})
		}
	}
}

func (e *egressPart) onFailed(m egressFailed) {
	a := e.a
	if m.gen != e.gen {
		return
	}
	a.deps.Log.Error("the egress role does not read back as made: the sandbox is stopped", "sandbox", a.p.ID, "err", m.err)
	a.releaseCreate()
	a.stop(lifecycle.ReasonFailed, m.err)
}

func (e *egressPart) onGaveUp(m egressGaveUp) {
	a := e.a
	if m.gen != e.gen || e.cancel == nil {
		return
	}
	e.cancel()
	e.cancel = nil
	for _, r := range e.waiting {
		r <- spec.Wrap(spec.CodeStreamFailure, "sandbox", m.err, "sandbox %s: the rules are journaled, but its proxy cannot be reached", a.p.ID)
	}
	e.waiting = nil
	a.deps.Log.Warn("no control link to the egress proxy can be made", "sandbox", a.p.ID, "err", m.err)
	a.releaseCreate()
}

func (e *egressPart) onDown(m egressDown) {
	if m.gen == e.gen {
		e.ctl = nil
	}
}

// onReplaced journals a new egress container.
func (e *egressPart) onReplaced(m egressReplaced) {
	a := e.a
	if m.gen != e.gen {
		return
	}
	if err := a.record(lifecycle.EgressReplaced{Egress: m.sb.Egress, Outside: m.sb.Outside, Reason: m.reason}); err != nil {
		a.deps.Log.Error("a new egress container could not be journaled", "sandbox", a.p.ID, "err", err)
		return
	}
	a.sb.Egress, a.sb.Outside = m.sb.Egress, m.sb.Outside
}

// set journals new rules, then has the proxy apply them.
func (e *egressPart) set(m SetEgress) {
	a := e.a
	if err := a.pool.pooledErr(); err != nil {
		// A pooled sandbox's rules are its claimant's, set at the claim.
		m.Reply <- err
		return
	}
	e.applyRules(m)
}

// applyRules journals and applies new rules (a caller's SetEgress, or a
// claim's rules).
func (e *egressPart) applyRules(m SetEgress) {
	a := e.a
	switch {
	case a.state.Spec.Policy.Network != spec.NetworkAllowlist:
		m.Reply <- spec.Errorf(spec.CodeInvalidArgument, "sandbox", "sandbox %s has network %q: rules need the allowlist network (a sandbox's network kind is fixed at create)", a.p.ID, a.state.Spec.Policy.Network)
		return
	case a.state.Phase != lifecycle.PhaseStarted || a.end.stopReason != "":
		m.Reply <- spec.Errorf(spec.CodeAdmissionClosed, "sandbox", "sandbox %s is %s", a.p.ID, a.phaseName())
		return
	}
	p := a.state.Spec.Policy
	p.Egress = m.Rules
	if err := p.Validate(); err != nil {
		m.Reply <- err
		return
	}
	if err := a.record(lifecycle.EgressChanged{Rules: m.Rules}); err != nil {
		m.Reply <- err
		return
	}
	a.sb.Spec.Policy.Egress, a.sb.RulesVersion = a.state.Spec.Policy.Egress, a.state.RulesVersion
	e.mu.Lock()
	e.sb.Spec.Policy.Egress, e.sb.RulesVersion = a.sb.Spec.Policy.Egress, a.sb.RulesVersion
	e.mu.Unlock()
	e.apply(m.Reply)
}

// apply sends the journal's rules to the proxy off the mailbox, one
// set at a time: a change made while an apply is in flight is sent after
// it, and the replies wait for the apply that carries their change. With
// no link but the loop making one, they wait for it (onUp applies the
// journal's rules to every new link whose proxy holds others; the caller's
// context bounds the wait).
func (e *egressPart) apply(replies ...chan<- error) {
	a := e.a
	e.replies = append(e.replies, replies...)
	ctl := e.ctl
	if ctl == nil {
		pending := e.replies
		e.replies = nil
		if e.cancel != nil {
			e.waiting = append(e.waiting, pending...)
			return
		}
		for _, r := range pending {
			r <- spec.Errorf(spec.CodeStreamFailure, "sandbox", "sandbox %s: the rules are journaled, but its proxy has no link; they are applied when the sandbox is next re-adopted", a.p.ID)
		}
		return
	}
	if e.applying {
		e.again = true
		return
	}
	e.applying = true
	version, rules := a.state.RulesVersion, a.state.Spec.Policy.Egress
	go func() {
		ctx, cancel := a.deps.DockerContext()
		defer cancel()
		err := ctl.Apply(ctx, version, rules, dockerio.HostAddrs())
		a.send(egressApplied{version: version, err: err, ctl: ctl})
	}()
}

func (e *egressPart) onApplied(m egressApplied) {
	a := e.a
	e.applying = false
	closed := errors.Is(m.err, egress.ErrClosed)
	if m.err != nil && !closed {
		// The proxy and the journal may now differ: drop the link, so
		// the next one's hello shows the proxy's version and the
		// journal's rules are applied again.
		a.deps.Log.Warn("the proxy did not apply the rules; its link is made again", "sandbox", a.p.ID, "version", m.version, "err", m.err)
		_ = m.ctl.Close() // dropped to be made again; its close error changes nothing
	}
	if m.err == nil && (e.again || m.version != a.state.RulesVersion || e.ctl != m.ctl) {
		// A later change, or a new link: the latest rules go again
		// (on the link there is now), and the replies wait for them.
		e.again = false
		e.apply()
		return
	}
	e.again = false
	replies := e.replies
	e.replies = nil
	if closed && e.cancel != nil {
		// The link went under the apply: the next one applies the
		// journal's rules (onUp), and answers these.
		e.waiting = append(e.waiting, replies...)
		return
	}
	for _, r := range replies {
		r <- m.err
	}
}
