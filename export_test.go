package stockade

import (
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
)

// JournalOf exposes a runtime's journal to tests.
func JournalOf(rt *Runtime) *journal.Journal { return rt.journal }

// FoldSandbox replays a sandbox's journal stream through the fold.
func FoldSandbox(rt *Runtime, id string) (lifecycle.Sandbox, error) {
	return foldSandbox(rt.journal, id)
}

// FoldProcess replays a process's journal stream through the fold.
func FoldProcess(rt *Runtime, id string) (lifecycle.Process, error) {
	return foldProcess(rt.journal, id)
}
