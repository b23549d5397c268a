package journal

import (
	"sync/atomic"
	"time"
)

// CommitBuckets are the upper bounds of Stats.CommitLatency's buckets.
var CommitBuckets = []time.Duration{
	250 * time.Microsecond, 500 * time.Microsecond, time.Millisecond, 2 * time.Millisecond,
	5 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, time.Second,
}

// Stats is what the committer has done since Open: counts a metrics
// exporter reads (the journal itself links no metrics library).
type Stats struct {
	// Commits is the bbolt transactions run; Appends the append calls
	// they carried (a commit carries every append waiting for it).
	Commits, Appends uint64
	// CommitSeconds is the time spent in those transactions, fsyncs
	// included; CommitLatency[i] counts commits that took at most
	// CommitBuckets[i] (the last entry: longer than every bucket).
	CommitSeconds float64
	CommitLatency []uint64
}

// commitStats are Stats' counters, updated by the committer only.
type commitStats struct {
	appends atomic.Uint64
	nanos   atomic.Uint64
	buckets [12]atomic.Uint64 // len(CommitBuckets)+1
}

func (s *commitStats) observe(appends int, took time.Duration) {
	s.appends.Add(uint64(appends))
	s.nanos.Add(uint64(took))
	i := 0
	for i < len(CommitBuckets) && took > CommitBuckets[i] {
		i++
	}
	s.buckets[i].Add(1)
}

// Stats returns the committer's counts since Open.
func (j *Journal) Stats() Stats {
	st := Stats{
		Commits:       j.commits.Load(),
		Appends:       j.stats.appends.Load(),
		CommitSeconds: float64(j.stats.nanos.Load()) / 1e9,
		CommitLatency: make([]uint64, len(j.stats.buckets)),
	}
	for i := range j.stats.buckets {
		st.CommitLatency[i] = j.stats.buckets[i].Load()
	}
	return st
}
