package stockade

import (
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/internal/actors"
	"github.com/stockade/stockade/internal/core"
	"github.com/stockade/stockade/internal/recovery"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
)

// JournalOf exposes a runtime's journal to tests.
func JournalOf(rt *Runtime) *journal.Journal { return rt.c.Journal() }

// FoldSandbox replays a sandbox's journal stream through the fold.
func FoldSandbox(rt *Runtime, id string) (lifecycle.Sandbox, error) {
	return recovery.FoldSandbox(rt.c.Journal(), id)
}

// FoldProcess replays a process's journal stream through the fold.
func FoldProcess(rt *Runtime, id string) (lifecycle.Process, error) {
	return recovery.FoldProcess(rt.c.Journal(), id)
}

// WrapJournal makes the runtimes opened until restore append through wrap.
func WrapJournal(wrap func(actors.Journal) actors.Journal) (restore func()) {
	core.WrapJournal = wrap
	return func() { core.WrapJournal = nil }
}

// BreakSandboxActor makes a sandbox's actor panic, as a bug of ours would.
func BreakSandboxActor(sb *Sandbox) { sb.s.Break() }

// HandleOf names a sandbox's Docker resources from its journal.
func HandleOf(rt *Runtime, id string) (dockerio.Sandbox, error) { return rt.c.DockerSandbox(id) }
