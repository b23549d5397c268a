package core

import (
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/internal/actors/sandbox"
	"github.com/stockade/stockade/internal/recovery"
	"github.com/stockade/stockade/journal"
)

// The hooks below reach past the facade for the root's tests (its
// export_test.go); nothing else calls them.

// Journal is the runtime's journal.
func (rt *Runtime) Journal() *journal.Journal { return rt.journal }

// Break makes the sandbox's actor panic, as a bug of ours would.
func (s *Sandbox) Break() {
	reply := make(chan sandbox.Snapshot)
	close(reply) // answering on it panics inside Receive
	s.rt.sys.Send(s.pid, sandbox.Inspect{Reply: reply})
}

// DockerSandbox names a sandbox's Docker resources from its journal.
func (rt *Runtime) DockerSandbox(id string) (dockerio.Sandbox, error) {
	st, err := recovery.FoldSandbox(rt.journal, id)
	return sandbox.DockerSandbox(rt.Owner(), st), err
}
