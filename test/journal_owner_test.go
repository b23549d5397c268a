package test

import (
	"testing"

	"github.com/stockade/stockade/journal"
)

// ownerOfJournal reads the owner a CLI environment's journal was made for
// (the journal must not be held by a writer).
func ownerOfJournal(t *testing.T, e *cliEnv) string {
	t.Helper()
	j, err := journal.Open(e.journal, journal.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = j.Close() }()
	return j.Owner()
}
