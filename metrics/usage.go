package metrics

import (
	"encoding/json"
	"math"
	"regexp"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// usageCounters sum the journal's usage facts (each process's use with its
// exit, each sandbox's workload samples) by the labels of the sandbox: its
// pool and the sandbox label keys the runtime was given (UsageLabels), never
// an id. A sandbox's samples are cumulative: a counter takes what a sample
// adds to the last one counted, and the live sandboxes' last samples are
// read from the journal when the metrics start, so a runtime restarted
// over them counts nothing twice.
type usageCounters struct {
	keys      []string
	sandboxes map[string][]string // a live sandbox's label values: pool, then keys
	procs     map[string]string   // a live process's sandbox
	last      map[string]spec.WorkloadUsage
	// seen are the values each label key was given: past
	// maxLabelValues a new one counts as labelOther (the values are the
	// API's callers', and each is a series that lives for ever).
	seen []map[string]bool

	workloadCPU, memory, processCPU, processWall, output, processes *prometheus.CounterVec
}

// maxLabelValues bounds the distinct values a usage label takes (the pool
// too); labelOther stands for the rest.
const (
	maxLabelValues = 100
	labelOther     = "other"
)

// labelName is a sandbox label key as a Prometheus label name.
var notLabelChar = regexp.MustCompile(`[^a-zA-Z0-9_]`)

func labelName(key string) string { return "label_" + notLabelChar.ReplaceAllString(key, "_") }

func newUsageCounters(keys []string) *usageCounters {
	names := []string{"pool"}
	seen := map[string]bool{"pool": true}
	var kept []string
	for _, k := range keys {
		n := labelName(k)
		if seen[n] {
			continue // two keys one name: the first stands
		}
		seen[n] = true
		names = append(names, n)
		kept = append(kept, k)
	}
	vec := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, names)
	}
	return &usageCounters{
		keys: kept, sandboxes: map[string][]string{}, procs: map[string]string{}, last: map[string]spec.WorkloadUsage{},
		seen:        make([]map[string]bool, 1+len(kept)),
		workloadCPU: vec("stockade_usage_workload_cpu_seconds_total", "CPU time of sandbox workloads as their cgroups counted it (every process, the warden's and Docker's execs included), by pool and the sandbox labels asked."),
		memory:      vec("stockade_usage_memory_gib_seconds_total", "Working-set memory of sandbox workloads integrated over time, in GiB-seconds, by pool and the sandbox labels asked."),
		processCPU:  vec("stockade_usage_process_cpu_seconds_total", "User and system CPU time of ended processes (their rusage), by pool and the sandbox labels asked."),
		processWall: vec("stockade_usage_process_wall_seconds_total", "Wall time of ended processes, by pool and the sandbox labels asked."),
		output:      vec("stockade_usage_output_bytes_total", "Stdout and stderr bytes of ended processes, by pool and the sandbox labels asked."),
		processes:   vec("stockade_usage_processes_total", "Processes ended, by pool and the sandbox labels asked."),
	}
}

func (u *usageCounters) collectors() []prometheus.Collector {
	return []prometheus.Collector{u.workloadCPU, u.memory, u.processCPU, u.processWall, u.output, u.processes}
}

// values is a sandbox's label values (every one empty for a sandbox not
// seen reserved).
func (u *usageCounters) values(sandbox string) []string {
	if v, ok := u.sandboxes[sandbox]; ok {
		return v
	}
	return make([]string, 1+len(u.keys))
}

func (u *usageCounters) labelled(pool string, labels map[string]string) []string {
	v := []string{pool}
	for _, k := range u.keys {
		v = append(v, labels[k])
	}
	for i, x := range v {
		if u.seen[i] == nil {
			u.seen[i] = map[string]bool{}
		}
		switch {
		case u.seen[i][x]:
		case len(u.seen[i]) < maxLabelValues:
			u.seen[i][x] = true
		default:
			v[i] = labelOther
		}
	}
	return v
}

// seed reads the live entities' labels and last samples from the journal.
func (u *usageCounters) seed(j *journal.Journal) error {
	var live []journal.LiveEntity
	if err := j.Live(func(e journal.LiveEntity) error {
		live = append(live, e)
		return nil
	}); err != nil {
		return err
	}
	for _, e := range live {
		if e.Key.Kind == journal.KindProcess {
			u.procs[e.Key.ID] = e.Parent
			continue
		}
		if e.Key.Kind != journal.KindSandbox {
			continue
		}
		if err := j.Read(e.Key, 0, 0, func(ev journal.Event) error {
			u.count(ev, false)
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// count takes one committed event; counting is false while seeding (the state
// is learnt, nothing is counted).
func (u *usageCounters) count(ev journal.Event, counting bool) {
	id := ev.Key.ID
	switch ev.Type {
	case lifecycle.SandboxReserved{}.Type():
		var x lifecycle.SandboxReserved
		if json.Unmarshal(ev.Payload, &x) == nil {
			u.sandboxes[id] = u.labelled(x.Pool, x.Spec.Labels)
		}
	case lifecycle.SandboxClaimed{}.Type():
		var x lifecycle.SandboxClaimed
		if json.Unmarshal(ev.Payload, &x) == nil {
			u.sandboxes[id] = u.labelled(u.values(id)[0], x.Labels)
		}
	case lifecycle.UsageSampled{}.Type():
		var x lifecycle.UsageSampled
		if json.Unmarshal(ev.Payload, &x) != nil {
			return
		}
		prev := u.last[id]
		u.last[id] = x.Usage
		if !counting {
			return
		}
		add(u.workloadCPU.WithLabelValues(u.values(id)...), (x.Usage.CPU - prev.CPU).Seconds())
		add(u.memory.WithLabelValues(u.values(id)...), x.Usage.MemoryGiBSeconds-prev.MemoryGiBSeconds)
	case lifecycle.SandboxRemoved{}.Type():
		delete(u.sandboxes, id)
		delete(u.last, id)
	case lifecycle.ProcessReserved{}.Type():
		var x lifecycle.ProcessReserved
		if json.Unmarshal(ev.Payload, &x) == nil {
			u.procs[id] = x.Sandbox
		}
	case lifecycle.ProcessExited{}.Type():
		sandbox := u.procs[id]
		delete(u.procs, id)
		var x lifecycle.ProcessExited
		if !counting || json.Unmarshal(ev.Payload, &x) != nil {
			return
		}
		v := u.values(sandbox)
		u.processes.WithLabelValues(v...).Inc()
		add(u.output.WithLabelValues(v...), float64(x.StdoutBytes)+float64(x.StderrBytes))
		if x.Usage != nil {
			add(u.processCPU.WithLabelValues(v...), x.Usage.User.Seconds()+x.Usage.System.Seconds())
			add(u.processWall.WithLabelValues(v...), x.Usage.Wall.Seconds())
		}
	}
}

// add adds v when it is a positive, finite figure: a counter only goes up,
// and Add panics on a negative value (a figure from a journal this
// runtime did not write, or a sample older than the last counted).
func add(c prometheus.Counter, v float64) {
	if v > 0 && !math.IsInf(v, 0) {
		c.Add(v)
	}
}
