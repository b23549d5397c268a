// Package metrics exports a runtime's journal as Prometheus metrics: the
// events it commits (process starts and exits by reason, recovery
// decisions, output lost to gaps, pool claims), what is live now (sandboxes
// and processes by their last event), and the committer's work (commits,
// appends per commit, commit latency). What the journal does not hold is
// read from the runtime at each scrape (Sources: sandboxes by phase, the
// warm pools, the recorder's bytes, egress decisions) or handed in as it
// happens (FirstCommand). No label carries a sandbox or process id (their
// number is unbounded).
package metrics

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
)

// followBuffer is how many committed events the follower may fall behind
// before the journal drops its subscription (counted as missed, and
// subscribed again).
const followBuffer = 4096

// Metrics is a registry of the journal's metrics, kept current by a
// goroutine that follows the journal until it closes.
type Metrics struct {
	reg *prometheus.Registry

	events    *prometheus.CounterVec
	starts    prometheus.Counter
	exits     *prometheus.CounterVec
	recovered *prometheus.CounterVec
	gapBytes  prometheus.Counter
	missed    prometheus.Counter
	first     *prometheus.HistogramVec
	usage     *usageCounters
	done      chan struct{}
}

// Sources are the runtime's figures outside the journal, read at each
// scrape; a nil one is not exported.
type Sources struct {
	// Phases counts the live sandboxes by phase (pooled among them).
	Phases func() map[string]int
	// Pools describes each warm pool.
	Pools func() []Pool
	// Recorder is what the output recorder took since the runtime opened.
	Recorder func() Recorder
	// UsageLabels are the sandbox label keys the usage counters are
	// labelled by (each as label_<key>, beside pool): keys whose values
	// are few (a team, a task kind), never one unique per sandbox.
	UsageLabels []string
}

// Pool is one warm pool's figures.
type Pool struct {
	Name                 string
	Size, Ready, Filling int
	// Warm and Cold count the creates that matched the pool, served from
	// it or made cold because it was empty; Failures the failed refills.
	Warm, Cold, Failures uint64
}

// Recorder is the output recorder's counts.
type Recorder struct {
	Recorded, Gaps, Dropped int64
	// Decisions counts recorded egress decisions by verdict.
	Decisions map[string]uint64
}

// FirstCommandBuckets are the time-to-first-command histogram's bounds:
// a warm claim is milliseconds, a cold create hundreds.
var FirstCommandBuckets = []float64{.002, .005, .01, .02, .03, .05, .1, .2, .3, .5, .75, 1, 2, 5}

// FirstCommand records a sandbox's time to first command: from the
// CreateSandbox call to its first process started (journaled and
// returned), by path ("warm": claimed from a pool; "cold": created).
func (m *Metrics) FirstCommand(path string, d time.Duration) {
	m.first.WithLabelValues(path).Observe(d.Seconds())
}

// New registers the metrics of j and starts following its commits; the
// follower ends when j closes (Done). Counters start at zero: they count
// what this runtime commits, not the journal's past.
func New(j *journal.Journal, src Sources) (*Metrics, error) {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stockade_journal_events_total", Help: "Events committed to the journal, by type.",
		}, []string{"type"}),
		starts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stockade_process_starts_total", Help: "Processes journaled started.",
		}),
		exits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stockade_process_exits_total", Help: "Processes journaled exited, by reason (exited, signaled, oom, timeout, lost, ...).",
		}, []string{"reason"}),
		recovered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stockade_recovery_decisions_total", Help: "Recovery decisions journaled, by decision.",
		}, []string{"decision"}),
		gapBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stockade_output_gap_bytes_total", Help: "Bytes of process output journaled lost (process.output_gap).",
		}),
		missed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stockade_metrics_missed_follows_total", Help: "Times the metrics follower fell behind the journal and lost events from the counters.",
		}),
		first: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "stockade_time_to_first_command_seconds", Help: "From CreateSandbox to its first process started, by path (warm: claimed from a pool; cold: created).",
			Buckets: FirstCommandBuckets,
		}, []string{"path"}),
		usage: newUsageCounters(src.UsageLabels),
		done:  make(chan struct{}),
	}
	sub, err := j.Subscribe(followBuffer)
	if err != nil {
		return nil, err
	}
	// Seeded after subscribing: an event committed in between is both
	// read and delivered, and counting a sample twice adds nothing.
	if err := m.usage.seed(j); err != nil {
		sub.Close()
		return nil, err
	}
	m.reg.MustRegister(m.events, m.starts, m.exits, m.recovered, m.gapBytes, m.missed, m.first,
		journalCollector{j: j}, runtimeCollector{src: src}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(m.usage.collectors()...)
	go m.follow(j, sub)
	return m, nil
}

// Handler serves the registry in Prometheus' text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Registry is the registry, for a host that serves it with its own.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Done is closed when the follower has ended (the journal closed).
func (m *Metrics) Done() <-chan struct{} { return m.done }

// follow counts every committed event; a subscription dropped for lag is
// counted and taken again, one closed with the journal ends it.
func (m *Metrics) follow(j *journal.Journal, sub *journal.Subscription) {
	defer close(m.done)
	for {
		for ev := range sub.C {
			m.count(ev)
		}
		if !errors.Is(sub.Err(), journal.ErrLagged) {
			return
		}
		m.missed.Inc()
		var err error
		if sub, err = j.Subscribe(followBuffer); err != nil {
			return
		}
	}
}

func (m *Metrics) count(ev journal.Event) {
	m.events.WithLabelValues(ev.Type).Inc()
	m.usage.count(ev, true)
	switch ev.Type {
	case lifecycle.ProcessStarted{}.Type():
		m.starts.Inc()
	case lifecycle.ProcessExited{}.Type():
		var x lifecycle.ProcessExited
		if json.Unmarshal(ev.Payload, &x) == nil {
			m.exits.WithLabelValues(string(x.Reason)).Inc()
		}
	case lifecycle.Recovered{}.Type():
		var x lifecycle.Recovered
		if json.Unmarshal(ev.Payload, &x) == nil {
			m.recovered.WithLabelValues(x.Decision).Inc()
		}
	case lifecycle.OutputGap{}.Type():
		var x lifecycle.OutputGap
		if json.Unmarshal(ev.Payload, &x) == nil && x.To > x.From {
			m.gapBytes.Add(float64(x.To - x.From))
		}
	}
}

// journalCollector reads the live index and the committer's counts at
// each scrape.
type journalCollector struct{ j *journal.Journal }

var (
	liveDesc = prometheus.NewDesc("stockade_live_entities",
		"Live (not ended) sandboxes and processes, by kind and the type of their last event (their phase).",
		[]string{"kind", "last"}, nil)
	commitsDesc = prometheus.NewDesc("stockade_journal_commits_total",
		"Journal transactions committed (each fsynced).", nil, nil)
	appendsDesc = prometheus.NewDesc("stockade_journal_appends_total",
		"Appends the commits carried (appends per commit = this / commits).", nil, nil)
	latencyDesc = prometheus.NewDesc("stockade_journal_commit_seconds",
		"Time of one journal commit, fsyncs included.", nil, nil)
)

func (c journalCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- liveDesc
	ch <- commitsDesc
	ch <- appendsDesc
	ch <- latencyDesc
}

func (c journalCollector) Collect(ch chan<- prometheus.Metric) {
	live := map[[2]string]int{}
	if err := c.j.Live(func(e journal.LiveEntity) error {
		live[[2]string{string(e.Key.Kind), e.Type}]++
		return nil
	}); err != nil {
		ch <- prometheus.NewInvalidMetric(liveDesc, err)
	}
	for k, n := range live {
		ch <- prometheus.MustNewConstMetric(liveDesc, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
	st := c.j.Stats()
	ch <- prometheus.MustNewConstMetric(commitsDesc, prometheus.CounterValue, float64(st.Commits))
	ch <- prometheus.MustNewConstMetric(appendsDesc, prometheus.CounterValue, float64(st.Appends))
	buckets := map[float64]uint64{}
	var cum uint64
	for i, b := range journal.CommitBuckets {
		cum += st.CommitLatency[i]
		buckets[b.Seconds()] = cum
	}
	cum += st.CommitLatency[len(journal.CommitBuckets)]
	ch <- prometheus.MustNewConstHistogram(latencyDesc, cum, st.CommitSeconds, buckets)
}

// runtimeCollector reads the runtime's Sources at each scrape.
type runtimeCollector struct{ src Sources }

var (
	phaseDesc = prometheus.NewDesc("stockade_sandboxes",
		"Live sandboxes of this runtime by phase (pooled: waiting in a warm pool).", []string{"phase"}, nil)
	poolSizeDesc = prometheus.NewDesc("stockade_pool_size",
		"A warm pool's target size.", []string{"pool"}, nil)
	poolReadyDesc = prometheus.NewDesc("stockade_pool_ready",
		"Pooled sandboxes waiting for a claim.", []string{"pool"}, nil)
	poolFillingDesc = prometheus.NewDesc("stockade_pool_filling",
		"Pooled sandboxes being made.", []string{"pool"}, nil)
	poolClaimsDesc = prometheus.NewDesc("stockade_pool_claims_total",
		"Creates that matched a pool, by outcome (warm: claimed; cold: the pool was empty).", []string{"pool", "outcome"}, nil)
	poolFailuresDesc = prometheus.NewDesc("stockade_pool_refill_failures_total",
		"Refills of a pool that failed.", []string{"pool"}, nil)
	recordedDesc = prometheus.NewDesc("stockade_recorder_bytes_total",
		"Process output bytes the recorder wrote to disk.", nil, nil)
	recGapDesc = prometheus.NewDesc("stockade_recorder_gap_bytes_total",
		"Output bytes recorded as lost in place (gap records).", nil, nil)
	recDroppedDesc = prometheus.NewDesc("stockade_recorder_dropped_bytes_total",
		"Output bytes a failed recorder write dropped.", nil, nil)
	decisionsDesc = prometheus.NewDesc("stockade_egress_decisions_total",
		"Egress decisions recorded, by verdict.", []string{"verdict"}, nil)
)

func (c runtimeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{phaseDesc, poolSizeDesc, poolReadyDesc, poolFillingDesc, poolClaimsDesc, poolFailuresDesc,
		recordedDesc, recGapDesc, recDroppedDesc, decisionsDesc} {
		ch <- d
	}
}

func (c runtimeCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	if c.src.Phases != nil {
		for phase, n := range c.src.Phases() {
			gauge(phaseDesc, float64(n), phase)
		}
	}
	if c.src.Pools != nil {
		for _, p := range c.src.Pools() {
			gauge(poolSizeDesc, float64(p.Size), p.Name)
			gauge(poolReadyDesc, float64(p.Ready), p.Name)
			gauge(poolFillingDesc, float64(p.Filling), p.Name)
			counter(poolClaimsDesc, float64(p.Warm), p.Name, "warm")
			counter(poolClaimsDesc, float64(p.Cold), p.Name, "cold")
			counter(poolFailuresDesc, float64(p.Failures), p.Name)
		}
	}
	if c.src.Recorder != nil {
		r := c.src.Recorder()
		counter(recordedDesc, float64(r.Recorded))
		counter(recGapDesc, float64(r.Gaps))
		counter(recDroppedDesc, float64(r.Dropped))
		for v, n := range r.Decisions {
			counter(decisionsDesc, float64(n), v)
		}
	}
}
