package inspect

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

var _ host.Inspector = (*Reader)(nil)

// Reader answers host.Inspector's questions from one open journal.
type Reader struct {
	j *journal.Journal
	// owned: the Reader opened j (Open), so Close closes it.
	owned bool
}

// New reads j, which stays the caller's: Close leaves it open. j may be
// writable and in use (a runtime's own journal): every read is a
// consistent snapshot taken while appends go on.
func New(j *journal.Journal) *Reader { return &Reader{j: j} }

// Open opens the journal file at path read-only, with a shared lock: it
// works beside another reader, and fails fast with journal_locked (naming
// the holder) while a runtime holds the file.
func Open(path string) (*Reader, error) {
	j, err := journal.Open(path, journal.Options{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	return &Reader{j: j, owned: true}, nil
}

// Path is the journal file's path.
func (r *Reader) Path() string { return r.j.Path() }

// Close closes the journal if Open opened it.
func (r *Reader) Close() error {
	if !r.owned {
		return nil
	}
	return r.j.Close()
}

// History returns a sandbox's journaled events and its processes', in time
// order; not_found when the journal has no such sandbox.
func (r *Reader) History(ctx context.Context, sandboxID string) ([]host.HistoryEvent, error) {
	if err := ctx.Err(); err != nil {
		return nil, cancelled(err)
	}
	j := r.j
	var out []host.HistoryEvent
	collect := func(e journal.Event) error {
		out = append(out, HistoryEvent(e))
		return nil
	}
	if err := j.Read(journal.Key{Kind: journal.KindSandbox, ID: sandboxID}, 0, 0, collect); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, spec.Errorf(spec.CodeNotFound, "history", "no sandbox %s in the journal", sandboxID)
	}
	// A process names its sandbox in its reserved event. Scanning every
	// process stream is linear in the journal's processes: fine for a
	// debugging tool, and retention keeps it bounded.
	var procs []journal.Key
	err := j.Streams(func(k journal.Key) error {
		if k.Kind == journal.KindProcess {
			procs = append(procs, k)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, k := range procs {
		sandbox, err := r.processSandbox(k)
		if err != nil {
			return nil, err
		}
		if sandbox == sandboxID {
			if err := j.Read(k, 0, 0, collect); err != nil {
				return nil, err
			}
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].Time.Before(out[b].Time) })
	return out, nil
}

// HistoryEvent is a journal event as a history line.
func HistoryEvent(e journal.Event) host.HistoryEvent {
	return host.HistoryEvent{Kind: string(e.Key.Kind), ID: e.Key.ID, Seq: e.Seq, Time: e.Time, Type: e.Type, Payload: e.Payload}
}

// ReplaySandbox folds a sandbox's stream up to sequence at (0: to its end)
// and returns its state there: what the live actor held at that point.
func (r *Reader) ReplaySandbox(ctx context.Context, id string, at uint64) (lifecycle.Sandbox, error) {
	s := lifecycle.Sandbox{ID: id}
	if err := ctx.Err(); err != nil {
		return s, cancelled(err)
	}
	err := replay(r.j, journal.Key{Kind: journal.KindSandbox, ID: id}, at, func(seq uint64, t time.Time, ev lifecycle.Event, repeat bool) (err error) {
		if next, err := lifecycle.ApplySandbox(s, seq, t, ev); err == nil || !repeat {
			s = next
			return err
		}
		s.Seq, s.At = seq, t
		return nil
	})
	return s, err
}

// ReplayProcess is ReplaySandbox for a process's stream.
func (r *Reader) ReplayProcess(ctx context.Context, id string, at uint64) (lifecycle.Process, error) {
	p := lifecycle.Process{ID: id}
	if err := ctx.Err(); err != nil {
		return p, cancelled(err)
	}
	err := replay(r.j, journal.Key{Kind: journal.KindProcess, ID: id}, at, func(seq uint64, t time.Time, ev lifecycle.Event, repeat bool) (err error) {
		if next, err := lifecycle.ApplyProcess(p, seq, t, ev); err == nil || !repeat {
			p = next
			return err
		}
		p.Seq, p.At = seq, t
		return nil
	})
	return p, err
}

// replay decodes a stream's events up to at and hands each to apply; an
// illegal transition names the stream and sequence. repeat tells apply that
// the event repeats the one before it exactly (type and payload): a fact
// journaled twice by a retried append, which journals written before
// appends were sequenced can hold. The folds then skip it if they refuse
// it, rather than fail the whole stream.
func replay(j *journal.Journal, k journal.Key, at uint64, apply func(seq uint64, t time.Time, ev lifecycle.Event, repeat bool) error) error {
	var prev journal.Event
	read := false
	err := j.Read(k, 0, at, func(e journal.Event) error {
		read = true
		ev, err := lifecycle.Decode(e.Type, e.Payload)
		if err == nil {
			repeat := prev.Seq != 0 && e.Type == prev.Type && bytes.Equal(e.Payload, prev.Payload)
			err = apply(e.Seq, e.Time, ev, repeat)
		}
		if err != nil {
			return fmt.Errorf("%s #%d: %w", k, e.Seq, err)
		}
		prev = e
		return nil
	})
	if !read && spec.IsCode(err, spec.CodeNotFound) {
		// The journal's words name its file (the server's, served): the
		// caller's id and where ids come from are what help.
		hint := ""
		if k.Kind == journal.KindProcess {
			hint = " (a process's id is returned when it is started, and each live sandbox lists its running ones)"
		}
		return spec.Errorf(spec.CodeNotFound, "replay", "no %s %s in the journal%s", k.Kind, k.ID, hint)
	}
	return err
}

// Live lists the journal's live index.
func (r *Reader) Live(ctx context.Context) ([]host.LiveEntity, error) {
	if err := ctx.Err(); err != nil {
		return nil, cancelled(err)
	}
	var out []host.LiveEntity
	err := r.j.Live(func(e journal.LiveEntity) error {
		out = append(out, host.LiveEntity{Kind: string(e.Key.Kind), ID: e.Key.ID, Parent: e.Parent, Last: e.Type, Seq: e.LastSeq, Updated: e.Updated})
		return nil
	})
	return out, err
}

// Verify checks the whole journal: every record decodes, sequences have no
// gap, the indexes agree (journal.Verify), and every sandbox and process
// stream folds.
func (r *Reader) Verify(ctx context.Context) error {
	if err := r.j.Verify(); err != nil {
		return err
	}
	var keys []journal.Key
	if err := r.j.Streams(func(k journal.Key) error { keys = append(keys, k); return nil }); err != nil {
		return err
	}
	for _, k := range keys {
		var err error
		switch k.Kind {
		case journal.KindSandbox:
			_, err = r.ReplaySandbox(ctx, k.ID, 0)
		case journal.KindProcess:
			_, err = r.ReplayProcess(ctx, k.ID, 0)
		case journal.KindRuntime:
			// Runtime-wide facts (recovery runs, orphan removals): no
			// lifecycle to fold.
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Export writes the whole journal as JSON lines: a consistent snapshot,
// taken while appends go on.
func (r *Reader) Export(ctx context.Context, w io.Writer) error {
	if err := ctx.Err(); err != nil {
		return cancelled(err)
	}
	return r.j.Export(w, nil)
}

func cancelled(err error) error {
	return spec.Wrap(spec.CodeCancelled, "inspect", err, "reading the journal")
}
