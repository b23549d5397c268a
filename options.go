package stockade

import (
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/internal/core"
	"github.com/stockade/stockade/spec"
)

// Options configure Open. The zero value is usable: each zero field means
// the default its comment names.
type Options struct {
	// Journal is the journal file; "" means $STOCKADE_JOURNAL, else
	// $XDG_STATE_HOME/stockade/journal.db (else ~/.local/state/...).
	Journal string
	// Owner, if set, must match the journal's owner id.
	Owner string
	// Profile names the preflight profile; "" means $STOCKADE_PROFILE, else
	// profile.Default (linux-x64). A relaxed profile is used only
	// when named.
	Profile string
	// Logger receives the runtime's and the actor system's logs; nil is
	// quiet.
	Logger *slog.Logger
	// Engine replaces the Docker adapter (tests use dockerio.Fake, an
	// engine in memory that serves the real warden in-process).
	Engine dockerio.Engine
	// WardenBinary is the path of a stockade-warden binary every sandbox gets
	// instead of the embedded one; "" means $STOCKADE_WARDEN, else the
	// binary embedded in this program, written on first use under the
	// journal's directory (journal.db → helpers/sha256-<hex>/) and verified
	// by sha256 before each copy into a sandbox (see package helpers). A
	// named file must be a static Linux executable of this version. Open
	// fails when there is none (a GOARCH with no embedded binary and none
	// named).
	WardenBinary string
	// EgressBinary is the path of a stockade-egress binary, the allowlist
	// network's proxy, found as WardenBinary is ("" means $STOCKADE_EGRESS, else
	// the embedded one). Without one, Open works and allowlist sandboxes
	// are refused (unsupported, saying what is missing).
	EgressBinary string
	// StopGrace is the time between TERM and KILL (default 10 s).
	StopGrace time.Duration
	// HighWaterMark is a piped stream's credit in bytes (default 64 KiB).
	HighWaterMark int
	// OutputQuota is the default combined output quota (default 64 MiB).
	OutputQuota int64
	// LockTimeout bounds the wait for a journal held by another process.
	LockTimeout time.Duration
	// StopAdoptedProcesses makes recovery stop the processes it finds still
	// running in a re-adopted sandbox (TERM, then KILL) instead of
	// re-adopting them detached (their exit code recorded when they end).
	StopAdoptedProcesses bool
	// RecoveryTimeout bounds the wait for recovery to settle every sandbox
	// (default 5 minutes).
	RecoveryTimeout time.Duration
	// Record is every process's default output recording (a process's
	// spec.Process.Record overrides it): the zero value keeps the first
	// 64 KiB and the last 1 MiB, Off records nothing. Recordings live in
	// the directory beside the journal (journal.db → journal.rec/).
	Record spec.Record
	// Pools are warm pools: each keeps Size sandboxes of its spec made,
	// verified and started ahead of demand, and CreateSandbox claims one
	// when its spec has the pool's key (image, limits, network kind,
	// user, datasets; the lifetime, TTL, env, dir, labels and allowlist
	// rules asked are applied at the claim). A pool's spec sets none of
	// those claim-time fields.
	Pools []PoolSpec
	// PoolRefills bounds how many pooled sandboxes are made at once,
	// across every pool (default DefaultPoolRefills).
	PoolRefills int
	// CheckpointBytes bounds the checkpoint store beside the journal
	// (journal.db → journal.checkpoints/): the distinct file contents it
	// holds. A checkpoint past it fails resource_exhausted. Zero: the
	// store's default.
	CheckpointBytes int64
	// NoChanges runs every process of this runtime untracked, as if each
	// asked spec.Process.NoChanges: what a process does to /workspace is
	// not tracked (`stockade diff` says untracked). Tracking is on by
	// default and costs little (BENCHMARKS.md, "Changes at no cost").
	NoChanges bool
	// UsageEvery is how often a running sandbox's workload is sampled for
	// its usage ledger (Runtime.Usage): its cgroup read from the daemon,
	// one call a sandbox. Zero: DefaultUsageEvery; negative: only on
	// demand and at each stop (the memory integral then sees fewer
	// samples).
	UsageEvery time.Duration
	// TracerProvider makes the runtime's OpenTelemetry spans (package
	// tracing names them; the Docker client's HTTP spans come under them
	// from the same provider); nil: the global provider, the no-op one
	// unless the program installed another (exporter.FromEnv, of package
	// tracing/exporter, does, from the standard OTEL_* environment). A
	// span's parent is the span of the context a call is given.
	TracerProvider trace.TracerProvider
	// MetricLabels are the sandbox label keys the usage metrics
	// (Runtime.Metrics: stockade_usage_*) are labelled by, beside the
	// pool: keys with few values (a team, a task kind), never one whose
	// value is unique per sandbox.
	MetricLabels []string
}

// DefaultUsageEvery is the usage ledger's default sampling interval.
const DefaultUsageEvery = core.DefaultUsageEvery

// core is o as the runtime's core takes it.
func (o Options) core() core.Options {
	return core.Options{
		Journal: o.Journal, Owner: o.Owner, Profile: o.Profile, Logger: o.Logger, Engine: o.Engine,
		WardenBinary: o.WardenBinary, EgressBinary: o.EgressBinary, StopGrace: o.StopGrace,
		HighWaterMark: o.HighWaterMark, OutputQuota: o.OutputQuota, LockTimeout: o.LockTimeout,
		StopAdoptedProcesses: o.StopAdoptedProcesses, RecoveryTimeout: o.RecoveryTimeout, Record: o.Record,
		Pools: o.Pools, PoolRefills: o.PoolRefills, CheckpointBytes: o.CheckpointBytes, NoChanges: o.NoChanges,
		UsageEvery: o.UsageEvery, TracerProvider: o.TracerProvider, MetricLabels: o.MetricLabels,
	}
}
