package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade/stockade/internal/failpoint"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/warden/wire"
)

// The pool part: a warm pool's sandbox is made, verified and started like
// any other (its reservation names the pool), its warden up, then held
// pooled — it admits no process, no Put and no Get — until a Claim hands it
// to a caller. The claim is journaled before the caller is answered,
// rotates the warden's secret over the live link, and applies what the
// caller asked that can change after the start.
//
// What it adds to the core:
//   - its messages: Claim, and its own claimRekeyed and claimDone;
//   - hooks: onRecorded (after every journaled event: a pooled sandbox
//     that can no longer be claimed is reported, Params.Unready);
//   - for the core and the other parts: pooledErr (a pooled sandbox, or
//     one being claimed, takes no work).
//
// A claim asks the warden part whether its link can be handed out
// (claimable, linked), rotates its secret over it (linkNow; abort if the
// rotation fails), and has the egress part apply the claimant's rules
// (applyRules).

// Claim hands a pooled sandbox to a caller. Reply gets nil once the claim
// is journaled and applied, or the error that kept the sandbox from being
// handed out (conflict: it is not pooled and ready; the pool discards it).
type Claim struct {
	Lifetime spec.Lifetime
	TTL      time.Duration
	Env      []string
	Dir      string
	Labels   map[string]string
	Secrets  []spec.SecretVar // values held by the actor, never journaled
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

// claimDone ends a claim whose rules were applied (or not).
type claimDone struct {
	reply chan<- error
	err   error
}

// poolPart is a pooled sandbox's waiting and its claim.
type poolPart struct {
	a *sandboxActor
	// claiming: a claim is journaled and its caller not yet answered
	// (the warden's rekey, the rules): no work is admitted meanwhile.
	claiming bool
	// unreadyTold: Params.Unready was called.
	unreadyTold bool
}

// handle takes the pool part's messages.
func (pl *poolPart) handle(_ actor.Context, msg any) bool {
	switch m := msg.(type) {
	case Claim:
		pl.claim(m)
	case claimRekeyed:
		pl.onRekeyed(m)
	case claimDone:
		pl.onDone(m)
	default:
		return false
	}
	return true
}

// pooledErr refuses work on a pooled sandbox, and on one being claimed
// until its claimant is answered: nothing may touch its workspace, rules
// or processes before, so a claimed sandbox is as fresh as a new one.
func (pl *poolPart) pooledErr() error {
	a := pl.a
	switch {
	case a.state.Pooled():
		return spec.Errorf(spec.CodeAdmissionClosed, "sandbox", "sandbox %s waits in pool %q: it takes no work until CreateSandbox claims it", a.p.ID, a.state.Pool)
	case pl.claiming:
		return spec.Errorf(spec.CodeAdmissionClosed, "sandbox", "sandbox %s is being claimed from pool %q: it takes no work until its claimant is answered", a.p.ID, a.state.Pool)
	}
	return nil
}

// onRecorded tells the runtime, once, that a pooled sandbox can no longer
// be claimed (it stops, its workload died, its warden is lost: ev, just
// journaled, says so): the pool forgets it and makes another. A warden not
// yet started is no loss: the start comes right after SandboxStarted (and
// a pooled sandbox whose warden never comes up is refused at its claim).
func (pl *poolPart) onRecorded(ev lifecycle.Event) {
	a := pl.a
	s := a.state
	if pl.unreadyTold || a.p.Unready == nil || !s.Pooled() || !s.Started {
		return
	}
	_, wardenLost := ev.(lifecycle.WardenLost)
	if s.Phase == lifecycle.PhaseStarted && a.end.stopReason == "" && !a.end.exitDead && !wardenLost {
		return
	}
	pl.unreadyTold = true
	a.p.Unready()
}

// claim hands a pooled sandbox that is ready to its caller: the claim
// journaled (with the warden's new secret), then the secret rotated over
// the live link and the claimant's rules applied (applied).
func (pl *poolPart) claim(m Claim) {
	a := pl.a
	switch {
	case !a.state.Pooled() || a.state.Phase != lifecycle.PhaseStarted || a.end.stopReason != "" || a.end.exitDead || a.end.removing:
		m.Reply <- spec.Errorf(spec.CodeConflict, "sandbox", "sandbox %s is not pooled and ready (%s)", a.p.ID, a.state.Shown())
		return
	case a.deps.Config.WardensDelivered && !a.warden.claimable():
		// A claimed sandbox must be able to run its first command at
		// once: one whose warden is not linked is not handed out.
		m.Reply <- spec.Errorf(spec.CodeConflict, "sandbox", "sandbox %s waits in pool %q without a linked warden", a.p.ID, a.state.Pool)
		return
	}
	ev := lifecycle.SandboxClaimed{Lifetime: m.Lifetime, TTL: m.TTL, Env: m.Env, Dir: m.Dir, Labels: m.Labels, Secrets: spec.WithoutSecretValues(m.Secrets)}
	if m.TTL > 0 {
		ev.Deadline = a.deps.Now().Add(m.TTL)
	}
	var secret []byte
	if link, _ := a.warden.linkNow(); link != nil {
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
	pl.claiming = true
	a.secrets = valuesOf(m.Secrets)
	failpoint.Hit(failpoint.PoolClaimed)
	a.sb.Spec = a.state.Spec
	if !a.state.Deadline.IsZero() {
		a.armTTL(a.state.Deadline)
	}
	if secret == nil {
		pl.applied(m)
		return
	}
	link, gen := a.warden.linkNow()
	go func() {
		ctx, cancel := a.deps.DockerContext()
		defer cancel()
		a.send(claimRekeyed{gen: gen, claim: m, err: link.Rekey(ctx, secret)})
	}()
}

func (pl *poolPart) onRekeyed(m claimRekeyed) {
	a := pl.a
	if m.err != nil {
		// The warden holds the pool's secret, the journal the new one:
		// this link, if it is still the live one, is given up (journaled
		// lost), and the sandbox is not handed out (the pool removes it
		// and serves the next one).
		a.warden.abort(m.gen, fmt.Errorf("rotating the warden's secret at the claim: %w", m.err))
	} else {
		failpoint.Hit(failpoint.PoolRekeyed)
	}
	pl.applied(m.claim)
}

// ready is why a claimed sandbox cannot be handed out after all (its
// workload died, or its warden's link was lost, during the claim), or nil:
// a claim answers success only with a sandbox that runs its first command
// at once.
func (pl *poolPart) ready() error {
	a := pl.a
	switch {
	case !a.running() || a.end.removing:
		return spec.Errorf(spec.CodeStreamFailure, "sandbox", "sandbox %s stopped during its claim from pool %q (%s); it is not handed out", a.p.ID, a.state.Pool, a.state.Shown())
	case a.deps.Config.WardensDelivered && !a.warden.linked():
		return spec.Errorf(spec.CodeStreamFailure, "sandbox", "sandbox %s lost its warden during its claim from pool %q; it is not handed out", a.p.ID, a.state.Pool)
	}
	return nil
}

// applied ends a claim: the caller's allowlist rules, if any, are
// journaled and applied (the reply waits for the proxy), else it is
// answered at once.
func (pl *poolPart) applied(m Claim) {
	a := pl.a
	if a.state.Spec.Policy.Network == spec.NetworkAllowlist && (len(m.Rules) > 0 || a.state.RulesVersion != 0) {
		// The claimant's rules, even none: whatever the sandbox held
		// before is not the claimant's.
		done := make(chan error, 1)
		a.egress.applyRules(SetEgress{Rules: m.Rules, Reply: done})
		go func() { a.send(claimDone{reply: m.Reply, err: <-done}) }()
		return
	}
	pl.claiming = false
	m.Reply <- pl.ready()
}

func (pl *poolPart) onDone(m claimDone) {
	pl.claiming = false
	if m.err == nil {
		m.err = pl.ready()
	}
	m.reply <- m.err
}
