package core

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/internal/actors"
	"github.com/stockade/stockade/internal/actors/process"
	"github.com/stockade/stockade/internal/actors/sandbox"
	"github.com/stockade/stockade/internal/recovery"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/recorder"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/tracing"
)

// Sandbox is a sandbox made by this runtime.
type Sandbox struct {
	rt  *Runtime
	id  string
	pid actors.Ref
	// gone is closed when the sandbox's actor has stopped.
	gone chan struct{}
	// mu guards pool, asked and warm: set by the create or the claim
	// while the sandbox is already listed. pool is the warm pool it was
	// made for; asked is when CreateSandbox was called for it (zero:
	// recovered, or still pooled); warm says it was claimed from a pool.
	// first records its time to first command once.
	mu    sync.Mutex
	pool  string
	asked time.Time
	warm  bool
	first sync.Once
}

// ID is the sandbox's id.
func (s *Sandbox) ID() string { return s.id }

// setPool records the pool the sandbox was made for (pooled or claimed).
func (s *Sandbox) setPool(name string) {
	s.mu.Lock()
	s.pool = name
	s.mu.Unlock()
}

// handedOut records that CreateSandbox, called at asked, hands the sandbox
// to its caller: warm when claimed from a pool.
func (s *Sandbox) handedOut(asked time.Time) {
	s.mu.Lock()
	s.asked, s.warm = asked, s.pool != ""
	s.mu.Unlock()
}

// ask sends a request carrying a reply channel and waits for the answer,
// the context, or the actor's end. If the caller gives up first, late (when
// set) receives the answer that arrives after, to release what it holds.
func ask[T any](ctx context.Context, s *Sandbox, mk func(chan<- T) any, late func(T)) (T, error) {
	var zero T
	if err := s.rt.usable(); err != nil {
		return zero, err
	}
	reply := make(chan T, 1)
	s.rt.sys.Send(s.pid, mk(reply))
	select {
	case v := <-reply:
		return v, nil
	case <-s.gone:
		select {
		case v := <-reply: // answered just before it stopped (a Remove)
			return v, nil
		default:
		}
		return zero, s.goneErr()
	case <-ctx.Done():
		if late != nil {
			go func() {
				select {
				case v := <-reply:
					late(v)
				case <-s.gone:
				}
			}()
		}
		return zero, spec.Wrap(spec.CodeCancelled, "sandbox", ctx.Err(), "sandbox %s", s.id)
	}
}

// goneErr says why a sandbox's actor no longer answers: it was removed, or
// it was taken out of service (unreconciled) with its workload maybe still
// running.
func (s *Sandbox) goneErr() error {
	s.rt.mu.Lock()
	u, out := s.rt.unreconciled[s.id]
	closed := s.rt.closed
	s.rt.mu.Unlock()
	switch {
	case out:
		return u.err(s.id)
	case closed:
		return spec.Errorf(spec.CodeCancelled, "sandbox", "the runtime closed; sandbox %s is left to the next Open", s.id)
	}
	return spec.Errorf(spec.CodeNotFound, "sandbox", "sandbox %s is gone (removed)", s.id)
}

func (s *Sandbox) inspect(ctx context.Context) (sandbox.Snapshot, error) {
	return ask(ctx, s, func(r chan<- sandbox.Snapshot) any { return sandbox.Inspect{Reply: r} }, nil)
}

// State returns the sandbox's folded state: from its actor while it lives,
// from the journal once it is removed. A sandbox out of service returns its
// journaled state with the unreconciled error; no zero state is ever
// returned without an error.
func (s *Sandbox) State(ctx context.Context) (lifecycle.Sandbox, error) {
	snap, err := s.inspect(ctx)
	if err == nil || !spec.IsCode(err, spec.CodeNotFound) && !spec.IsCode(err, spec.CodeUnreconciled) {
		return snap.State, err
	}
	st, ferr := recovery.FoldSandbox(s.rt.journal, s.id)
	switch {
	case ferr != nil:
		return st, errors.Join(err, ferr)
	case st.Phase == lifecycle.PhaseRemoved && spec.IsCode(err, spec.CodeNotFound):
		return st, nil
	}
	return st, err
}

// unkept reports whether nobody keeps the sandbox once its runtime shuts
// down: a one-shot sandbox, or one made for a pool and never claimed (a
// refill the pools' close let finish). One fold answers both.
func (s *Sandbox) unkept() bool {
	st, err := recovery.FoldSandbox(s.rt.journal, s.id)
	if err != nil {
		return false // kept: a sandbox whose journal does not fold is not removed on a guess
	}
	return st.Spec.Lifetime == spec.OneShot || st.Pool != "" && !st.Claimed
}

// Start runs a process in the sandbox. It returns once the process runs
// (its start journaled), with its streams; every piped stream must be read.
func (s *Sandbox) Start(ctx context.Context, p spec.Process) (*process.Handle, error) {
	id, err := journal.NewID()
	if err != nil {
		return nil, err
	}
	key := journal.Key{Kind: journal.KindProcess, ID: id}
	ctx, life := s.rt.startSpan(ctx, "stockade.process", key, tracing.SandboxID.String(s.id), attribute.String("stockade.program", programName(p.Argv)))
	sctx, sp := s.rt.startSpan(ctx, "stockade.process.start", key)
	h, err := s.start(sctx, id, p)
	sp.end(err)
	if err != nil {
		life.end(err)
		return nil, err
	}
	s.rt.traceProcess(s.id, h, life)
	return h, nil
}

func (s *Sandbox) start(ctx context.Context, id string, p spec.Process) (*process.Handle, error) {
	p = p.AsStarted()
	if s.rt.noChanges {
		p.NoChanges = true
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	l, err := ask(ctx, s, func(r chan<- process.Launch) any { return sandbox.Launch{ID: id, Spec: p, Reply: r} },
		func(l process.Launch) {
			// The caller gave up, but the process started: nobody will
			// read its streams. It runs on detached (its output recorded),
			// unless it is tied to its caller: then it is stopped.
			if h := l.Handle; h != nil {
				for _, rc := range []io.ReadCloser{h.Stdout(), h.Stderr()} {
					if rc != nil {
						_ = rc.Close() // detached, or abandoned: nobody reads it
					}
				}
				if !p.StopWithCaller {
					// Nobody can write its input any more: it ends, as a
					// pipe's does when its writer dies.
					if in := h.Stdin(); in != nil {
						if err := in.Close(); err != nil {
							s.rt.log.Warn("closing the stdin of a process whose caller gave up", "sandbox", s.id, "process", h.ID, "err", err)
						}
					}
					return
				}
				if err := h.Stop(context.Background()); err != nil {
					s.rt.log.Warn("stopping a process whose caller gave up", "sandbox", s.id, "process", h.ID, "err", err)
				}
			}
		})
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	asked, warm := s.asked, s.warm
	s.mu.Unlock()
	if l.Err == nil && !asked.IsZero() {
		s.first.Do(func() { s.rt.firstCommand(warm, time.Since(asked)) })
	}
	return l.Handle, l.Err
}

// Stop stops the sandbox: admission closes, every process ends with reason
// sandbox_stopped, the workload stops. Resources are kept (the workspace can
// still be read). It returns once the sandbox is exited.
func (s *Sandbox) Stop(ctx context.Context) (err error) {
	ctx, sp := s.rt.startSpan(ctx, "stockade.sandbox.stop", journal.Key{Kind: journal.KindSandbox, ID: s.id})
	defer func() { sp.end(err) }()
	err, aerr := ask(ctx, s, func(r chan<- error) any { return sandbox.Stop{Reply: r} }, nil)
	if aerr != nil {
		return aerr
	}
	return err
}

// Remove stops the sandbox if needed and deletes every resource. It returns
// once the removal is journaled and the sandbox is gone from the runtime
// (its actor answers before it stops: a lookup by id right after Remove
// must say not_found, not find it).
func (s *Sandbox) Remove(ctx context.Context) (err error) {
	ctx, sp := s.rt.startSpan(ctx, "stockade.sandbox.remove", journal.Key{Kind: journal.KindSandbox, ID: s.id})
	defer func() { sp.end(err) }()
	err, aerr := ask(ctx, s, func(r chan<- error) any { return sandbox.Remove{Reply: r} }, nil)
	if aerr != nil {
		return aerr
	}
	if err != nil {
		return err
	}
	select {
	case <-s.gone:
	case <-ctx.Done(): // removed all the same; it leaves the list in a moment
	}
	return nil
}

// Put extracts a tar stream into /workspace/<dir> through the export
// container; entries are owned by the sandbox's user. The whole archive is
// checked before anything is extracted: an entry, symlink or hardlink that
// would resolve outside dir fails the put with invalid_argument and nothing
// of it lands. Put returns when ctx ends, even while tar's Read blocks.
func (s *Sandbox) Put(ctx context.Context, dir string, tar io.Reader) error {
	if _, err := spec.WorkspacePath(dir); err != nil {
		return err
	}
	err, aerr := ask(ctx, s, func(r chan<- error) any { return sandbox.Put{Ctx: ctx, Dir: dir, Tar: tar, Reply: r} }, nil)
	if aerr != nil {
		return aerr
	}
	return err
}

// Get returns a tar stream of /workspace/<path>. With pause, a running
// workload is paused for a consistent copy until the stream is closed;
// otherwise live reports that the copy was taken from a live filesystem. The
// caller closes the stream; ctx bounds its whole life.
func (s *Sandbox) Get(ctx context.Context, path string, pause bool) (rc io.ReadCloser, live bool, err error) {
	res, aerr := ask(ctx, s, func(r chan<- sandbox.GetResult) any { return sandbox.Get{Ctx: ctx, Path: path, Pause: pause, Reply: r} },
		func(g sandbox.GetResult) {
			if g.Tar != nil {
				// Unpauses a paused workload, frees the connection.
				if err := g.Tar.Close(); err != nil {
					s.rt.log.Warn("closing an abandoned copy", "sandbox", s.id, "err", err)
				}
			}
		})
	if aerr != nil {
		return nil, false, aerr
	}
	return res.Tar, res.Live, res.Err
}

// Runtime is the runtime the sandbox belongs to.
func (s *Sandbox) Runtime() *Runtime { return s.rt }

// Process returns a live process by id: one started through this runtime,
// or one recovery re-adopted from an earlier runtime (its output goes to
// the recorder only, so its Stdout and Stderr are nil: follow it with
// Logs). It can be signalled, stopped and waited for. not_found when the
// process is not live here.
func (rt *Runtime) Process(ctx context.Context, id string) (*process.Handle, error) {
	st, err := rt.ReplayProcess(ctx, id, 0)
	if err != nil {
		return nil, err
	}
	return rt.liveProcess(ctx, st)
}

// liveProcess asks the sandbox actor of st, a process's folded state, for
// its live handle.
func (rt *Runtime) liveProcess(ctx context.Context, st lifecycle.Process) (*process.Handle, error) {
	id := st.ID
	notLive := spec.Errorf(spec.CodeNotFound, "runtime", "process %s is not live in this runtime (%s)", id, st.Phase)
	if st.Terminal() {
		return nil, notLive
	}
	sb, err := rt.Sandbox(st.Sandbox)
	if err != nil {
		return nil, err
	}
	h, err := ask(ctx, sb, func(r chan<- *process.Handle) any { return sandbox.ProcessHandle{ID: id, Reply: r} }, nil)
	if err != nil {
		return nil, err
	}
	if h == nil {
		return nil, notLive
	}
	return h, nil
}

// SetSecrets gives the values of the sandbox's secret variables again
// (host.Sandbox.SetSecrets).
func (s *Sandbox) SetSecrets(ctx context.Context, secrets []spec.SecretVar) error {
	secrets = slices.Clone(secrets)
	err, aerr := ask(ctx, s, func(r chan<- error) any { return sandbox.SetSecrets{Secrets: secrets, Reply: r} }, nil)
	if aerr != nil {
		return aerr
	}
	return err
}

// SetEgress replaces an allowlist sandbox's egress rules while it runs, no
// restart: the change is journaled (sandbox.egress_changed), then the
// sandbox's proxy applies it, and SetEgress returns once the proxy holds
// the new rules. Rules are checked first (invalid_argument; nothing is
// journaled). A sandbox of another network kind is refused: the kind is
// fixed at create. If the proxy cannot be reached now, the error says so;
// the journaled rules are applied when its link is back.
func (s *Sandbox) SetEgress(ctx context.Context, rules []spec.EgressRule) error {
	if err := (spec.Policy{Network: spec.NetworkAllowlist, Egress: rules}).WithDefaults().Validate(); err != nil {
		return err
	}
	rules = slices.Clone(rules)
	err, aerr := ask(ctx, s, func(r chan<- error) any { return sandbox.SetEgress{Rules: rules, Reply: r} }, nil)
	if aerr != nil {
		return aerr
	}
	return err
}

// Egress calls fn with a sandbox's recorded egress decisions, oldest first
// (bounded: recorder.MaxDecisionBytes per file, the newest two files). A
// sandbox with none, or not an allowlist sandbox, calls fn never.
func (rt *Runtime) Egress(id string, fn func(egress.Decision) error) error {
	return recorder.ReadDecisions(rt.recorder.Path(), id, fn)
}

// Process is a process as the runtime hands it out: the process actor's
// handle.
type Process = process.Handle
