package core

import (
	"archive/tar"
	"context"
	"errors"
	"io"
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
	if q.Workspace {
		for i := range u.Sandboxes {
			su := &u.Sandboxes[i]
			if su.Phase != lifecycle.PhaseStarted && su.Phase != lifecycle.PhaseExited {
				continue
			}
			sb, err := rt.Sandbox(su.ID)
			if err != nil {
				continue
			}
			w, err := sb.workspaceSize(ctx)
			if err != nil {
				return host.Usage{}, spec.Wrap(spec.CodeOf(err), "usage", err, "measuring the workspace of sandbox %s", su.ID)
			}
			su.Workspace = &w
		}
	}
	u.Sum()
	return u, nil
}

// usageNow asks the sandbox's actor for its ledger with a fresh sample.
func (s *Sandbox) usageNow(ctx context.Context) (spec.WorkloadUsage, error) {
	ctx, cancel := context.WithTimeout(ctx, usageSampleWait)
	defer cancel()
	return ask(ctx, s, func(r chan<- spec.WorkloadUsage) any { return sandbox.Usage{Reply: r} }, nil)
}

// workspaceSize reads /workspace/work through the export container (live:
// the workload goes on) and sums its regular files. The tar is Docker's,
// made from the volume: nothing in it is followed.
func (s *Sandbox) workspaceSize(ctx context.Context) (host.WorkspaceSize, error) {
	rc, _, err := s.Get(ctx, "work", false)
	if err != nil {
		return host.WorkspaceSize{}, err
	}
	defer func() { _ = rc.Close() }() // read to its end or abandoned: nothing to lose
	w := host.WorkspaceSize{At: time.Now()}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return w, nil
		}
		if err != nil {
			return host.WorkspaceSize{}, spec.Wrap(spec.CodeEngine, "usage", err, "reading the workspace of sandbox %s", s.id)
		}
		if h.Typeflag == tar.TypeReg {
			w.Files++
			w.Bytes += max(h.Size, 0)
		}
	}
}
