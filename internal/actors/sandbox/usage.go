package sandbox

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// The usage part: the sandbox's ledger of what its workload used, read
// from the daemon (its container's cgroup, never anything the sandbox
// reports) every Config.UsageEvery while the workload runs, on demand
// (Usage), and once more just before a stop (finishStop's hook). The
// totals are journaled (UsageSampled) at most every usageJournalEvery and
// always before the stop, so a later runtime goes on from them.
//
// Why a restart loses nothing and counts nothing twice: the cgroup's
// counters are cumulative for the container's run, and the runtime keeps
// no running sum of its own. A sample journaled with the run's own
// counters (RunCPU) lets a later runtime, reading the same run's counters
// again, take the CPU time the workload used while no runtime watched from
// the counter itself. Only the memory integral needs samples in time: the
// stretch no runtime sampled is drawn as a line between the samples either
// side, and counted as Bridged.

// usageJournalEvery bounds how often a running sandbox's samples are
// journaled (a sample between is kept in memory only).
const usageJournalEvery = time.Minute

// Usage asks for the workload's usage now: a fresh sample when it runs.
type Usage struct{ Reply chan<- spec.WorkloadUsage }

type (
	usageTick    struct{}
	usageSampled struct {
		s   dockerio.CgroupSample
		err error
	}
)

// meter sums a workload's cgroup samples over the runs of its container.
// It is pure: the part feeds it samples and journals its totals.
type meter struct {
	total spec.WorkloadUsage
	// base is the CPU time of the runs that ended; runCPU and runMemory
	// the current run's counters at total.At (inRun: one was sampled).
	base      time.Duration
	runCPU    time.Duration
	runMemory int64
	inRun     bool
	// anchored: total.At and runMemory start the next stretch of the
	// memory integral (not after a run ended: nothing ran between).
	anchored bool
}

// restore takes up a journaled sample.
func (m *meter) restore(ev lifecycle.UsageSampled) {
	m.total = ev.Usage
	if ev.RunEnded {
		m.base, m.runCPU, m.runMemory, m.inRun, m.anchored = ev.Usage.CPU, 0, 0, false, false
		return
	}
	m.base, m.runCPU, m.runMemory, m.inRun, m.anchored = ev.Usage.CPU-ev.RunCPU, ev.RunCPU, ev.RunMemory, true, true
}

// anchor starts the memory integral at a run's start, from nothing: the
// first sample's stretch is drawn from zero.
func (m *meter) anchor(at time.Time) {
	if m.inRun || m.anchored {
		return
	}
	m.total.At, m.runMemory, m.anchored = at, 0, true
}

// add folds in a sample of the running workload. every is the sampling
// interval: a stretch longer than three of them went unsampled (bridged).
func (m *meter) add(s dockerio.CgroupSample, every time.Duration) {
	if !s.At.After(m.total.At) {
		return // not newer than what is summed (a late answer)
	}
	if m.inRun && s.CPU < m.runCPU {
		// The counters went back: the container started again unseen,
		// and its last run's counters end at the last sample.
		m.base += m.runCPU
		m.anchored = false
	}
	if m.anchored {
		dt := s.At.Sub(m.total.At)
		const gib = 1 << 30
		m.total.MemoryGiBSeconds += (float64(m.runMemory) + float64(s.Memory)) / 2 / gib * dt.Seconds()
		if every > 0 && dt > 3*every {
			m.total.Bridged += dt
		}
	}
	m.total.At = s.At
	m.total.CPU = m.base + s.CPU
	m.total.MemoryPeak = max(m.total.MemoryPeak, s.MemoryPeak, s.Memory)
	m.total.PidsPeak = max(m.total.PidsPeak, s.Pids, s.PidsPeak)
	m.total.Samples++
	m.runCPU, m.runMemory, m.inRun, m.anchored = s.CPU, s.Memory, true, true
}

// endRun closes the current run: its counters are summed, and the next
// sample starts a run of its own.
func (m *meter) endRun() {
	m.base += m.runCPU
	m.runCPU, m.runMemory, m.inRun, m.anchored = 0, 0, false, false
}

// event is the journal's record of the totals.
func (m *meter) event(runEnded, final bool) lifecycle.UsageSampled {
	return lifecycle.UsageSampled{Usage: m.total, RunCPU: m.runCPU, RunMemory: m.runMemory, RunEnded: runEnded, Final: final}
}

// usagePart keeps the ledger.
type usagePart struct {
	a      *sandboxActor
	m      meter
	ticker *time.Timer
	// inFlight: a sample is out; waiting are the asks it answers (one
	// reading serves every ask made meanwhile: a caller asking in a loop
	// never piles readings onto the daemon).
	inFlight  bool
	waiting   []chan<- spec.WorkloadUsage
	journaled time.Time // the last journaled sample's time
	stopped   bool
	armed     int // periodic samples armed so far (the first comes early)
}

// usageFirst is when a run's first periodic sample comes: early, so a
// workload that ends itself soon after its start has been read.
const usageFirst = time.Second

func (u *usagePart) every() time.Duration { return u.a.deps.Config.UsageEvery }

// start arms the periodic sample (the actor's start, after a recovering
// actor's state is its journal's): a recovering actor takes up its
// journaled totals first.
func (u *usagePart) start() {
	u.journaled = u.a.deps.Now() // the first periodic journal a minute in
	if ev := u.a.state.Usage; ev != nil {
		u.m.restore(*ev)
		u.journaled = ev.Usage.At
	} else if u.a.p.Recover != nil && u.a.state.Started {
		// Taken over with no sample journaled: its run began about when
		// it was reserved; the stretch to the first sample is bridged.
		u.m.anchor(u.a.state.Reserved)
	}
	u.arm()
}

// runStarted begins a run's ledger (the workload started, or started
// again after a rollback).
func (u *usagePart) runStarted() { u.m.anchor(u.a.deps.Now()) }

// arm schedules the next periodic sample: the first after usageFirst,
// then every interval give or take a fifth (a workload cannot time its
// allocations between readings it can predict).
func (u *usagePart) arm() {
	every := u.every()
	if every <= 0 || u.stopped {
		return
	}
	wait := min(usageFirst, every)
	if u.armed > 0 {
		wait = every - every/5 + rand.N(every*2/5+1) //nolint:gosec // G404: math/rand/v2 is seeded from the OS; unpredictable enough for a reading's time
	}
	u.armed++
	u.ticker = time.AfterFunc(wait, func() { u.a.send(usageTick{}) })
}

// close stops the periodic sample (the actor stops).
func (u *usagePart) close() {
	u.stopped = true
	if u.ticker != nil {
		u.ticker.Stop()
	}
}

// workloadUp reports whether the workload is there to be read: started,
// not yet stopped (a stopping one's last sample is the stop's), not held
// by a rollback (which reads it before it stops it, and a new run begins).
func (u *usagePart) workloadUp() bool {
	return u.a.state.Phase == lifecycle.PhaseStarted && !u.a.end.exitDead && u.a.sb.Workload != "" && !u.a.rollback.active()
}

func (u *usagePart) handle(_ actor.Context, msg any) bool {
	switch m := msg.(type) {
	case usageTick:
		if u.workloadUp() && !u.inFlight {
			u.sample()
		} else if !u.inFlight {
			u.arm()
		}
	case Usage:
		if !u.workloadUp() {
			m.Reply <- u.m.total
			return true
		}
		u.waiting = append(u.waiting, m.Reply)
		if !u.inFlight {
			u.sample()
		}
	case usageSampled:
		u.inFlight = false
		u.arm()
		if m.err == nil && u.workloadUp() {
			u.m.add(m.s, u.every())
			if m.s.At.Sub(u.journaled) >= usageJournalEvery {
				u.journal(false, false)
			}
		}
		u.answer()
	default:
		return false
	}
	return true
}

// answer gives the asks waiting the totals.
func (u *usagePart) answer() {
	for _, r := range u.waiting {
		r <- u.m.total
	}
	u.waiting = nil
}

func (u *usagePart) sample() {
	u.inFlight = true
	if u.ticker != nil {
		u.ticker.Stop() // this reading is the next periodic one too
	}
	sb := u.a.sb
	u.a.goDocker(func(ctx context.Context) any {
		s, err := u.a.engine.SampleUsage(ctx, sb)
		return usageSampled{s: s, err: err}
	})
}

// journal records the totals; a failed append is logged, not fatal (the
// next sample, or the stop's, journals them again).
func (u *usagePart) journal(runEnded, final bool) {
	if u.m.total.Samples == 0 && u.m.total.Unsampled == 0 {
		return
	}
	if err := u.a.record(u.m.event(runEnded, final)); err != nil {
		u.a.deps.Log.Warn("the sandbox's usage could not be journaled", "sandbox", u.a.p.ID, "err", err)
		return
	}
	u.journaled = u.m.total.At
}

// lastSample is the stop's hook, run off the mailbox just before the
// workload is stopped: the run's last reading (an error: none).
func lastSample(ctx context.Context, e engine, sb dockerio.Sandbox) *dockerio.CgroupSample {
	s, err := e.SampleUsage(ctx, sb)
	if err != nil {
		return nil
	}
	return &s
}

// onStop folds a run's last sample in and journals the run's totals
// (before the sandbox's exit: the ledger of an exited sandbox is whole).
// With no last sample (the workload died, or could not be read), the time
// from the last sample to now is counted unsampled: what the workload
// used then is not in the ledger, and a biller bounds it by the policy.
func (u *usagePart) onStop(s *dockerio.CgroupSample) {
	if s != nil {
		u.m.add(*s, u.every())
	} else if u.m.inRun || u.m.anchored {
		u.m.total.Unsampled += max(u.a.deps.Now().Sub(u.m.total.At), 0)
	}
	if u.m.inRun || s == nil && u.m.anchored {
		u.m.endRun()
		u.journal(true, s != nil)
	}
	u.answer()
}
