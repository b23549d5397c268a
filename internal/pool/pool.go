// Package pool is the runtime's warm pools: sandboxes made, verified and
// started ahead of demand (their reservation names the pool; the sandbox
// actor holds them pooled, admitting no work), claimed by a create whose
// spec has the same pool key. The claim is journaled on the sandbox's
// stream before the caller is answered; refills run in the background, at
// most a few at a time, and a claim never waits for one: an empty pool
// means a cold create. Pooled sandboxes are kept sandboxes to recovery
// (re-adopted, or torn down), and a reopened runtime takes the re-adopted
// ones back into their pool (Adopt) before it refills.
//
// The pools know their members only through Maker, the runtime's narrow
// seam (make one, claim one, remove one, say which pool it is in): they
// import neither Docker's adapter nor the actors.
package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/profile"
	"github.com/stockade/stockade/spec"
)

// Maker is what the pools ask of the runtime about their members.
type Maker[M comparable] interface {
	// Make creates one sandbox of s for pool name and returns once it is
	// pooled (started, its warden up).
	Make(ctx context.Context, name string, s spec.Sandbox) (M, error)
	// Claim hands m to a caller: err is the sandbox's answer (nil: the
	// claim is journaled and its rules applied), asked why the question
	// went unanswered (the caller's end, the sandbox gone).
	Claim(ctx context.Context, m M, c Claim) (err, asked error)
	// Remove stops and deletes m.
	Remove(ctx context.Context, m M) error
	// Pooled records the pool m was made for (pooled or claimed).
	Pooled(m M, name string)
	// ID names m in logs.
	ID(m M) string
}

// Claim is what a claim sets on a pooled sandbox: the claimant's part of
// the spec.
type Claim struct {
	Lifetime spec.Lifetime
	TTL      time.Duration
	Env      []string
	Dir      string
	Labels   map[string]string
	Secrets  []spec.SecretVar
	Rules    []spec.EgressRule
}

// DefaultRefills is how many pooled sandboxes are made at once, by
// default, across every pool.
const DefaultRefills = 2

// MaxSize bounds one pool.
const MaxSize = 1000

// Bounds on the refill's back-off after a failed create.
const (
	poolBackoffMin = time.Second
	poolBackoffMax = 30 * time.Second
)

type Pools[M comparable] struct {
	maker Maker[M]
	log   *slog.Logger
	// warden: the runtime delivers wardens (a re-adopted pooled sandbox
	// whose warden is lost is not taken back).
	warden bool
	mu     sync.Mutex
	// order is the pools in the order they were given: a request claims
	// from the first matching pool with a ready sandbox.
	order  []*pool[M]
	byName map[string]*pool[M]
	sem    chan struct{} // one token per refill under way
	kick   chan struct{}
	closed bool
	// draining: the pools close and their sandboxes are removed
	// (Shutdown), not left for the next runtime (Close).
	draining bool
	stop     context.CancelFunc
	done     chan struct{}
	// busy counts the refills and removals under way (close waits for
	// them: idle is signalled when it drops to 0).
	busy int
	idle *sync.Cond
	// lastClaim is when the last claim began: refills start only once
	// claims have been quiet for claimQuiet, so a burst of claims never
	// shares the machine with the creates it caused.
	lastClaim time.Time
	// removing bounds the removals under way (removals at once).
	removing chan struct{}
}

// claimQuiet is how long after a claim began refills wait.
const claimQuiet = 50 * time.Millisecond

// refillTimeout bounds one refill's create; claimTimeout one claim (its
// journal append, the warden's rekey, the rules applied by the proxy),
// after which the sandbox is discarded and the next tried.
const (
	refillTimeout = 5 * time.Minute
	claimTimeout  = 30 * time.Second
)

// removals bounds the pooled sandboxes removed at once.
const removals = 4

type pool[M comparable] struct {
	name string
	// ref is the image as configured (a tag or an ID), resolved at Open
	// to spec.Image.
	ref string
	// spec is what a pooled sandbox is made from: the pool's spec,
	// defaulted, its image pinned, kept, with nothing a claim sets.
	spec  spec.Sandbox
	key   string
	size  int
	ready []M // oldest first
	// filling counts the creates under way.
	filling    int
	warm, cold uint64
	failures   uint64
	lastErr    string
	backoff    time.Duration
	retryAt    time.Time
}

// hold counts one more piece of background work, called with mu held;
// false once the pools closed (unless they drain: a removal still runs).
func (ps *Pools[M]) hold(removal bool) bool {
	if ps.closed && !(removal && ps.draining) {
		return false
	}
	ps.busy++
	return true
}

// release ends what hold counted.
func (ps *Pools[M]) release() {
	ps.mu.Lock()
	ps.busy--
	if ps.busy == 0 {
		ps.idle.Broadcast()
	}
	ps.mu.Unlock()
}

// Gone forgets a sandbox whose actor stopped (removed by hand, or failed):
// a pool that held it is short by one, and refills.
func (ps *Pools[M]) Gone(sb M) {
	if ps.takeOut(sb) {
		ps.Poke()
	}
}

// Discard removes a pooled sandbox nobody will claim, in the background.
// Once the pools close it is left for the next runtime (a kept sandbox:
// re-adopted and taken back, or removed there), unless they drain.
func (ps *Pools[M]) Discard(sb M) {
	ps.mu.Lock()
	ok := ps.hold(true)
	ps.mu.Unlock()
	if !ok {
		return
	}
	go func() {
		defer ps.release()
		ps.removing <- struct{}{}
		defer func() { <-ps.removing }()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := ps.maker.Remove(ctx, sb); err != nil && !spec.IsCode(err, spec.CodeNotFound) && !spec.IsCode(err, spec.CodeCancelled) {
			ps.log.Warn("removing a pooled sandbox failed; the next Open removes it", "sandbox", ps.maker.ID(sb), "err", err)
		}
	}()
}

func (ps *Pools[M]) Poke() {
	select {
	case ps.kick <- struct{}{}:
	default:
	}
}

// loop starts refills while a pool is short and a token is free, one pool
// at a time in turn, and sleeps until a refill ends, a claim takes a
// sandbox, or a back-off ends.
func (ps *Pools[M]) loop(ctx context.Context) {
	defer close(ps.done)
	for {
		wait := ps.fill()
		var retry <-chan time.Time
		var t *time.Timer
		if wait > 0 {
			t = time.NewTimer(wait)
			retry = t.C
		}
		select {
		case <-ps.kick:
		case <-retry:
		case <-ctx.Done():
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// fill starts what refills it can and returns how long until a backed-off
// pool may try again (0: nothing waits on a clock).
func (ps *Pools[M]) fill() time.Duration {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var wait time.Duration
	if d := claimQuiet - time.Since(ps.lastClaim); d > 0 {
		return d
	}
	for started := true; started && !ps.closed; {
		started = false
		for _, p := range ps.order {
			if len(p.ready)+p.filling >= p.size {
				continue
			}
			if d := time.Until(p.retryAt); d > 0 {
				if wait == 0 || d < wait {
					wait = d
				}
				continue
			}
			select {
			case ps.sem <- struct{}{}:
			default:
				return wait // every token is taken: a refill's end kicks again
			}
			if !ps.hold(false) {
				<-ps.sem
				return 0
			}
			p.filling++
			started = true
			go ps.refill(p, p.spec, p.key)
		}
	}
	return wait
}

// refill makes one pooled sandbox for p.
func (ps *Pools[M]) refill(p *pool[M], s spec.Sandbox, key string) {
	defer ps.release()
	defer ps.Poke()
	defer func() { <-ps.sem }()
	// The create's outcome is awaited even when the pools close (close
	// waits for it): a sandbox made meanwhile is then left for the next
	// runtime, or removed by a Shutdown, never abandoned mid-create.
	mctx, cancel := context.WithTimeout(context.Background(), refillTimeout)
	defer cancel()
	sb, err := ps.maker.Make(mctx, p.name, s)
	ps.mu.Lock()
	p.filling--
	if err != nil {
		p.failures++
		p.lastErr = err.Error()
		p.backoff = min(max(2*p.backoff, poolBackoffMin), poolBackoffMax)
		p.retryAt = time.Now().Add(p.backoff)
		ps.mu.Unlock()
		ps.log.Warn("refilling a warm pool failed", "pool", p.name, "retry_in", p.backoff, "err", err)
		return
	}
	p.backoff, p.retryAt = 0, time.Time{}
	keep := !ps.closed && len(p.ready) < p.size && key == p.key
	if keep {
		ps.maker.Pooled(sb, p.name)
		p.ready = append(p.ready, sb)
	}
	ps.mu.Unlock()
	if !keep {
		ps.Discard(sb) // the pool shrank or was re-pinned, or the runtime closes, while it was made
	}
}

// Claim hands the caller a ready sandbox of the first pool whose key is
// full's, and the pool it came from, or reports none (a cold create
// follows; with countCold, counted cold for the first matching pool). A
// sandbox that cannot be claimed (not ready, stopped meanwhile, its rules
// not applied in time) is removed and the next is tried; only a journal
// that refuses the claim, or the caller's end, fails the create. The
// caller counts a warm claim (counted).
func (ps *Pools[M]) Claim(ctx context.Context, full spec.Sandbox, countCold bool) (M, string, error) {
	var none M
	if ps == nil {
		return none, "", nil
	}
	key := full.PoolKey()
	c := Claim{Lifetime: full.Lifetime, TTL: full.TTL, Env: full.Env, Dir: full.Dir, Labels: full.Labels, Secrets: full.Secrets}
	if full.Policy.Network == spec.NetworkAllowlist {
		c.Rules = full.Policy.Egress
	}
	for {
		ps.mu.Lock()
		var from, first *pool[M]
		for _, p := range ps.order {
			if p.key != key {
				continue
			}
			if first == nil {
				first = p
			}
			if len(p.ready) > 0 {
				from = p
				break
			}
		}
		if from == nil {
			if first != nil && countCold {
				first.cold++
			}
			ps.mu.Unlock()
			return none, "", nil
		}
		sb := from.ready[0]
		from.ready = slices.Delete(from.ready, 0, 1)
		ps.lastClaim = time.Now()
		ps.mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, claimTimeout)
		err, aerr := ps.maker.Claim(cctx, sb, c)
		cancel()
		ps.Poke()
		if aerr != nil {
			if ctx.Err() != nil {
				// The caller gave up: the claim, still in the actor's
				// mailbox or journaled, hands the sandbox to nobody.
				// The removal queued behind it takes it, claimed or not.
				ps.Discard(sb)
				return none, "", aerr
			}
			err = aerr
		}
		if err == nil {
			ps.maker.Pooled(sb, from.name)
			return sb, from.name, nil
		}
		ps.Discard(sb)
		if spec.IsCode(err, spec.CodeJournal) {
			// The journal refused the claim: nothing was handed out,
			// and the next sandbox would meet the same journal.
			return none, "", err
		}
		ps.log.Warn("a pooled sandbox could not be claimed; removing it", "sandbox", ps.maker.ID(sb), "pool", from.name, "err", err)
	}
}

// takeOut takes sb off its pool's ready list, if it is there.
func (ps *Pools[M]) takeOut(sb M) bool {
	if ps == nil {
		return false
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range ps.order {
		if i := slices.Index(p.ready, sb); i >= 0 {
			p.ready = slices.Delete(p.ready, i, i+1)
			return true
		}
	}
	return false
}

// Counted counts a claim from p that stands.
func (ps *Pools[M]) Counted(name string) {
	ps.mu.Lock()
	if p := ps.byName[name]; p != nil {
		p.warm++
	}
	ps.mu.Unlock()
}

// Unready forgets a pooled sandbox that can no longer be claimed and
// removes it; the pool makes another.
func (ps *Pools[M]) Unready(sb M) {
	if ps.takeOut(sb) {
		ps.log.Warn("a pooled sandbox can no longer be claimed; removing it", "sandbox", ps.maker.ID(sb))
		ps.Discard(sb)
		ps.Poke()
	}
}

// Pinned returns the image ID a pool resolved ref to at Open, when ref is
// a tag some pool was configured with.
func (ps *Pools[M]) Pinned(ref string) (string, bool) {
	if ps == nil || spec.IsImageID(ref) {
		return "", false
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, p := range ps.order {
		if p.ref == ref {
			return p.spec.Image, true
		}
	}
	return "", false
}

// Repin points the pools configured with tag ref at image id (the tag
// moved since Open): their ready sandboxes, of the old image, are removed
// and the refills make the new one. A pool whose spec would not take the
// new image keeps the old (requests by the tag then miss it).
func (ps *Pools[M]) Repin(ref, id string) {
	var old []M
	ps.mu.Lock()
	for _, p := range ps.order {
		if p.ref != ref || p.spec.Image == id {
			continue
		}
		s := p.spec
		s.Image = id
		if err := s.Validate(); err != nil {
			continue
		}
		ps.log.Info("an image tag moved: the pool follows it", "pool", p.name, "image", ref, "from", p.spec.Image, "to", id)
		p.spec, p.key = s, s.PoolKey()
		old = append(old, p.ready...)
		p.ready = nil
	}
	ps.mu.Unlock()
	for _, sb := range old {
		ps.Discard(sb)
	}
	ps.Poke()
}

// Info lists the pools.
func (ps *Pools[M]) Info() []host.PoolInfo {
	if ps == nil {
		return nil
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := make([]host.PoolInfo, 0, len(ps.order))
	for _, p := range ps.order {
		out = append(out, host.PoolInfo{Name: p.name, Image: p.spec.Image, Size: p.size, Ready: len(p.ready), Filling: p.filling,
			Warm: p.warm, Cold: p.cold, Failures: p.failures, LastError: p.lastErr})
	}
	return out
}

// Close stops the refills and waits for those under way; the pooled
// sandboxes stay for the next runtime (kept), unless drain removes them.
func (ps *Pools[M]) Close(drain bool) {
	if ps == nil {
		return
	}
	ps.mu.Lock()
	ps.closed, ps.draining = true, drain
	stop := ps.stop
	var ready []M
	for _, p := range ps.order {
		ready = append(ready, p.ready...)
		if drain {
			p.ready = nil
		}
	}
	ps.mu.Unlock()
	if stop != nil {
		stop()
		<-ps.done
	}
	if drain {
		for _, sb := range ready {
			ps.Discard(sb)
		}
	}
	ps.mu.Lock()
	for ps.busy > 0 {
		ps.idle.Wait()
	}
	ps.mu.Unlock()
}

// New makes the (empty) pools: before recovery, so that a recovered
// sandbox's end finds them; Open fills them after. refills 0 is
// DefaultRefills.
func New[M comparable](maker Maker[M], log *slog.Logger, refills int, warden bool) *Pools[M] {
	if refills == 0 {
		refills = DefaultRefills
	}
	ps := &Pools[M]{maker: maker, log: log, warden: warden, byName: map[string]*pool[M]{}, kick: make(chan struct{}, 1), done: make(chan struct{}),
		sem: make(chan struct{}, refills), removing: make(chan struct{}, removals)}
	ps.idle = sync.NewCond(&ps.mu)
	return ps
}

// Check judges the pools' shape before anything is touched: names, sizes
// and specs (whose images are resolved later, by Open).
func Check(ps []host.PoolSpec, refills int) error {
	bad := func(format string, args ...any) error {
		return spec.Errorf(spec.CodeInvalidArgument, "pool", format, args...)
	}
	if refills < 0 {
		return bad("PoolRefills %d is negative", refills)
	}
	seen := map[string]bool{}
	for i, p := range ps {
		if err := CheckName(p.Name); err != nil {
			return bad("pools[%d]: %v", i, err)
		}
		if seen[p.Name] {
			return bad("pool %q is named twice", p.Name)
		}
		seen[p.Name] = true
		if p.Size < 0 || p.Size > MaxSize {
			return bad("pool %q: size %d is outside 0..%d", p.Name, p.Size, MaxSize)
		}
		s := p.Sandbox
		switch {
		case s.TTL != 0, len(s.Env) > 0, s.Dir != "", len(s.Labels) > 0, s.Lifetime != "", len(s.Secrets) > 0:
			return bad("pool %q: lifetime, ttl, env, dir, labels and secrets are the claimant's, set at the claim; a pool's spec has none", p.Name)
		case len(s.Policy.Egress) > 0:
			return bad("pool %q: allowlist rules are the claimant's, set at the claim; a pool's spec has none", p.Name)
		}
		full := Sandbox(s)
		if err := full.ValidateUnpinned(); err != nil {
			return spec.Wrap(spec.CodeInvalidArgument, "pool", err, "pool %q", p.Name)
		}
		if err := profile.AdmitPolicy(full.Policy); err != nil {
			return spec.Wrap(spec.CodeOf(err), "pool", err, "pool %q", p.Name)
		}
	}
	return nil
}

// CheckName judges a pool's name: it is journaled and shown; 1 to 32 of
// [a-z0-9_-], starting with a letter or digit.
func CheckName(name string) error {
	if name == "" || len(name) > 32 {
		return fmt.Errorf("name %q is empty or over 32 bytes", name)
	}
	for i, c := range name {
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case (c == '-' || c == '_') && i > 0:
		default:
			return fmt.Errorf("name %q: only a-z, 0-9, - and _ (not first) are allowed", name)
		}
	}
	return nil
}

// Sandbox is the spec a pool's sandboxes are made from.
func Sandbox(s spec.Sandbox) spec.Sandbox {
	return spec.Sandbox{Image: s.Image, Policy: s.Policy, Datasets: s.Datasets, Lifetime: spec.Kept}.WithDefaults()
}

// Add adds a pool whose image is resolved: full is Sandbox(p.Sandbox) with
// the image pinned, ref the image as configured (a tag or an ID).
func (ps *Pools[M]) Add(name, ref string, size int, full spec.Sandbox) {
	pl := &pool[M]{name: name, ref: ref, spec: full, key: full.PoolKey(), size: size}
	ps.mu.Lock()
	ps.order = append(ps.order, pl)
	ps.byName[name] = pl
	ps.mu.Unlock()
}

// Found is a pooled sandbox recovery re-adopted, with its folded state.
type Found[M comparable] struct {
	Member M
	State  lifecycle.Sandbox
}

// Open takes the pooled sandboxes recovery re-adopted back into their
// pools, in the order they were made (the rest are removed), and starts
// the refills.
func (ps *Pools[M]) Open(found []Found[M]) {
	sort.Slice(found, func(i, k int) bool { return found[i].State.Reserved.Before(found[k].State.Reserved) })
	var unwanted []M
	defer func() {
		for _, m := range unwanted {
			ps.Discard(m)
		}
	}()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, f := range found {
		pl := ps.byName[f.State.Pool]
		why := ""
		switch {
		case len(ps.order) == 0:
			// A runtime with no pool at all (a CLI command's, while the
			// server is down) leaves them to the next one that has.
			continue
		case f.State.RulesVersion != 0:
			why = "it holds egress rules (a pooled sandbox's are its claimant's)"
		case pl == nil:
			why = "no pool of that name is configured"
		case f.State.Spec.PoolKey() != pl.key:
			why = "the pool's spec changed"
		case f.State.Phase != lifecycle.PhaseStarted || !f.State.Adopted:
			why = "it was not re-adopted"
		case ps.warden && f.State.Warden == nil:
			why = "its warden is lost"
		case len(pl.ready) >= pl.size:
			why = "the pool is full"
		}
		if why != "" {
			ps.log.Info("removing a pooled sandbox", "sandbox", ps.maker.ID(f.Member), "pool", f.State.Pool, "why", why)
			unwanted = append(unwanted, f.Member)
			continue
		}
		ps.maker.Pooled(f.Member, pl.name)
		pl.ready = append(pl.ready, f.Member)
	}
	if ps.closed {
		return
	}
	var lctx context.Context
	lctx, ps.stop = context.WithCancel(context.Background()) //nolint:gosec // G118: ps.stop is the cancel; Close calls it
	go ps.loop(lctx)
}

// Resize sets a pool's size. Growing starts refills; shrinking removes
// ready sandboxes past the new size (oldest first stay). Size 0 empties it.
func (ps *Pools[M]) Resize(ctx context.Context, name string, size int) error {
	if size < 0 || size > MaxSize {
		return spec.Errorf(spec.CodeInvalidArgument, "pool", "size %d is outside 0..%d", size, MaxSize)
	}
	if ps == nil {
		return spec.Errorf(spec.CodeNotFound, "pool", "no pool %q", name)
	}
	ps.mu.Lock()
	p := ps.byName[name]
	if p == nil {
		ps.mu.Unlock()
		return spec.Errorf(spec.CodeNotFound, "pool", "no pool %q", name)
	}
	p.size = size
	var extra []M
	if len(p.ready) > size {
		extra = slices.Clone(p.ready[size:])
		p.ready = p.ready[:size]
	}
	ps.mu.Unlock()
	var errs []error
	for _, m := range extra {
		if err := ps.maker.Remove(ctx, m); err != nil && !spec.IsCode(err, spec.CodeNotFound) {
			errs = append(errs, err)
		}
	}
	ps.Poke()
	return errors.Join(errs...)
}
