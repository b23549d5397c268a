package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/stockade/stockade/internal/failpoint"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/warden/wire"
)

// A warm pool's sandbox: made, verified and started like any other (its
// reservation names the pool), its warden up, then held pooled — it admits
// no process, no Put and no Get — until a Claim hands it to a caller. The
// claim is journaled before the caller is answered, rotates the warden's
// secret over the live link, and applies what the caller asked that can
// change after the start.

// Claim hands a pooled sandbox to a caller. Reply gets nil once the claim
// is journaled and applied, or the error that kept the sandbox from being
// handed out (conflict: it is not pooled and ready; the pool discards it).
type Claim struct {
	Lifetime spec.Lifetime
	TTL      time.Duration
	Env      []string
	Dir      string
	Labels   map[string]string
	// Rules are an allowlist sandbox's rules (journaled as an egress
	// change after the claim, then applied by its proxy); nil keeps the
	// pool's (none).
	Rules []spec.EgressRule
	Reply chan<- error
}

type claimRekeyed struct {
	gen   int
	claim Claim
	err   error
}

// pooledErr refuses work on a pooled sandbox, and on one being claimed
// until its claimant is answered: nothing may touch its workspace, rules
// or processes before, so a claimed sandbox is as fresh as a new one.
func (a *sandboxActor) pooledErr() error {
	switch {
	case a.state.Pooled():
		return spec.Errorf(spec.CodeAdmissionClosed, "sandbox", "sandbox %s waits in pool %q: it takes no work until CreateSandbox claims it", a.p.ID, a.state.Pool)
	case a.claiming:
		return spec.Errorf(spec.CodeAdmissionClosed, "sandbox", "sandbox %s is being claimed from pool %q: it takes no work until its claimant is answered", a.p.ID, a.state.Pool)
	}
	return nil
}

// claimDone ends a claim whose rules were applied (or not).
type claimDone struct {
	reply chan<- error
	err   error
}

// checkPooled tells the runtime, once, that a pooled sandbox can no longer
// be claimed (it stops, its workload died, its warden is lost: ev, just
// journaled, says so): the pool forgets it and makes another. A warden not
// yet started is no loss: the start comes right after SandboxStarted (and
// a pooled sandbox whose warden never comes up is refused at its claim).
func (a *sandboxActor) checkPooled(ev lifecycle.Event) {
	s := a.state
	if a.unreadyTold || a.p.Unready == nil || !s.Pooled() || !s.Started {
		return
	}
	_, wardenLost := ev.(lifecycle.WardenLost)
	if s.Phase == lifecycle.PhaseStarted && a.end.stopReason == "" && !a.end.exitDead && !wardenLost {
		return
	}
	a.unreadyTold = true
	a.p.Unready()
}

func (a *sandboxActor) claim(m Claim) {
	switch {
	case !a.state.Pooled() || a.state.Phase != lifecycle.PhaseStarted || a.end.stopReason != "" || a.end.exitDead || a.end.removing:
		m.Reply <- spec.Errorf(spec.CodeConflict, "sandbox", "sandbox %s is not pooled and ready (%s)", a.p.ID, a.state.Shown())
		return
	case a.deps.Config.Warden && (a.w.link == nil || a.w.starting || a.w.probing):
		// A claimed sandbox must be able to run its first command at
		// once: one whose warden is not linked is not handed out.
		m.Reply <- spec.Errorf(spec.CodeConflict, "sandbox", "sandbox %s waits in pool %q without a linked warden", a.p.ID, a.state.Pool)
		return
	}
	ev := lifecycle.SandboxClaimed{Lifetime: m.Lifetime, TTL: m.TTL, Env: m.Env, Dir: m.Dir, Labels: m.Labels}
	if m.TTL > 0 {
		ev.Deadline = a.deps.Now().Add(m.TTL)
	}
	var secret []byte
	if a.w.link != nil {
		secret = make([]byte, wire.SecretSize)
		if _, err := rand.Read(secret); err != nil {
			m.Reply <- spec.Wrap(spec.CodeInternal, "sandbox", err, "a new warden secret")
			return
		}
		ev.Secret = hex.EncodeToString(secret)
	}
	// Write-ahead: the journal holds the new secret before the warden
	// does. A crash in between leaves a claimed sandbox whose warden
	// refuses the journal's secret: it is journaled lost at the reattach
	// and the first launch starts a new one. Never the reverse (a warden
	// whose secret no journal holds).
	if err := a.record(ev); err != nil {
		m.Reply <- err
		return
	}
	a.claiming = true
	failpoint.Hit(failpoint.PoolClaimed)
	a.sb.Spec = a.state.Spec
	if !a.state.Deadline.IsZero() {
		a.ttl = time.AfterFunc(time.Until(a.state.Deadline), func() { a.send(ttlMsg{}) })
	}
	if secret == nil {
		a.claimApplied(m)
		return
	}
	link, gen := a.w.link, a.w.gen
	go func() {
		ctx, cancel := a.deps.DockerContext()
		defer cancel()
		a.send(claimRekeyed{gen: gen, claim: m, err: link.Rekey(ctx, secret)})
	}()
}

func (a *sandboxActor) onClaimRekeyed(m claimRekeyed) {
	if m.err != nil && m.gen == a.w.gen && a.w.link != nil {
		// The warden holds the pool's secret, the journal the new one:
		// this link is given up (journaled lost), and the sandbox is not
		// handed out (the pool removes it and serves the next one).
		link := a.w.link
		link.Abort(fmt.Errorf("rotating the warden's secret at the claim: %w", m.err))
		a.onWardenDown(wardenDown{gen: m.gen, err: link.Err()})
	} else if m.err == nil {
		failpoint.Hit(failpoint.PoolRekeyed)
	}
	a.claimApplied(m.claim)
}

// claimReady is why a claimed sandbox cannot be handed out after all (its
// workload died, or its warden's link was lost, during the claim), or nil:
// a claim answers success only with a sandbox that runs its first command
// at once.
func (a *sandboxActor) claimReady() error {
	switch {
	case !a.running() || a.end.removing:
		return spec.Errorf(spec.CodeStreamFailure, "sandbox", "sandbox %s stopped during its claim from pool %q (%s); it is not handed out", a.p.ID, a.state.Pool, a.state.Shown())
	case a.deps.Config.Warden && (a.w.link == nil || a.w.probing):
		return spec.Errorf(spec.CodeStreamFailure, "sandbox", "sandbox %s lost its warden during its claim from pool %q; it is not handed out", a.p.ID, a.state.Pool)
	}
	return nil
}

// claimApplied ends a claim: the caller's allowlist rules, if any, are
// journaled and applied (the reply waits for the proxy), else it is
// answered at once.
func (a *sandboxActor) claimApplied(m Claim) {
	if a.state.Spec.Policy.Network == spec.NetworkAllowlist && (len(m.Rules) > 0 || a.state.RulesVersion != 0) {
		// The claimant's rules, even none: whatever the sandbox held
		// before is not the claimant's.
		done := make(chan error, 1)
		a.applyRules(SetEgress{Rules: m.Rules, Reply: done})
		go func() { a.send(claimDone{reply: m.Reply, err: <-done}) }()
		return
	}
	a.claiming = false
	m.Reply <- a.claimReady()
}

func (a *sandboxActor) onClaimDone(m claimDone) {
	a.claiming = false
	if m.err == nil {
		m.err = a.claimReady()
	}
	m.reply <- m.err
}
