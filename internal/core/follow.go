package core

import (
	"context"

	"github.com/stockade/stockade/host"
)

// Follow follows a sandbox's journaled events (inspect.Reader.Follow) while
// the runtime is open.
func (rt *Runtime) Follow(ctx context.Context, sandboxID string, fn func(host.HistoryEvent) error) error {
	if err := rt.usable(); err != nil {
		return err
	}
	return rt.inspector().Follow(ctx, sandboxID, fn)
}
