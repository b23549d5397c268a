package sandbox

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/internal/actors"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/recorder"
	"github.com/stockade/stockade/spec"
)

// The egress role of an allowlist sandbox, seen from its actor: one loop off
// the mailbox holds a control link to the proxy, applies the journaled rules
// when the proxy's differ, and records every decision the proxy reports in
// the sandbox's decision log beside the journal. A link that ends is made
// again (the egress container made anew if it is gone) for as long as the
// sandbox runs.

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

// egressState is the actor's view of its proxy.
type egressState struct {
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

// egressRetry is the first pause before a lost link is made again; it
// doubles up to egressRetryMax while the link keeps failing.
const (
	egressRetry    = time.Second
	egressRetryMax = 30 * time.Second
)

// startEgress starts the link loop (an allowlist sandbox that runs).
// ensure: read the egress role back first (recovery), making it anew if it
// is not as made.
func (a *sandboxActor) startEgress(ensure bool) {
	if a.sb.Egress == "" || a.e.cancel != nil {
		return
	}
	a.e.gen++
	a.e.mu.Lock()
	a.e.sb = a.sb
	a.e.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	a.e.cancel, a.e.done = cancel, make(chan struct{})
	gen, done := a.e.gen, a.e.done
	a.deps.Loops.Add(1)
	go func() {
		defer a.deps.Loops.Done()
		defer close(done)
		a.egressLoop(ctx, gen, ensure)
	}()
}

// stopEgress ends the link loop (the sandbox stops, or the actor does).
// The proxy and its container stay: removal takes them with the rest.
func (a *sandboxActor) stopEgress() {
	if a.e.cancel == nil {
		return
	}
	a.e.cancel()
	a.e.cancel = nil
	for _, r := range a.e.waiting {
		r <- spec.Errorf(spec.CodeAdmissionClosed, "sandbox", "sandbox %s is stopping: its journaled rules were not applied", a.p.ID)
	}
	a.e.waiting = nil
	if a.e.ctl != nil {
		_ = a.e.ctl.Close() // given up on: only its connection's close error could come back
		a.e.ctl = nil
	}
}

func (a *sandboxActor) egressLoop(ctx context.Context, gen int, ensure bool) {
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
		a.e.mu.Lock()
		sb := a.e.sb
		a.e.mu.Unlock()
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
				a.e.mu.Lock()
				a.e.sb = next
				a.e.mu.Unlock()
				a.send(egressReplaced{gen: gen, sb: next, reason: "the egress container was gone or not as made"})
				fresh = true
			}
			sb = next
		}
		ensure = true
		up, err := a.egressLink(ctx, gen, sb, log, fresh)
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

// egressLink runs one control link until it ends; up says it was made.
func (a *sandboxActor) egressLink(ctx context.Context, gen int, sb dockerio.Sandbox, log *recorder.DecisionLog, fresh bool) (up bool, err error) {
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
	go a.refreshHost(rctx, gen, ctl)
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
	}
}

// onEgressUp keeps the link and brings the proxy's rules up to the
// journal's.
func (a *sandboxActor) onEgressUp(m egressUp) {
	if m.gen != a.e.gen || a.e.cancel == nil {
		_ = m.ctl.Close() // a stale link, dropped
		return
	}
	// Every new link applies the journal's rules, even when the proxy's
	// hello shows their version: the host's addresses go with them, and
	// may have changed since the proxy started. The link's loop sends its
	// egressUp again when they change (refreshHost).
	a.e.ctl = m.ctl
	waiting := a.e.waiting
	a.e.waiting = nil
	a.applyEgress(waiting...)
}

// hostRefresh is how often a link's loop reads the host's addresses again.
// Polling (net.Interfaces) needs no netlink subscription and no privilege;
// an address that appears is refused only by a wider rule's special range
// until the next read, at most this long after.
const hostRefresh = 5 * time.Second

// refreshHost sends egressUp for ctl again whenever the host's addresses
// change, until ctx ends: the actor then applies its rules with the new
// addresses.
func (a *sandboxActor) refreshHost(ctx context.Context, gen int, ctl *egress.Control) {
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

func (a *sandboxActor) onEgressFailed(m egressFailed) {
	if m.gen != a.e.gen {
		return
	}
	a.deps.Log.Error("the egress role does not read back as made: the sandbox is stopped", "sandbox", a.p.ID, "err", m.err)
	a.stop(lifecycle.ReasonFailed, m.err)
}

func (a *sandboxActor) onEgressGaveUp(m egressGaveUp) {
	if m.gen != a.e.gen || a.e.cancel == nil {
		return
	}
	a.e.cancel()
	a.e.cancel = nil
	for _, r := range a.e.waiting {
		r <- spec.Wrap(spec.CodeStreamFailure, "sandbox", m.err, "sandbox %s: the rules are journaled, but its proxy cannot be reached", a.p.ID)
	}
	a.e.waiting = nil
	a.deps.Log.Warn("no control link to the egress proxy can be made", "sandbox", a.p.ID, "err", m.err)
}

func (a *sandboxActor) onEgressDown(m egressDown) {
	if m.gen == a.e.gen {
		a.e.ctl = nil
	}
}

// onEgressReplaced journals a new egress container.
func (a *sandboxActor) onEgressReplaced(m egressReplaced) {
	if m.gen != a.e.gen {
		return
	}
	if err := a.record(lifecycle.EgressReplaced{Egress: m.sb.Egress, Outside: m.sb.Outside, Reason: m.reason}); err != nil {
		a.deps.Log.Error("a new egress container could not be journaled", "sandbox", a.p.ID, "err", err)
		return
	}
	a.sb.Egress, a.sb.Outside = m.sb.Egress, m.sb.Outside
}

// setEgress journals new rules, then has the proxy apply them.
func (a *sandboxActor) setEgress(m SetEgress) {
	if err := a.pooledErr(); err != nil {
		// A pooled sandbox's rules are its claimant's, set at the claim.
		m.Reply <- err
		return
	}
	a.applyRules(m)
}

// applyRules journals and applies new rules (a caller's SetEgress, or a
// claim's rules).
func (a *sandboxActor) applyRules(m SetEgress) {
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
	a.e.mu.Lock()
	a.e.sb.Spec.Policy.Egress, a.e.sb.RulesVersion = a.sb.Spec.Policy.Egress, a.sb.RulesVersion
	a.e.mu.Unlock()
	a.applyEgress(m.Reply)
}

// applyEgress sends the journal's rules to the proxy off the mailbox, one
// set at a time: a change made while an apply is in flight is sent after
// it, and the replies wait for the apply that carries their change. With
// no link but the loop making one, they wait for it (onEgressUp applies the
// journal's rules to every new link whose proxy holds others; the caller's
// context bounds the wait).
func (a *sandboxActor) applyEgress(replies ...chan<- error) {
	a.e.replies = append(a.e.replies, replies...)
	ctl := a.e.ctl
	if ctl == nil {
		pending := a.e.replies
		a.e.replies = nil
		if a.e.cancel != nil {
			a.e.waiting = append(a.e.waiting, pending...)
			return
		}
		for _, r := range pending {
			r <- spec.Errorf(spec.CodeStreamFailure, "sandbox", "sandbox %s: the rules are journaled, but its proxy has no link; they are applied when the sandbox is next re-adopted", a.p.ID)
		}
		return
	}
	if a.e.applying {
		a.e.again = true
		return
	}
	a.e.applying = true
	version, rules := a.state.RulesVersion, a.state.Spec.Policy.Egress
	go func() {
		ctx, cancel := a.deps.DockerContext()
		defer cancel()
		err := ctl.Apply(ctx, version, rules, dockerio.HostAddrs())
		a.send(egressApplied{version: version, err: err, ctl: ctl})
	}()
}

func (a *sandboxActor) onEgressApplied(m egressApplied) {
	a.e.applying = false
	closed := errors.Is(m.err, egress.ErrClosed)
	if m.err != nil && !closed {
		// The proxy and the journal may now differ: drop the link, so
		// the next one's hello shows the proxy's version and the
		// journal's rules are applied again.
		a.deps.Log.Warn("the proxy did not apply the rules; its link is made again", "sandbox", a.p.ID, "version", m.version, "err", m.err)
		_ = m.ctl.Close() // dropped to be made again; its close error changes nothing
	}
	if m.err == nil && (a.e.again || m.version != a.state.RulesVersion || a.e.ctl != m.ctl) {
		// A later change, or a new link: the latest rules go again
		// (on the link there is now), and the replies wait for them.
		a.e.again = false
		a.applyEgress()
		return
	}
	a.e.again = false
	replies := a.e.replies
	a.e.replies = nil
	if closed && a.e.cancel != nil {
		// The link went under the apply: the next one applies the
		// journal's rules (onEgressUp), and answers these.
		a.e.waiting = append(a.e.waiting, replies...)
		return
	}
	for _, r := range replies {
		r <- m.err
	}
}
