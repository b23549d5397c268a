package stockade

import (
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/internal/actors"
	"github.com/stockade/stockade/internal/actors/sandbox"
	"github.com/stockade/stockade/internal/recovery"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
)

// JournalOf exposes a runtime's journal to tests.
func JournalOf(rt *Runtime) *journal.Journal { return rt.journal }

// FoldSandbox replays a sandbox's journal stream through the fold.
func FoldSandbox(rt *Runtime, id string) (lifecycle.Sandbox, error) {
	return recovery.FoldSandbox(rt.journal, id)
}

// FoldProcess replays a process's journal stream through the fold.
func FoldProcess(rt *Runtime, id string) (lifecycle.Process, error) {
	return recovery.FoldProcess(rt.journal, id)
}

// WrapJournal makes the runtimes opened until restore append through wrap.
func WrapJournal(wrap func(actors.Journal) actors.Journal) (restore func()) {
	testJournal = wrap
	return func() { testJournal = nil }
}

// BreakSandboxActor makes a sandbox's actor panic, as a bug of ours would.
func BreakSandboxActor(sb *Sandbox) {
	reply := make(chan sandbox.Snapshot)
	close(reply) // answering on it panics inside Receive
	sb.rt.sys.Send(sb.pid, sandbox.Inspect{Reply: reply})
}

// HandleOf names a sandbox's Docker resources from its journal.
func HandleOf(rt *Runtime, id string) (dockerio.Sandbox, error) {
	st, err := recovery.FoldSandbox(rt.journal, id)
	return sandbox.DockerSandbox(rt.Owner(), st), err
}
