package stockade

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/stockade/stockade/profile"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/actors/sandbox"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// Warm pools: sandboxes made, verified and started ahead of demand (their
// reservation names the pool; the sandbox actor holds them pooled, admitting
// no work), claimed by a CreateSandbox whose spec has the same pool key.
// The claim is journaled on the sandbox's stream before the caller is
// answered; refills run in the background, at most Options.PoolRefills at
// a time, and a claim never waits for one: an empty pool means a cold
// create. Pooled sandboxes are kept sandboxes to recovery (re-adopted, or
// torn down), and a reopened runtime takes the re-adopted ones back into
// their pool before it refills.

// PoolSpec configures a warm pool (defined in host/).
type PoolSpec = host.PoolSpec

// PoolInfo is one line of Pools (defined in host/).
type PoolInfo = host.PoolInfo

// DefaultPoolRefills is how many pooled sandboxes are made at once, by
// default, across every pool.
const DefaultPoolRefills = 2

// MaxPoolSize bounds one pool.
const MaxPoolSize = 1000

// Bounds on the refill's back-off after a failed create.
const (
	poolBackoffMin = time.Second
	poolBackoffMax = 30 * time.Second
)

type pools struct {
	rt *Runtime
	mu sync.Mutex
	// order is the pools in the order they were given: a request claims
	// from the first matching pool with a ready sandbox.
	order  []*pool
	byName map[string]*pool
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

type pool struct {
	name string
	// ref is the image as configured (a tag or an ID), resolved at Open
	// to spec.Image.
	ref string
	// spec is what a pooled sandbox is made from: the pool's spec,
	// defaulted, its image pinned, kept, with nothing a claim sets.
	spec  spec.Sandbox
	key   string
	size  int
	ready []*Sandbox // oldest first
	// filling counts the creates under way.
	filling    int
	warm, cold uint64
	failures   uint64
	lastErr    string
	backoff    time.Duration
	retryAt    time.Time
}

// checkPools judges the pools' shape before anything is touched: names,
// sizes and specs (whose images are resolved later, by openPools).
func checkPools(ps []PoolSpec, refills int) error {
	bad := func(format string, args ...any) error {
		return spec.Errorf(spec.CodeInvalidArgument, "pool", format, args...)
	}
	if refills < 0 {
		return bad("PoolRefills %d is negative", refills)
	}
	seen := map[string]bool{}
	for i, p := range ps {
		if err := CheckPoolName(p.Name); err != nil {
			return bad("pools[%d]: %v", i, err)
		}
		if seen[p.Name] {
			return bad("pool %q is named twice", p.Name)
		}
		seen[p.Name] = true
		if p.Size < 0 || p.Size > MaxPoolSize {
			return bad("pool %q: size %d is outside 0..%d", p.Name, p.Size, MaxPoolSize)
		}
		s := p.Sandbox
		switch {
		case s.TTL != 0, len(s.Env) > 0, s.Dir != "", len(s.Labels) > 0, s.Lifetime != "":
			return bad("pool %q: lifetime, ttl, env, dir and labels are the claimant's, set at the claim; a pool's spec has none", p.Name)
		case len(s.Policy.Egress) > 0:
			return bad("pool %q: allowlist rules are the claimant's, set at the claim; a pool's spec has none", p.Name)
		}
		full := poolSandbox(s)
		if err := full.ValidateUnpinned(); err != nil {
			return spec.Wrap(spec.CodeInvalidArgument, "pool", err, "pool %q", p.Name)
		}
		if err := profile.AdmitPolicy(full.Policy); err != nil {
			return spec.Wrap(spec.CodeOf(err), "pool", err, "pool %q", p.Name)
		}
	}
	return nil
}

// CheckPoolName judges a pool's name as Open does (the CLI judges its
// flags with it before anything is opened): a pool's name is journaled
// and shown; 1 to 32 of [a-z0-9_-], starting with a letter or digit.
func CheckPoolName(name string) error {
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

// poolSandbox is the spec a pool's sandboxes are made from.
func poolSandbox(s SandboxSpec) spec.Sandbox {
	return spec.Sandbox{Image: s.Image, Policy: s.Policy, Datasets: s.Datasets, Lifetime: spec.Kept}.WithDefaults()
}

// openPools resolves the pools' images, takes the pooled sandboxes recovery
// re-adopted back into their pools (removing those no pool wants) and
// starts the refills.
func (rt *Runtime) openPools(ctx context.Context, opts Options) error {
	ps := rt.pools
	for _, p := range opts.Pools {
		full := poolSandbox(p.Sandbox)
		id, err := rt.engine.ResolveImage(ctx, full.Image)
		if err != nil {
			return spec.Wrap(spec.CodeOf(err), "pool", err, "pool %q", p.Name)
		}
		full.Image = id
		if err := full.Validate(); err != nil {
			return spec.Wrap(spec.CodeInvalidArgument, "pool", err, "pool %q", p.Name)
		}
		pl := &pool{name: p.Name, ref: p.Sandbox.Image, spec: full, key: full.PoolKey(), size: p.Size}
		ps.mu.Lock()
		ps.order = append(ps.order, pl)
		ps.byName[p.Name] = pl
		ps.mu.Unlock()
	}
	// The pooled sandboxes recovery re-adopted: back into their pool, in
	// the order they were made; the rest are removed.
	rt.mu.Lock()
	mine := make([]*Sandbox, 0, len(rt.sandboxes))
	for _, sb := range rt.sandboxes {
		mine = append(mine, sb)
	}
	rt.mu.Unlock()
	type pooled struct {
		sb *Sandbox
		st lifecycle.Sandbox
	}
	var found []pooled
	for _, sb := range mine {
		snap, err := sb.inspect(ctx)
		if err != nil || !snap.State.Pooled() {
			continue
		}
		found = append(found, pooled{sb, snap.State})
	}
	sort.Slice(found, func(i, k int) bool { return found[i].st.Reserved.Before(found[k].st.Reserved) })
	var unwanted []*Sandbox
	defer func() {
		for _, sb := range unwanted {
			ps.discard(sb)
		}
	}()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, f := range found {
		pl := ps.byName[f.st.Pool]
		why := ""
		switch {
		case len(ps.order) == 0:
			// A runtime with no pool at all (a CLI command's, while the
			// server is down) leaves them to the next one that has.
			continue
		case f.st.RulesVersion != 0:
			why = "it holds egress rules (a pooled sandbox's are its claimant's)"
		case pl == nil:
			why = "no pool of that name is configured"
		case f.st.Spec.PoolKey() != pl.key:
			why = "the pool's spec changed"
		case f.st.Phase != lifecycle.PhaseStarted || !f.st.Adopted:
			why = "it was not re-adopted"
		case rt.deps.Config.Warden && f.st.Warden == nil:
			why = "its warden is lost"
		case len(pl.ready) >= pl.size:
			why = "the pool is full"
		}
		if why != "" {
			rt.log.Info("removing a pooled sandbox", "sandbox", f.sb.id, "pool", f.st.Pool, "why", why)
			unwanted = append(unwanted, f.sb)
			continue
		}
		f.sb.setPool(pl.name)
		pl.ready = append(pl.ready, f.sb)
	}
	if ps.closed {
		return nil
	}
	var lctx context.Context
	lctx, ps.stop = context.WithCancel(context.Background())
	go ps.loop(lctx)
	return nil
}

// newPools makes the runtime's (empty) pools before recovery, so a
// recovered sandbox's end finds them; openPools fills them after.
func newPools(rt *Runtime, opts Options) *pools {
	refills := opts.PoolRefills
	if refills == 0 {
		refills = DefaultPoolRefills
	}
	ps := &pools{rt: rt, byName: map[string]*pool{}, kick: make(chan struct{}, 1), done: make(chan struct{}), sem: make(chan struct{}, refills),
		removing: make(chan struct{}, removals)}
	ps.idle = sync.NewCond(&ps.mu)
	return ps
}

// hold counts one more piece of background work, called with mu held;
// false once the pools closed (unless they drain: a removal still runs).
func (ps *pools) hold(removal bool) bool {
	if ps.closed && !(removal && ps.draining) {
		return false
	}
	ps.busy++
	return true
}

// release ends what hold counted.
func (ps *pools) release() {
	ps.mu.Lock()
	ps.busy--
	if ps.busy == 0 {
		ps.idle.Broadcast()
	}
	ps.mu.Unlock()
}

// gone forgets a sandbox whose actor stopped (removed by hand, or failed):
// a pool that held it is short by one, and refills.
func (ps *pools) gone(sb *Sandbox) {
	if ps.takeOut(sb) {
		ps.poke()
	}
}

// discard removes a pooled sandbox nobody will claim, in the background.
// Once the pools close it is left for the next runtime (a kept sandbox:
// re-adopted and taken back, or removed there), unless they drain.
func (ps *pools) discard(sb *Sandbox) {
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
		if err := sb.Remove(ctx); err != nil && !spec.IsCode(err, spec.CodeNotFound) && !spec.IsCode(err, spec.CodeCancelled) {
			ps.rt.log.Warn("removing a pooled sandbox failed; the next Open removes it", "sandbox", sb.id, "err", err)
		}
	}()
}

func (ps *pools) poke() {
	select {
	case ps.kick <- struct{}{}:
	default:
	}
}

// loop starts refills while a pool is short and a token is free, one pool
// at a time in turn, and sleeps until a refill ends, a claim takes a
// sandbox, or a back-off ends.
func (ps *pools) loop(ctx context.Context) {
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
func (ps *pools) fill() time.Duration {
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
func (ps *pools) refill(p *pool, s spec.Sandbox, key string) {
	defer ps.release()
	defer ps.poke()
	defer func() { <-ps.sem }()
	// The create's outcome is awaited even when the pools close (close
	// waits for it): a sandbox made meanwhile is then left for the next
	// runtime, or removed by a Shutdown, never abandoned mid-create.
	mctx, cancel := context.WithTimeout(context.Background(), refillTimeout)
	defer cancel()
	sb, err := ps.rt.makePooled(mctx, p.name, s)
	ps.mu.Lock()
	p.filling--
	if err != nil {
		p.failures++
		p.lastErr = err.Error()
		p.backoff = min(max(2*p.backoff, poolBackoffMin), poolBackoffMax)
		p.retryAt = time.Now().Add(p.backoff)
		ps.mu.Unlock()
		ps.rt.log.Warn("refilling a warm pool failed", "pool", p.name, "retry_in", p.backoff, "err", err)
		return
	}
	p.backoff, p.retryAt = 0, time.Time{}
	keep := !ps.closed && len(p.ready) < p.size && key == p.key
	if keep {
		sb.setPool(p.name)
		p.ready = append(p.ready, sb)
	}
	ps.mu.Unlock()
	if !keep {
		ps.discard(sb) // the pool shrank or was re-pinned, or the runtime closes, while it was made
	}
}

// makePooled creates one sandbox of s for pool name and waits until it is
// pooled.
func (rt *Runtime) makePooled(ctx context.Context, name string, s spec.Sandbox) (*Sandbox, error) {
	sid, err := journal.NewID()
	if err != nil {
		return nil, err
	}
	return rt.make(ctx, sandbox.Params{ID: sid, Spec: s, Pool: name})
}

// claim hands the caller a ready sandbox of the first pool whose key is
// full's, and the pool it came from, or reports none (a cold create
// follows; with countCold, counted cold for the first matching pool). A
// sandbox that cannot be claimed (not ready, stopped meanwhile, its rules
// not applied in time) is removed and the next is tried; only a journal
// that refuses the claim, or the caller's end, fails the create. The
// caller counts a warm claim (counted).
func (ps *pools) claim(ctx context.Context, full spec.Sandbox, countCold bool) (*Sandbox, *pool, error) {
	if ps == nil {
		return nil, nil, nil
	}
	key := full.PoolKey()
	c := sandbox.Claim{Lifetime: full.Lifetime, TTL: full.TTL, Env: full.Env, Dir: full.Dir, Labels: full.Labels}
	if full.Policy.Network == spec.NetworkAllowlist {
		c.Rules = full.Policy.Egress
	}
	for {
		ps.mu.Lock()
		var from, first *pool
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
			return nil, nil, nil
		}
		sb := from.ready[0]
		from.ready = slices.Delete(from.ready, 0, 1)
		ps.lastClaim = time.Now()
		ps.mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, claimTimeout)
		err, aerr := ask(cctx, sb, func(r chan<- error) any { c.Reply = r; return c }, nil)
		cancel()
		ps.poke()
		if aerr != nil {
			if ctx.Err() != nil {
				// The caller gave up: the claim, still in the actor's
				// mailbox or journaled, hands the sandbox to nobody.
				// The removal queued behind it takes it, claimed or not.
				ps.discard(sb)
				return nil, nil, aerr
			}
			err = aerr
		}
		if err == nil {
			sb.setPool(from.name)
			return sb, from, nil
		}
		ps.discard(sb)
		if spec.IsCode(err, spec.CodeJournal) {
			// The journal refused the claim: nothing was handed out,
			// and the next sandbox would meet the same journal.
			return nil, nil, err
		}
		ps.rt.log.Warn("a pooled sandbox could not be claimed; removing it", "sandbox", sb.id, "pool", from.name, "err", err)
	}
}

// takeOut takes sb off its pool's ready list, if it is there.
func (ps *pools) takeOut(sb *Sandbox) bool {
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

// counted counts a claim from p that stands.
func (ps *pools) counted(p *pool) {
	ps.mu.Lock()
	p.warm++
	ps.mu.Unlock()
}

// unready forgets a pooled sandbox that can no longer be claimed and
// removes it; the pool makes another.
func (ps *pools) unready(sb *Sandbox) {
	if ps.takeOut(sb) {
		ps.rt.log.Warn("a pooled sandbox can no longer be claimed; removing it", "sandbox", sb.id)
		ps.discard(sb)
		ps.poke()
	}
}

// pinned returns the image ID a pool resolved ref to at Open, when ref is
// a tag some pool was configured with.
func (ps *pools) pinned(ref string) (string, bool) {
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

// repin points the pools configured with tag ref at image id (the tag
// moved since Open): their ready sandboxes, of the old image, are removed
// and the refills make the new one. A pool whose spec would not take the
// new image keeps the old (requests by the tag then miss it).
func (ps *pools) repin(ref, id string) {
	var old []*Sandbox
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
		ps.rt.log.Info("an image tag moved: the pool follows it", "pool", p.name, "image", ref, "from", p.spec.Image, "to", id)
		p.spec, p.key = s, s.PoolKey()
		old = append(old, p.ready...)
		p.ready = nil
	}
	ps.mu.Unlock()
	for _, sb := range old {
		ps.discard(sb)
	}
	ps.poke()
}

// info lists the pools.
func (ps *pools) info() []PoolInfo {
	if ps == nil {
		return nil
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := make([]PoolInfo, 0, len(ps.order))
	for _, p := range ps.order {
		out = append(out, PoolInfo{Name: p.name, Image: p.spec.Image, Size: p.size, Ready: len(p.ready), Filling: p.filling,
			Warm: p.warm, Cold: p.cold, Failures: p.failures, LastError: p.lastErr})
	}
	return out
}

// close stops the refills and waits for those under way; the pooled
// sandboxes stay for the next runtime (kept), unless drain removes them.
func (ps *pools) close(drain bool) {
	if ps == nil {
		return
	}
	ps.mu.Lock()
	ps.closed, ps.draining = true, drain
	stop := ps.stop
	var ready []*Sandbox
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
			ps.discard(sb)
		}
	}
	ps.mu.Lock()
	for ps.busy > 0 {
		ps.idle.Wait()
	}
	ps.mu.Unlock()
}

// Pools lists the runtime's warm pools: their size, what is ready and
// being made, and the claims served warm and cold since Open.
func (rt *Runtime) Pools(ctx context.Context) ([]PoolInfo, error) {
	if err := rt.usable(); err != nil {
		return nil, err
	}
	return rt.pools.info(), nil
}

// ResizePool sets a pool's size. Growing starts refills; shrinking removes
// ready sandboxes past the new size (oldest first stay). Size 0 empties it.
func (rt *Runtime) ResizePool(ctx context.Context, name string, size int) error {
	if err := rt.usable(); err != nil {
		return err
	}
	if size < 0 || size > MaxPoolSize {
		return spec.Errorf(spec.CodeInvalidArgument, "pool", "size %d is outside 0..%d", size, MaxPoolSize)
	}
	ps := rt.pools
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
	var extra []*Sandbox
	if len(p.ready) > size {
		extra = slices.Clone(p.ready[size:])
		p.ready = p.ready[:size]
	}
	ps.mu.Unlock()
	var errs []error
	for _, sb := range extra {
		if err := sb.Remove(ctx); err != nil && !spec.IsCode(err, spec.CodeNotFound) {
			errs = append(errs, err)
		}
	}
	ps.poke()
	return errors.Join(errs...)
}
