// Package core is the runtime behind the root package's facade: it composes
// the journal, the engine, the actor system and the recorder (Open), keeps
// the registry of live sandboxes and the ones taken out of service, fans
// Docker's events in to the sandbox actors, runs recovery, and wires the
// warm pools, the checkpoint store, the read views and the metrics. The
// root (package stockade) is what a user imports; every one of its methods
// is one line over this package.
package core

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/helpers"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/actors"
	"github.com/stockade/stockade/internal/actors/sandbox"
	"github.com/stockade/stockade/internal/pool"
	"github.com/stockade/stockade/internal/recovery"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/metrics"
	"github.com/stockade/stockade/profile"
	"github.com/stockade/stockade/recorder"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/statedir"
	"github.com/stockade/stockade/tracing"
)

// Options are stockade.Options, copied field by field by the root (each
// field is documented there).
type Options struct {
	Journal              string
	Owner                string
	Profile              string
	Logger               *slog.Logger
	Engine               dockerio.Engine
	WardenBinary         string
	EgressBinary         string
	StopGrace            time.Duration
	HighWaterMark        int
	OutputQuota          int64
	LockTimeout          time.Duration
	StopAdoptedProcesses bool
	RecoveryTimeout      time.Duration
	Record               spec.Record
	Pools                []host.PoolSpec
	PoolRefills          int
	CheckpointBytes      int64
	NoChanges            bool
	UsageEvery           time.Duration
	TracerProvider       trace.TracerProvider
	MetricLabels         []string
}

// DefaultUsageEvery is the usage ledger's sampling interval when
// Options.UsageEvery is zero.
const DefaultUsageEvery = 10 * time.Second

// Runtime is an open stockade runtime: one journal, one Docker daemon.
type Runtime struct {
	journal *journal.Journal
	engine  dockerio.Engine
	closer  func() error
	sys     *actors.System
	deps    *actors.Deps
	log     *slog.Logger
	// recorder keeps every process's output beside the journal.
	recorder *recorder.Store
	// tracer makes the runtime's spans (trace.go); procSpans are the
	// running processes' (they take egress decisions as events).
	tracer    trace.Tracer
	procSpans processSpans
	// usageLabels are the sandbox label keys the usage metrics carry.
	usageLabels []string

	mu        sync.Mutex
	sandboxes map[string]*Sandbox
	closed    bool
	// done is closed by Close: the attaches under way end with it.
	done chan struct{}
	// profile is the profile name Open was given (Doctor checks it).
	profile  string
	recovery host.RecoveryReport
	// unreconciled holds the sandboxes taken out of service: recovery could
	// not observe them or fold their journal, or their actor failed.
	unreconciled map[string]unreconciled
	// stopEvents ends the event watcher; eventsDone is closed when it has.
	stopEvents context.CancelFunc
	eventsDone chan struct{}

	// metrics is made at the first Metrics call (most runtimes never
	// export any): a journal follower is not free.
	metricsOnce sync.Once
	metrics     *metrics.Metrics
	metricsErr  error
	// metricsOn is metrics once made, for the recorders of figures that
	// come as they happen (no metrics: nothing recorded).
	metricsOn atomic.Pointer[metrics.Metrics]

	// pools are the warm pools (pool.go); nil when none is configured.
	pools *pool.Pools[*Sandbox]

	// ckpt is the checkpoint store (checkpoints.go), opened at first use;
	// ckptLimit its bound.
	ckpt      checkpointStore
	ckptLimit int64

	// noChanges runs every process untracked (Options.NoChanges).
	noChanges bool

	// unanswered lists the asks removed sandboxes left open (Unanswered).
	unanswered []string
}

// Unanswered lists the asks (a launch, a rollback) that a sandbox still
// held when it was removed: each was answered with an internal error then,
// instead of when its work ended. Every ask must be answered or refused on
// its own: a non-empty list is a runtime defect (the tests and the drill
// fail on one).
func (rt *Runtime) Unanswered() []string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return append([]string(nil), rt.unanswered...)
}

// Open opens (or creates) the journal, takes its lock, checks the daemon
// against the profile and the journal's identity, starts the actor system
// and recovers: every entity an earlier runtime left live is reconciled
// with what Docker shows (see Recovery for the report) before Open returns.
// A journal that is a copy (journal.CopyTo) is refused (identity_mismatch):
// a copy is never a second runtime.
func Open(ctx context.Context, opts Options) (*Runtime, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	path := opts.Journal
	if path == "" {
		var err error
		if path, err = statedir.DefaultJournal(); err != nil {
			return nil, err
		}
	}
	if err := opts.Record.Validate(); err != nil {
		return nil, err
	}
	if err := pool.Check(opts.Pools, opts.PoolRefills); err != nil {
		return nil, err
	}
	// The profile is checked before the journal is touched: a bad one
	// creates no file.
	engine, closer, err := engineFor(opts)
	if err != nil {
		return nil, err
	}
	j, err := journal.Open(path, journal.Options{Owner: opts.Owner, LockTimeout: opts.LockTimeout})
	if err != nil {
		if closer != nil {
			_ = closer() // the engine's connection; the Open error is the one reported
		}
		return nil, err
	}
	rt := &Runtime{journal: j, engine: engine, closer: closer, log: log, sandboxes: map[string]*Sandbox{}, unreconciled: map[string]unreconciled{},
		ckptLimit: opts.CheckpointBytes, done: make(chan struct{}), profile: opts.Profile, noChanges: opts.NoChanges}
	tp := opts.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider() // the no-op one unless the program installed its own
	}
	rt.tracer = tp.Tracer(tracing.Name)
	rt.usageLabels = slices.Clone(opts.MetricLabels)
	fail := func(err error) (*Runtime, error) {
		// err is the one reported.
		if rt.closer != nil {
			_ = rt.closer()
		}
		_ = j.Close()
		return nil, err
	}
	// Made under the journal's lock: one runtime writes recordings.
	rec, err := recorder.Open(statedir.Recordings(j.Path()), opts.Record, log)
	if err != nil {
		return fail(err)
	}
	rt.recorder = rec
	daemon, err := rt.engine.Preflight(ctx)
	if err != nil {
		return fail(err)
	}
	if err := j.BindDaemon(ctx, daemon.ID); err != nil {
		return fail(err)
	}
	sys, err := actors.NewSystem(log, func(name string, reason any) {
		if id, ok := strings.CutPrefix(name, "sandbox-"); ok {
			rt.unreconcile(id, spec.Errorf(spec.CodeInternal, "runtime", "the actor of sandbox %s failed: %v", id, reason))
		}
	})
	if err != nil {
		return fail(err)
	}
	rt.sys = sys
	var aj actors.Journal = j
	if WrapJournal != nil {
		aj = WrapJournal(j)
	}
	d := actors.Deps{Journal: aj, Engine: rt.engine, Log: log, Recorder: rec, Config: actors.Config{
		Owner: j.Owner(), Profile: daemon.Profile, Revision: daemon.Revision,
		StopGrace: opts.StopGrace, HighWaterMark: opts.HighWaterMark, OutputQuota: opts.OutputQuota,
		WardensDelivered: hasWarden(rt.engine), UsageEvery: usageEvery(opts.UsageEvery),
	}, Decided: rt.procSpans.decided}.WithDefaults()
	rt.deps = &d
	// Die events since before recovery observed Docker are replayed to the
	// watcher, so a workload that dies in between is not missed.
	opened := time.Now()
	unsealed, err := rec.Unsealed()
	if err != nil {
		log.Warn("listing unsealed recordings", "err", err)
	}
	unsealed = rt.sealEnded(unsealed)
	rt.pools = pool.New[*Sandbox](poolMaker{rt}, log, opts.PoolRefills, rt.deps.Config.WardensDelivered)
	rctx, rsp := rt.startSpan(ctx, "stockade.recovery", journal.Key{Kind: journal.KindRuntime, ID: "recovery"})
	err = rt.recover(rctx, opts)
	rsp.s.SetAttributes(attribute.Int("stockade.recovery.sandboxes", len(rt.recovery.Sandboxes)),
		attribute.Int("stockade.recovery.processes", rt.recovery.Processes), attribute.Int("stockade.recovery.orphans", len(rt.recovery.Orphans)))
	rsp.end(err)
	if err != nil {
		sys.Shutdown(30 * time.Second)
		return fail(err)
	}
	rt.sealEnded(unsealed)
	var wctx context.Context
	wctx, rt.stopEvents = context.WithCancel(context.Background())
	rt.eventsDone = make(chan struct{})
	go rt.watchEvents(wctx, opened)
	// After recovery: the pooled sandboxes it re-adopted are taken back
	// before any refill (or removed, when no pool wants them).
	if err := rt.openPools(ctx, opts); err != nil {
		_ = rt.Close() // the pool's error is the one reported
		return nil, err
	}
	return rt, nil
}

// WrapJournal, set only by tests, wraps the journal the actors of the
// runtimes opened after append to (to fail or delay appends).
var WrapJournal func(actors.Journal) actors.Journal

// engineFor returns opts.Engine, or the Docker adapter for the profile
// opts names ("" reads $STOCKADE_PROFILE, else the default linux-x64) with
// its closer. The adapter's helpers are resolved here (helpers.Locate: the
// option, the variable, else the embedded binary) and installed under the
// journal's directory when a sandbox first needs them, so Open writes
// nothing for them and PlanRecovery, which delivers none, never does.
func engineFor(opts Options) (dockerio.Engine, func() error, error) {
	if opts.Engine != nil {
		return opts.Engine, nil, nil
	}
	if _, err := profile.Select(opts.Profile); err != nil {
		return nil, nil, err
	}
	path := opts.Journal
	if path == "" {
		var err error
		if path, err = statedir.DefaultJournal(); err != nil {
			return nil, nil, err
		}
	}
	dir := statedir.Helpers(path)
	w, err := helpers.Locate(helpers.Warden, opts.WardenBinary, dir)
	if err != nil {
		return nil, nil, err
	}
	dopts := dockerio.Options{Profile: opts.Profile, WardenBinary: w}
	// The proxy is needed only by allowlist sandboxes: a runtime without
	// it (no artifact for this GOARCH and none named) still serves the
	// others, and an allowlist create says what is missing. A named binary
	// that is missing or wrong fails Open, as a named warden does: a typo
	// in $STOCKADE_EGRESS must not pass as "no proxy".
	named := opts.EgressBinary != "" || os.Getenv(helpers.Egress.Env) != ""
	e, err := helpers.Locate(helpers.Egress, opts.EgressBinary, dir)
	switch {
	case err == nil:
		dopts.EgressBinary = e
	case named || !spec.IsCode(err, spec.CodeNotFound):
		return nil, nil, err
	}
	ad, err := dockerio.NewAdapter(dopts)
	if err != nil {
		return nil, nil, err
	}
	return ad, ad.Close, nil
}

// Owner is the journal's owner id; it labels every Docker resource this
// runtime makes.
func (rt *Runtime) Owner() string { return rt.journal.Owner() }

// CreateSandbox makes a sandbox and starts its workload. It returns once the
// sandbox is started and verified, or with the error that stopped it (and
// nothing left behind).
func (rt *Runtime) CreateSandbox(ctx context.Context, s spec.Sandbox) (*Sandbox, error) {
	ctx, sp := rt.startSpan(ctx, "stockade.sandbox.create", journal.Key{}, attribute.String("stockade.image", s.Image))
	sb, err := rt.createSandbox(ctx, s, sp)
	if sb != nil {
		sb.mu.Lock()
		path, pool := "cold", sb.pool
		if sb.warm {
			path = "warm"
		}
		sb.mu.Unlock()
		sp.setKey(journal.Key{Kind: journal.KindSandbox, ID: sb.id})
		sp.s.SetAttributes(attribute.String("stockade.create.path", path), attribute.String("stockade.pool", pool))
	}
	sp.end(err)
	return sb, err
}

func (rt *Runtime) createSandbox(ctx context.Context, s spec.Sandbox, sp *span) (*Sandbox, error) {
	if err := rt.usable(); err != nil {
		return nil, err
	}
	asked := time.Now()
	// The spec as asked; From is resolved (a name to the checkpoint's id)
	// before it is set.
	full := s
	full.From = ""
	full = full.WithDefaults()
	if s.From != "" {
		if err := rt.fromCheckpoint(&full, s.From); err != nil {
			return nil, err
		}
	}
	// The whole spec is judged before the first Docker call or journal
	// append: bad input costs nothing and leaves nothing to recover.
	if err := full.ValidateUnpinned(); err != nil {
		return nil, err
	}
	if err := profile.AdmitPolicy(full.Policy); err != nil {
		return nil, err
	}
	var sb *Sandbox
	var err error
	if full.From == "" {
		sb, err = rt.claimOrResolve(ctx, &full, s.Image)
	} else if full.Image, err = rt.engine.ResolveImage(ctx, s.Image); err == nil {
		// A checkpoint's workspace is written into a sandbox of its own:
		// never a pool's, whose workspace is the image's.
		err = full.Validate()
	}
	if err != nil {
		return nil, err
	}
	if sb == nil {
		sid, err := journal.NewID()
		if err != nil {
			return nil, err
		}
		var deadline time.Time
		if full.TTL > 0 {
			deadline = rt.deps.Now().Add(full.TTL)
		}
		if sb, err = rt.make(ctx, sandbox.Params{ID: sid, Spec: full, Deadline: deadline, Span: sp.s}); err != nil {
			return nil, err
		}
	}
	if full.From != "" {
		if err := sb.rollback(ctx, full.From, true); err != nil {
			if rerr := sb.Remove(context.WithoutCancel(ctx)); rerr != nil {
				rt.log.Warn("removing a sandbox whose checkpoint could not be restored failed", "sandbox", sb.id, "err", rerr)
			}
			return nil, err
		}
	}
	sb.handedOut(asked)
	return sb, nil
}

// claimOrResolve pins full's image (ref, a tag or an ID) and claims a
// pooled sandbox of full's key, if a pool has one ready (nil: a cold
// create follows, with full.Image pinned). A tag a pool was configured
// with is resolved beside the claim, not before it: the claim goes by the
// pool's pin, and stands only if Docker resolves the tag to the same
// image; a tag moved since Open discards the claimed sandbox (its claim
// journaled, then its removal) and claims again by what it resolves to.
func (rt *Runtime) claimOrResolve(ctx context.Context, full *spec.Sandbox, ref string) (*Sandbox, error) {
	var id string
	var err error
	if pin, ok := rt.pools.Pinned(ref); ok {
		resolved := make(chan error, 1)
		go func() {
			var rerr error
			id, rerr = rt.engine.ResolveImage(ctx, ref)
			resolved <- rerr
		}()
		guess := *full
		guess.Image = pin
		if guess.Validate() == nil {
			sb, from, cerr := rt.pools.Claim(ctx, guess, false)
			err = <-resolved
			switch {
			case err != nil:
				if sb != nil {
					rt.pools.Discard(sb)
				}
				return nil, err
			case id == pin:
				full.Image = pin
				if sb != nil {
					rt.pools.Counted(from)
					return sb, nil
				}
				if cerr != nil {
					return nil, cerr
				}
				// None was ready a moment ago: claimed again below by the
				// key (one may be ready now), counted cold if not.
			default:
				// The tag moved: the pools follow it, and this request
				// claims by what it names now.
				if sb != nil {
					rt.log.Info("an image tag moved since the pool resolved it; the claimed sandbox is discarded", "image", ref, "pool", from, "sandbox", sb.id)
					rt.pools.Discard(sb)
				}
				rt.pools.Repin(ref, id)
			}
		} else {
			err = <-resolved
		}
	} else {
		id, err = rt.engine.ResolveImage(ctx, ref)
	}
	if err != nil {
		return nil, err
	}
	full.Image = id
	if err := full.Validate(); err != nil {
		return nil, err
	}
	sb, from, err := rt.pools.Claim(ctx, *full, true)
	if sb != nil {
		rt.pools.Counted(from)
	}
	return sb, err
}

// make spawns a sandbox actor that creates p's sandbox and waits for the
// outcome.
func (rt *Runtime) make(ctx context.Context, p sandbox.Params) (*Sandbox, error) {
	sid := p.ID
	created := make(chan error, 1)
	p.Created = created
	sb, err := rt.spawn(p)
	if err != nil {
		return nil, err
	}
	select {
	case err := <-created:
		if err != nil {
			// The actor has rolled back what was made (or says what it
			// could not remove).
			return nil, err
		}
		return sb, nil
	case <-sb.gone:
		select {
		case err := <-created: // answered just before it stopped
			if err != nil {
				return nil, err
			}
			return sb, nil
		default:
		}
		// The actor stopped mid-create (the runtime closed, or it failed):
		// the journal holds the reservation for recovery.
		return nil, sb.goneErr()
	case <-ctx.Done():
		// The create goes on in the actor; the sandbox can be found by id.
		return nil, spec.Wrap(spec.CodeCancelled, "sandbox", ctx.Err(), "creating sandbox %s (it may still be made: see Sandboxes)", sid)
	}
}

// spawn starts a sandbox actor and registers its handle until it is gone.
func (rt *Runtime) spawn(p sandbox.Params) (*Sandbox, error) {
	sb := &Sandbox{rt: rt, id: p.ID, gone: make(chan struct{})}
	p.Unready = func() { rt.pools.Unready(sb) }
	p.Unanswered = func(asks []string) {
		rt.mu.Lock()
		for _, a := range asks {
			rt.unanswered = append(rt.unanswered, p.ID+": "+a)
		}
		rt.mu.Unlock()
	}
	p.Gone = func() {
		rt.pools.Gone(sb)
		if rt.usable() == nil {
			rt.unreconcile(p.ID, spec.Errorf(spec.CodeInternal, "runtime", "the actor of sandbox %s stopped before the sandbox was removed", p.ID))
		}
		rt.mu.Lock()
		close(sb.gone)
		if rt.sandboxes[p.ID] == sb {
			delete(rt.sandboxes, p.ID)
		}
		rt.mu.Unlock()
	}
	// Listed before its actor runs (the lock is held across the spawn, and
	// Gone waits for it): a create in flight is listed from its first
	// step, and an actor that stops at once is unlisted by Gone after.
	rt.mu.Lock()
	defer rt.mu.Unlock()
	pid, err := rt.sys.Spawn(sandbox.Props(rt.deps, p), "sandbox-"+p.ID)
	if err != nil {
		return nil, err
	}
	sb.pid = pid
	rt.sandboxes[p.ID] = sb
	return sb, nil
}

func (rt *Runtime) usable() error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.closed {
		return spec.Errorf(spec.CodeCancelled, "runtime", "the runtime is closed")
	}
	return nil
}

// Sandbox returns a live sandbox by id: one this runtime made, or one it
// recovered (re-adopted, or exited and kept).
func (rt *Runtime) Sandbox(id string) (*Sandbox, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if sb, ok := rt.sandboxes[id]; ok {
		return sb, nil
	}
	if u, ok := rt.unreconciled[id]; ok {
		return nil, u.err(id)
	}
	return nil, spec.Errorf(spec.CodeNotFound, "runtime", "no live sandbox %s", id)
}

// unreconciled is a sandbox taken out of service: listed, refused for work,
// its journal left as it is for the next Open to reconcile.
type unreconciled struct {
	state lifecycle.Sandbox
	why   error
}

func (u unreconciled) err(id string) error {
	return spec.Wrap(spec.CodeUnreconciled, "runtime", u.why, "sandbox %s is out of service until a later Open reconciles it", id)
}

// unreconcile takes a live sandbox out of service (its actor failed or gave
// up): it stays listed and refused for work rather than vanish while its
// workload may still run, and its journal is left for the next Open. A
// sandbox whose journal shows it removed, or never reserved, is simply gone.
func (rt *Runtime) unreconcile(id string, why error) {
	st, err := recovery.FoldSandbox(rt.journal, id)
	if err == nil && (st.Phase == lifecycle.PhaseNone || st.Phase == lifecycle.PhaseRemoved) {
		return
	}
	if err != nil && st.Phase == lifecycle.PhaseNone && spec.IsCode(err, spec.CodeNotFound) {
		return // never journaled: nothing was made
	}
	st.ID = id
	rt.mu.Lock()
	if u, ok := rt.unreconciled[id]; ok && u.why != nil {
		why = errors.Join(u.why, why)
	}
	rt.unreconciled[id] = unreconciled{state: st, why: why}
	rt.mu.Unlock()
	rt.log.Warn("sandbox taken out of service", "sandbox", id, "err", why)
}

// Sandboxes lists the live sandboxes (made or recovered by this runtime),
// sorted by reservation time.
func (rt *Runtime) Sandboxes(ctx context.Context) ([]host.SandboxInfo, error) {
	rt.mu.Lock()
	mine := make([]*Sandbox, 0, len(rt.sandboxes))
	for _, sb := range rt.sandboxes {
		mine = append(mine, sb)
	}
	rt.mu.Unlock()
	var out []host.SandboxInfo
	listed := map[string]bool{}
	for _, sb := range mine {
		snap, err := sb.inspect(ctx)
		if err != nil {
			if spec.IsCode(err, spec.CodeNotFound) || spec.IsCode(err, spec.CodeUnreconciled) {
				continue // removed meanwhile, or out of service: listed below
			}
			return nil, err
		}
		s := snap.State
		listed[s.ID] = true
		out = append(out, host.SandboxInfo{ID: s.ID, Phase: s.Shown(), Image: s.Spec.Image, Lifetime: s.Spec.Lifetime, Adopted: s.Adopted,
			Processes: snap.Processes, Reserved: s.Reserved, Pool: s.Pool, Labels: s.Spec.Labels, Claimed: s.Claimed})
	}
	rt.mu.Lock()
	for id, u := range rt.unreconciled {
		if listed[id] {
			continue // it failed after it answered: listed once, as it was
		}
		s := u.state
		out = append(out, host.SandboxInfo{ID: s.ID, Phase: s.Shown(), Image: s.Spec.Image, Lifetime: s.Spec.Lifetime, Reserved: s.Reserved,
			Pool: s.Pool, Labels: s.Spec.Labels, Claimed: s.Claimed, Unreconciled: true, Why: u.why.Error()})
	}
	rt.mu.Unlock()
	sort.Slice(out, func(i, k int) bool { return out[i].Reserved.Before(out[k].Reserved) })
	return out, nil
}

// Close stops the actor system and releases the journal, leaving kept
// sandboxes running (a later runtime finds them in the journal). Processes
// still running lose their attachment.
func (rt *Runtime) Close() error {
	rt.mu.Lock()
	if rt.closed {
		rt.mu.Unlock()
		return nil
	}
	rt.closed = true
	rt.mu.Unlock()
	close(rt.done)
	// The pooled sandboxes stay (kept) for the next runtime to take back.
	rt.pools.Close(false)
	rt.stopEvents()
	<-rt.eventsDone
	rt.sys.Shutdown(30 * time.Second)
	// The actors stopped closed every stream: their read loops end now
	// (bounded: one stuck in a socket read is left behind, not waited
	// for forever).
	loops := make(chan struct{})
	go func() {
		if rt.deps != nil && rt.deps.Loops != nil {
			rt.deps.Loops.Wait()
		}
		close(loops)
	}()
	select {
	case <-loops:
	case <-time.After(10 * time.Second):
		rt.log.Warn("output read loops still running after close")
	}
	var err error
	if rt.closer != nil {
		err = rt.closer()
	}
	if jerr := rt.journal.Close(); err == nil {
		err = jerr
	}
	return err
}

// Shutdown stops every sandbox of this runtime (exited, resources kept;
// one-shot sandboxes are removed), then closes the runtime.
func (rt *Runtime) Shutdown(ctx context.Context) error {
	// Pooled sandboxes are the runtime's, not a caller's: removed.
	rt.pools.Close(true)
	rt.mu.Lock()
	mine := make([]*Sandbox, 0, len(rt.sandboxes))
	for _, sb := range rt.sandboxes {
		mine = append(mine, sb)
	}
	rt.mu.Unlock()
	var first error
	for _, sb := range mine {
		var err error
		if sb.unkept() {
			err = sb.Remove(ctx)
		} else {
			err = sb.Stop(ctx)
		}
		if err != nil && first == nil && !spec.IsCode(err, spec.CodeNotFound) {
			first = err
		}
	}
	if err := rt.Close(); first == nil {
		first = err
	}
	return first
}

// hasWarden reports whether the engine delivers a warden into its sandboxes.
func hasWarden(e dockerio.Engine) bool {
	w, ok := e.(dockerio.WardenDelivery)
	return ok && w.HasWarden()
}

// Doctor checks the Docker daemon in the environment against the named
// profile ("" selects as profile.Select does) and returns every check. The
// error is non-nil only when the daemon could not be asked; a daemon that
// fails the profile gives a report whose Err says why.
func Doctor(ctx context.Context, profileName string) (profile.Report, error) {
	return dockerio.Doctor(ctx, profileName)
}

// usageEvery is the sampling interval Options.UsageEvery names.
func usageEvery(d time.Duration) time.Duration {
	if d == 0 {
		return DefaultUsageEvery
	}
	return max(d, 0)
}
