package stockade

import (
	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/core"
	"github.com/stockade/stockade/recorder"
	"github.com/stockade/stockade/spec"
)

// The API's value types are defined where the client shares them (host/,
// spec/) or where they are made (egress/); these names are those types,
// not copies.
type (
	// SandboxInfo is one line of Sandboxes.
	SandboxInfo = host.SandboxInfo
	// HistoryEvent is one journaled event of a sandbox or one of its
	// processes.
	HistoryEvent = host.HistoryEvent
	// RecoveryReport says what the recovery run by Open found and did.
	RecoveryReport = host.RecoveryReport
	// RecoveredSandbox is one line of a RecoveryReport.
	RecoveredSandbox = host.RecoveredSandbox
	// PoolSpec configures a warm pool.
	PoolSpec = host.PoolSpec
	// PoolInfo is one line of Pools.
	PoolInfo = host.PoolInfo
	// CheckpointInfo describes one checkpoint of the store.
	CheckpointInfo = host.CheckpointInfo
	// Result is how a process ended.
	Result = spec.Result
	// EgressDecision is one decision of a sandbox's egress proxy, as
	// recorded beside the journal.
	EgressDecision = egress.Decision
	// OutputChunk is one piece of a process's recorded output, in arrival
	// order: bytes of stdout (Stream "stdout") or stderr (Stream
	// "stderr"), or a gap (Stream "") with the count of bytes the
	// recording does not hold there (Lost when they are known lost, not
	// merely beyond the recording's bounds). It is host's type: the one
	// host.Runtime.Logs and client.Dial's runtime hand out.
	OutputChunk = host.OutputChunk
	// OutputSummary says how a recording ends: complete (the output ended,
	// was synced before the process's exit was journaled, and its end
	// record written after it), or torn (cut by a crash, or still being
	// written), with the totals. It is host's type.
	OutputSummary = host.OutputSummary
)

// Unreconciled is the decision recorded for a sandbox recovery could not
// observe: it is listed, and every operation on it fails with unreconciled,
// until a later Open reconciles it.
const Unreconciled = core.Unreconciled

// DefaultPoolRefills is how many pooled sandboxes are made at once, by
// default, across every pool.
const DefaultPoolRefills = core.DefaultPoolRefills

// MaxPoolSize bounds one pool.
const MaxPoolSize = core.MaxPoolSize

// CheckPoolName judges a pool's name as Open does (the CLI judges its
// flags with it before anything is opened): 1 to 32 of [a-z0-9_-],
// starting with a letter or digit.
func CheckPoolName(name string) error { return core.CheckPoolName(name) }

// ReadOutput reads process id's recorded output from beside the journal at
// journalPath ("" means the default journal, as Options.Journal) and hands
// each chunk to fn in arrival order. It takes no lock and opens no
// journal: it works while a runtime holds the journal (the recording of a
// running process reads up to its last write) and after it is gone. A
// process with no recording (recording off, never started, or removed by
// retention) is not_found; a corrupt one fails with code journal after the
// chunks before the corruption.
func ReadOutput(journalPath, id string, fn func(OutputChunk) error) (OutputSummary, error) {
	sum, err := core.ReadOutput(journalPath, id, func(c recorder.Chunk) error { return fn(outputChunk(c)) })
	return outputSummary(sum), err
}

// outputChunk is a recorded chunk as host's API gives it.
func outputChunk(c recorder.Chunk) OutputChunk {
	out := OutputChunk{Offset: c.Offset, Data: c.Data, Gap: c.Gap, Lost: c.Lost}
	switch c.Stream {
	case recorder.TypeStdout:
		out.Stream = "stdout"
	case recorder.TypeStderr:
		out.Stream = "stderr"
	}
	return out
}

// outputSummary is a recording's summary as host's API gives it.
func outputSummary(s recorder.Summary) OutputSummary {
	return OutputSummary{Complete: s.Complete, Torn: s.Torn, StdoutBytes: s.StdoutBytes, StderrBytes: s.StderrBytes,
		Recorded: s.Recorded, Missing: s.Missing, Dropped: s.Dropped, Head: s.Head, Tail: s.Tail}
}

// HostProcess presents a process as a host.Process.
func HostProcess(p *Process) host.Process { return core.HostProcess(p.rt, p.h) }
