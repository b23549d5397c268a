package actors

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/recorder"
	"github.com/stockade/stockade/spec"
)

// Journal is the part of the journal the actors use: durable appends. The
// consumer owns this seam so tests can put a failing journal behind it.
type Journal interface {
	Append(ctx context.Context, recs ...journal.Record) ([]journal.Event, error)
	// Read replays a stream from sequence from (see journal.Journal.Read):
	// an actor whose stream moved on under it catches up from it.
	Read(key journal.Key, from, to uint64, fn func(journal.Event) error) error
}

var _ Journal = (*journal.Journal)(nil)

// Config holds the runtime-wide settings every actor reads.
type Config struct {
	Owner    string
	Profile  string
	Revision string
	// StopGrace is the time between TERM and KILL.
	StopGrace time.Duration
	// HighWaterMark is a piped stream's credit in bytes.
	HighWaterMark int
	// OutputQuota is the default combined output quota.
	OutputQuota int64
	// JournalTimeout bounds one durable append.
	JournalTimeout time.Duration
	// DockerTimeout bounds one Docker call made by an actor.
	DockerTimeout time.Duration
	// WardensDelivered: sandboxes run a warden (the engine delivers its binary) and
	// their processes are spawned by it.
	WardensDelivered bool
	// UsageEvery is how often a running sandbox's workload is sampled for
	// its usage ledger (0 or less: only on demand and at the stop).
	UsageEvery time.Duration
}

// Deps is what every actor is built with.
type Deps struct {
	Journal Journal
	Engine  dockerio.Engine
	Log     *slog.Logger
	Now     func() time.Time
	Config  Config
	// Recorder keeps every process's output beside the journal; nil
	// records nothing.
	Recorder *recorder.Store
	// Loops counts the output read loops still running (goroutines the
	// actor system does not wait for): the runtime's Close waits for
	// them, so no recording is written after it returns.
	Loops *sync.WaitGroup
	// Decided, if set, is told each egress decision a sandbox's proxy
	// made, once recorded (the runtime's traces: a span event on the
	// sandbox's live processes). It must not block.
	Decided func(sandboxID string, d egress.Decision)
}

// WithDefaults fills unset fields.
func (d Deps) WithDefaults() Deps {
	if d.Loops == nil {
		d.Loops = &sync.WaitGroup{}
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	c := &d.Config
	if c.StopGrace <= 0 {
		c.StopGrace = spec.DefaultStopGrace
	}
	if c.HighWaterMark <= 0 {
		c.HighWaterMark = spec.DefaultHighWaterMark
	}
	if c.OutputQuota <= 0 {
		c.OutputQuota = spec.DefaultOutputQuota
	}
	if c.JournalTimeout <= 0 {
		c.JournalTimeout = 30 * time.Second
	}
	if c.DockerTimeout <= 0 {
		c.DockerTimeout = 2 * time.Minute
	}
	return d
}

// Record journals one lifecycle event of an entity and returns the durable
// event (its sequence and time). It is the write-ahead step: callers make
// the Docker call an intent announces only after Record returns nil, and
// tell nobody of a fact before Record returns.
func (d *Deps) Record(kind journal.Kind, id, parent string, ev lifecycle.Event) (journal.Event, error) {
	return d.append(journal.Record{Key: journal.Key{Kind: kind, ID: id}, Parent: parent}, ev)
}

// recordAfter is Record for an actor that folds the stream it writes: the
// event goes in only right after sequence after (the last event the actor
// applied; 0 for a new stream). An append whose outcome was unknown (its
// wait timed out) can so be retried safely: if it did land, the retry
// returns the stored event instead of journaling the transition twice.
func (d *Deps) recordAfter(kind journal.Kind, id, parent string, after uint64, ev lifecycle.Event) (journal.Event, error) {
	return d.append(journal.Record{Key: journal.Key{Kind: kind, ID: id}, Parent: parent, Sequenced: true, After: after}, ev)
}

// Fold is an actor's fold of its own stream (lifecycle.ApplySandbox or
// lifecycle.ApplyProcess).
type Fold[S any] func(s S, seq uint64, at time.Time, ev lifecycle.Event) (S, error)

// RecordFolded journals ev for an actor that folds the stream it writes, and
// returns its state with ev applied; on error, the best state it knows (the
// journal's, if it had to catch up). seq gives a state's last sequence.
//   - ev is tried on the fold first: an event the fold refuses is never
//     journaled (the actor's view was wrong, or a bug of ours).
//   - The append is sequenced after the actor's last event, so a retry of
//     an append whose outcome was unknown is never journaled twice; such an
//     append is retried at once.
//   - If the stream has moved on (an append the actor was told failed did
//     land), the state catches up from the journal and ev is tried again on
//     it; so an uncertain append never wedges the actor.
func RecordFolded[S any](d *Deps, kind journal.Kind, id, parent string, s S, seq func(S) uint64, fold Fold[S], ev lifecycle.Event) (S, journal.Event, error) {
	key := journal.Key{Kind: kind, ID: id}
	for attempt := 0; ; attempt++ {
		if _, err := fold(s, seq(s)+1, d.Now(), ev); err != nil {
			return s, journal.Event{}, err
		}
		e, err := d.recordAfter(kind, id, parent, seq(s), ev)
		if err == nil {
			next, ferr := fold(s, e.Seq, e.Time, ev)
			if ferr != nil {
				return s, e, ferr
			}
			return next, e, nil
		}
		if attempt == 2 {
			return s, e, err
		}
		switch {
		case errors.Is(err, journal.ErrUncertain):
			// Asked again, the sequenced append stores it or finds it.
		case errors.Is(err, journal.ErrSequence):
			caught, cerr := catchUp(d, key, s, seq, fold)
			if cerr != nil {
				return s, journal.Event{}, errors.Join(err, cerr)
			}
			s = caught
		default:
			return s, journal.Event{}, err
		}
	}
}

// catchUp folds the stream's events after s into s.
func catchUp[S any](d *Deps, key journal.Key, s S, seq func(S) uint64, fold Fold[S]) (S, error) {
	err := d.Journal.Read(key, seq(s)+1, 0, func(e journal.Event) error {
		ev, err := lifecycle.Decode(e.Type, e.Payload)
		if err != nil {
			return err
		}
		s, err = fold(s, e.Seq, e.Time, ev)
		return err
	})
	return s, err
}

func (d *Deps) append(rec journal.Record, ev lifecycle.Event) (journal.Event, error) {
	typ, payload, err := lifecycle.Encode(ev)
	if err != nil {
		return journal.Event{}, err
	}
	rec.Type, rec.Payload, rec.Terminal = typ, payload, lifecycle.Terminal(ev)
	ctx, cancel := context.WithTimeout(context.Background(), d.Config.JournalTimeout)
	defer cancel()
	evs, err := d.Journal.Append(ctx, rec)
	if err != nil {
		return journal.Event{}, err
	}
	return evs[0], nil
}

// DockerContext returns a context bounded by the Docker call timeout.
func (d *Deps) DockerContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d.Config.DockerTimeout)
}

// Sleep waits d unless ctx ends first; false: ctx ended.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
