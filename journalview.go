package stockade

import (
	"io"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/journal"
)

// ExportJournal writes the runtime's whole journal as JSON lines: a
// consistent snapshot, taken while appends go on.
func (rt *Runtime) ExportJournal(w io.Writer) error { return rt.journal.Export(w, nil) }

// LiveEntities lists the journal's live index.
func (rt *Runtime) LiveEntities() ([]host.LiveEntity, error) { return LiveEntities(rt.journal) }

// VerifyJournal checks the runtime's journal as VerifyJournal does.
func (rt *Runtime) VerifyJournal() error { return VerifyJournal(rt.journal) }

// LiveEntities lists an open journal's live index.
func LiveEntities(j *journal.Journal) ([]host.LiveEntity, error) {
	var out []host.LiveEntity
	err := j.Live(func(e journal.LiveEntity) error {
		out = append(out, host.LiveEntity{Kind: string(e.Key.Kind), ID: e.Key.ID, Parent: e.Parent, Last: e.Type, Seq: e.LastSeq, Updated: e.Updated})
		return nil
	})
	return out, err
}

// VerifyJournal checks a whole journal: every record decodes, sequences
// have no gap, the indexes agree (journal.Verify), and every sandbox and
// process stream folds.
func VerifyJournal(j *journal.Journal) error {
	if err := j.Verify(); err != nil {
		return err
	}
	var keys []journal.Key
	if err := j.Streams(func(k journal.Key) error { keys = append(keys, k); return nil }); err != nil {
		return err
	}
	for _, k := range keys {
		var err error
		switch k.Kind {
		case journal.KindSandbox:
			_, err = ReplaySandbox(j, k.ID, 0)
		case journal.KindProcess:
			_, err = ReplayProcess(j, k.ID, 0)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
