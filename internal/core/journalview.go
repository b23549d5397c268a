package core

import (
	"context"
	"io"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/inspect"
	"github.com/stockade/stockade/lifecycle"
)

// The runtime answers inspection questions about its own journal through
// package inspect, the same reader a tool opens on a journal file, so the
// embedded runtime, a served one (the client) and an offline reader agree.
var _ host.Inspector = (*Runtime)(nil)

// inspector reads the runtime's own journal while it appends.
func (rt *Runtime) inspector() *inspect.Reader { return inspect.New(rt.journal) }

// History returns a sandbox's journaled events and its processes', in time
// order. It reads the journal, so it survives restarts.
func (rt *Runtime) History(ctx context.Context, sandboxID string) ([]host.HistoryEvent, error) {
	return rt.inspector().History(ctx, sandboxID)
}

// ReplaySandbox folds a sandbox's stream of this runtime's journal up to
// sequence at (0: to its end) and returns its state there: what the live
// actor held at that point.
func (rt *Runtime) ReplaySandbox(ctx context.Context, id string, at uint64) (lifecycle.Sandbox, error) {
	return rt.inspector().ReplaySandbox(ctx, id, at)
}

// ReplayProcess is ReplaySandbox for a process's stream.
func (rt *Runtime) ReplayProcess(ctx context.Context, id string, at uint64) (lifecycle.Process, error) {
	return rt.inspector().ReplayProcess(ctx, id, at)
}

// Live lists the journal's live index.
func (rt *Runtime) Live(ctx context.Context) ([]host.LiveEntity, error) {
	return rt.inspector().Live(ctx)
}

// Verify checks the runtime's whole journal while it appends: every record
// decodes, sequences have no gap, the indexes agree, every stream folds.
func (rt *Runtime) Verify(ctx context.Context) error { return rt.inspector().Verify(ctx) }

// Export writes the runtime's whole journal as JSON lines: a consistent
// snapshot, taken while appends go on.
func (rt *Runtime) Export(ctx context.Context, w io.Writer) error {
	return rt.inspector().Export(ctx, w)
}
