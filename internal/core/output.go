package core

import (
	"context"
	"time"

	"github.com/stockade/stockade/statedir"

	"github.com/stockade/stockade/internal/retention"
	"github.com/stockade/stockade/recorder"
	"github.com/stockade/stockade/spec"
)

// ReadOutput reads process id's recorded output from beside the journal at
// journalPath ("" means the default journal, as Options.Journal) and hands
// each chunk to fn in arrival order. It takes no lock and opens no
// journal: it works while a runtime holds the journal (the recording of a
// running process reads up to its last write) and after it is gone. A
// process with no recording (recording off, never started, or removed by
// retention) is not_found; a corrupt one fails with code journal after the
// chunks before the corruption.
func ReadOutput(journalPath, id string, fn func(recorder.Chunk) error) (recorder.Summary, error) {
	if journalPath == "" {
		var err error
		if journalPath, err = statedir.DefaultJournal(); err != nil {
			return recorder.Summary{}, err
		}
	}
	return recorder.Read(statedir.Recordings(journalPath), id, fn)
}

// Logs reads the recorded output of a process of this runtime's journal,
// running or ended (see ReadOutput). A process
// that runs, recorded, but whose read loop has not yet made its recording
// (just after its start returned) has no output yet: an empty, incomplete
// summary, not not_found.
func (rt *Runtime) Logs(id string, fn func(recorder.Chunk) error) (recorder.Summary, error) {
	sum, err := recorder.Read(rt.recorder.Path(), id, fn)
	if spec.IsCode(err, spec.CodeNotFound) {
		st, ferr := rt.ReplayProcess(context.Background(), id, 0)
		if ferr == nil && st.Exit == nil && !rt.recorder.Bounds(st.Spec.Record).Off {
			return recorder.Summary{}, nil
		}
	}
	return sum, err
}

// Retain applies retention to the runtime's journal and recordings
// (retention.Apply).
func (rt *Runtime) Retain(ctx context.Context, olderThan time.Duration) (int, error) {
	return retention.Apply(ctx, rt.journal, rt.recorder, olderThan)
}
