package core

import (
	"context"
	"sync"
	"time"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/actors/sandbox"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// usageSampleWait bounds the fresh sample a report takes of one running
// sandbox; past it the report keeps the journaled one.
const usageSampleWait = 5 * time.Second

// usageSamplers bounds the samples one report takes at once.
const usageSamplers = 8

// Usage is the usage ledger of the sandboxes q picks: the journal's, with
// each running sandbox's workload sampled afresh.
func (rt *Runtime) Usage(ctx context.Context, q host.UsageQuery) (host.Usage, error) {
	if err := rt.usable(); err != nil {
		return host.Usage{}, err
	}
	u, err := rt.inspector().Usage(ctx, q, rt.recorder.Path())
	if err != nil {
		return host.Usage{}, err
	}
	var wg sync.WaitGroup
	slots := make(chan struct{}, usageSamplers)
	for i := range u.Sandboxes {
		su := &u.Sandboxes[i]
		if su.Phase != lifecycle.PhaseStarted && su.Phase != lifecycle.PhasePooled {
			continue
		}
		sb, err := rt.Sandbox(su.ID)
		if err != nil {
			continue // out of service, or removed since: the journal's figures stand
		}
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			if w, err := sb.usageNow(ctx); err == nil && w.Samples >= su.Workload.Samples {
				su.Workload = w
			}
		}()
	}
	wg.Wait()
	u.Sum()
	return u, nil
}

// usageNow asks the sandbox's actor for its ledger with a fresh sample.
func (s *Sandbox) usageNow(ctx context.Context) (spec.WorkloadUsage, error) {
	ctx, cancel := context.WithTimeout(ctx, usageSampleWait)
	defer cancel()
	return ask(ctx, s, func(r chan<- spec.WorkloadUsage) any { return sandbox.Usage{Reply: r} }, nil)
}
