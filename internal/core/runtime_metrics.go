package core

import (
	"context"
	"time"

	"github.com/stockade/stockade/internal/recovery"
	"github.com/stockade/stockade/metrics"
)

// The runtime's metrics: what the metrics package reads of it.

// Metrics returns this runtime's Prometheus metrics (package metrics),
// counted from the first call on: serve them with Metrics().Handler(), or
// gather Registry() with a host's own.
func (rt *Runtime) Metrics() (*metrics.Metrics, error) {
	rt.metricsOnce.Do(func() {
		rt.metrics, rt.metricsErr = metrics.New(rt.journal, rt.metricSources())
		rt.metricsOn.Store(rt.metrics)
	})
	return rt.metrics, rt.metricsErr
}

// metricSources are the runtime's figures the metrics read at each scrape.
func (rt *Runtime) metricSources() metrics.Sources {
	return metrics.Sources{
		UsageLabels: rt.usageLabels,
		Phases: func() map[string]int {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			out := map[string]int{}
			list, err := rt.Sandboxes(ctx)
			if err != nil {
				return out
			}
			for _, s := range list {
				phase := string(s.Phase)
				if s.Unreconciled {
					phase = recovery.Unreconciled
				}
				out[phase]++
			}
			return out
		},
		Pools: func() []metrics.Pool {
			var out []metrics.Pool
			for _, p := range rt.pools.Info() {
				out = append(out, metrics.Pool{Name: p.Name, Size: p.Size, Ready: p.Ready, Filling: p.Filling, Warm: p.Warm, Cold: p.Cold, Failures: p.Failures})
			}
			return out
		},
		Recorder: func() metrics.Recorder {
			st := rt.recorder.Stats()
			return metrics.Recorder{Recorded: st.Recorded, Gaps: st.Gaps, Dropped: st.Dropped, Decisions: st.Decisions}
		},
	}
}

// firstCommand records a sandbox's time to first command, when metrics
// are on.
func (rt *Runtime) firstCommand(warm bool, d time.Duration) {
	if m := rt.metricsOn.Load(); m != nil {
		path := "cold"
		if warm {
			path = "warm"
		}
		m.FirstCommand(path, d)
	}
}
