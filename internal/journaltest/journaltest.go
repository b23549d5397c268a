// Package journaltest writes lifecycle events into a journal for tests that
// need a history without a runtime (inspection, metrics, recovery of a
// hand-made journal).
package journaltest

import (
	"context"
	"testing"

	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
)

// Append journals ev on stream k as the runtime would: encoded, a
// process's reservation naming its sandbox as parent, a terminal event
// marked so. A failure fails the test.
func Append(tb testing.TB, j *journal.Journal, k journal.Key, ev lifecycle.Event) {
	tb.Helper()
	typ, payload, err := lifecycle.Encode(ev)
	if err != nil {
		tb.Fatal(err)
	}
	parent := ""
	if r, ok := ev.(lifecycle.ProcessReserved); ok {
		parent = r.Sandbox
	}
	if _, err := j.Append(context.Background(), journal.Record{Key: k, Parent: parent, Type: typ, Payload: payload, Terminal: lifecycle.Terminal(ev)}); err != nil {
		tb.Fatal(err)
	}
}
