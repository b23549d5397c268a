package core

import (
	"context"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/actors/sandbox"
	"github.com/stockade/stockade/internal/pool"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/spec"
)

// Warm pools (internal/pool): sandboxes made, verified and started ahead
// of demand, claimed by a CreateSandbox whose spec has the same pool key.
// This file is the runtime's side of the pools' seam and their API.

// poolMaker is the runtime's side of the pools' seam: its members are the
// runtime's sandboxes.
type poolMaker struct{ rt *Runtime }

var _ pool.Maker[*Sandbox] = poolMaker{}

// Make creates one sandbox of s for pool name and waits until it is
// pooled.
func (m poolMaker) Make(ctx context.Context, name string, s spec.Sandbox) (*Sandbox, error) {
	sid, err := journal.NewID()
	if err != nil {
		return nil, err
	}
	return m.rt.make(ctx, sandbox.Params{ID: sid, Spec: s, Pool: name})
}

// Claim asks the sandbox's actor to take the claim.
func (poolMaker) Claim(ctx context.Context, sb *Sandbox, c pool.Claim) (err, asked error) {
	msg := sandbox.Claim{Lifetime: c.Lifetime, TTL: c.TTL, Env: c.Env, Dir: c.Dir, Labels: c.Labels, Secrets: c.Secrets, Rules: c.Rules}
	return ask(ctx, sb, func(r chan<- error) any { msg.Reply = r; return msg }, nil)
}

func (poolMaker) Remove(ctx context.Context, sb *Sandbox) error { return sb.Remove(ctx) }
func (poolMaker) Pooled(sb *Sandbox, name string)               { sb.setPool(name) }
func (poolMaker) ID(sb *Sandbox) string                         { return sb.id }

// openPools resolves the pools' images and hands the pools the pooled
// sandboxes recovery re-adopted (taken back, or removed), then starts the
// refills.
func (rt *Runtime) openPools(ctx context.Context, opts Options) error {
	for _, p := range opts.Pools {
		full := pool.Sandbox(p.Sandbox)
		id, err := rt.engine.ResolveImage(ctx, full.Image)
		if err != nil {
			return spec.Wrap(spec.CodeOf(err), "pool", err, "pool %q", p.Name)
		}
		full.Image = id
		if err := full.Validate(); err != nil {
			return spec.Wrap(spec.CodeInvalidArgument, "pool", err, "pool %q", p.Name)
		}
		rt.pools.Add(p.Name, p.Sandbox.Image, p.Size, full)
	}
	rt.mu.Lock()
	mine := make([]*Sandbox, 0, len(rt.sandboxes))
	for _, sb := range rt.sandboxes {
		mine = append(mine, sb)
	}
	rt.mu.Unlock()
	var found []pool.Found[*Sandbox]
	for _, sb := range mine {
		snap, err := sb.inspect(ctx)
		if err != nil || !snap.State.Pooled() {
			continue
		}
		found = append(found, pool.Found[*Sandbox]{Member: sb, State: snap.State})
	}
	rt.pools.Open(found)
	return nil
}

// Pools lists the runtime's warm pools: their size, what is ready and
// being made, and the claims served warm and cold since Open.
func (rt *Runtime) Pools(ctx context.Context) ([]host.PoolInfo, error) {
	if err := rt.usable(); err != nil {
		return nil, err
	}
	return rt.pools.Info(), nil
}

// ResizePool sets a pool's size. Growing starts refills; shrinking removes
// ready sandboxes past the new size (oldest first stay). Size 0 empties it.
func (rt *Runtime) ResizePool(ctx context.Context, name string, size int) error {
	if err := rt.usable(); err != nil {
		return err
	}
	return rt.pools.Resize(ctx, name, size)
}

// DefaultPoolRefills is how many pooled sandboxes are made at once, by
// default, across every pool.
const DefaultPoolRefills = pool.DefaultRefills

// MaxPoolSize bounds one pool.
const MaxPoolSize = pool.MaxSize

// CheckPoolName judges a pool's name as Open does.
func CheckPoolName(name string) error { return pool.CheckName(name) }
