package journal

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/bbolt"

	"github.com/stockade/stockade/spec"
)

// maxBatchRecords caps the records one group commit takes (a single larger
// Append is still committed whole).
const maxBatchRecords = 4096

// request is one Append call queued for the committer.
type request struct {
	recs   []Record
	envs   [][]byte
	events []Event
	// stored[i]: record i is already in its stream (a retried Sequenced
	// record); apply skips it.
	stored []bool
	err    error
	done   chan struct{}
}

// Append stores recs as one atomic batch and returns their events (with
// sequences) once the batch is durable. Concurrent calls share commits.
//
// Errors: invalid_argument (a malformed record, a parent that differs from
// the stream's, or ErrTerminal: a stream already ended), nothing written;
// journal (the commit failed: nothing of this call is stored, and every call
// in the same commit fails alike; or ErrClosed, ErrReadOnly); cancelled (ctx
// ended: before queuing nothing is written; while waiting for the commit the
// outcome is unknown, and the error says so).
//
// The returned events share their Payload with recs. An Append with no
// records does nothing.
func (j *Journal) Append(ctx context.Context, recs ...Record) ([]Event, error) {
	const op = "journal.append"
	if len(recs) == 0 {
		return nil, nil
	}
	if err := j.usable(op, true); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, spec.Wrap(spec.CodeCancelled, op, err, "nothing appended")
	}
	now := j.now().UnixNano()
	r := &request{recs: recs, envs: make([][]byte, len(recs)), done: make(chan struct{})}
	for i, rec := range recs {
		if err := validRecord(rec); err != nil {
			return nil, errInvalid(op, "record %d: %v", i, err)
		}
		r.envs[i] = appendEnvelope(make([]byte, 0, envHeader+len(rec.Type)+len(rec.Payload)+envTrailer),
			rec.Type, rec.Terminal, now, rec.Payload)
	}
	select {
	case j.reqs <- r:
	case <-j.closing:
		return nil, errJournal(op, ErrClosed, "%s", j.path)
	case <-ctx.Done():
		return nil, spec.Wrap(spec.CodeCancelled, op, ctx.Err(), "nothing appended")
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		return nil, spec.Wrap(spec.CodeCancelled, op, errors.Join(ErrUncertain, ctx.Err()), "stopped waiting: the append may or may not be durable")
	}
	if r.err != nil {
		return nil, r.err
	}
	return r.events, nil
}

func validRecord(rec Record) error {
	if err := validKey(rec.Key); err != nil {
		return err
	}
	if !validType(rec.Type) {
		return fmt.Errorf("bad type %q (1 to %d printable ASCII bytes, no space)", rec.Type, MaxTypeLen)
	}
	if len(rec.Payload) > MaxPayload {
		return fmt.Errorf("payload of %d bytes exceeds %d", len(rec.Payload), MaxPayload)
	}
	if len(rec.Payload) > 0 && !json.Valid(rec.Payload) {
		return fmt.Errorf("payload of %s %s is not valid JSON", rec.Key, rec.Type)
	}
	if rec.Parent != "" {
		if rec.Key.Kind != KindProcess {
			return fmt.Errorf("a %s has no parent (got %q)", rec.Key.Kind, rec.Parent)
		}
		if !validID(rec.Parent) {
			return fmt.Errorf("bad parent id %q", rec.Parent)
		}
	}
	return nil
}

// linger is how long the committer waits for the callers of its previous
// batch to queue again before it commits a smaller batch. It applies only
// after a batch of more than one call, so a lone appender never waits; it is
// small beside a commit (two fdatasyncs, a millisecond or more).
const linger = time.Millisecond

// run is the committer: it takes the first queued request and every request
// already waiting, lingers briefly if the previous batch was larger (its
// callers are likely about to append again), and commits them in one
// transaction.
func (j *Journal) run() {
	defer close(j.stopped)
	var batch []*request
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	prev := 0
	for {
		var first *request
		select {
		case first = <-j.reqs:
		case <-j.closing:
			for {
				select {
				case r := <-j.reqs:
					j.commit([]*request{r})
				default:
					return
				}
			}
		}
		batch = append(batch[:0], first)
		n := len(first.recs)
		lingering := false
	drain:
		for n < maxBatchRecords {
			select {
			case r := <-j.reqs:
				batch = append(batch, r)
				n += len(r.recs)
				continue
			default:
			}
			if len(batch) >= prev {
				break
			}
			// Fewer callers than last time: give them a moment (one
			// linger per batch, not per arrival).
			if !lingering {
				lingering = true
				timer.Reset(linger)
			}
			select {
			case r := <-j.reqs:
				batch = append(batch, r)
				n += len(r.recs)
			case <-timer.C:
				lingering = false
				break drain
			case <-j.closing:
				break drain
			}
		}
		if lingering {
			timer.Stop()
		}
		prev = len(batch)
		j.commit(batch)
		clear(batch)
	}
}

// streamState is what a request's checks need to know about one stream.
type streamState struct {
	exists   bool
	terminal bool
	lastSeq  uint64
	parent   string
	// bucket is the stream's bucket once opened or created in this
	// transaction, so apply does not look it up again.
	bucket *bbolt.Bucket
	// pending is the envelope of the last record this request's check gave
	// a sequence, not yet applied.
	pending []byte
}

// txState reads stream state inside the committer's transaction.
type txState struct {
	tx       *bbolt.Tx
	streams  *bbolt.Bucket
	live     *bbolt.Bucket
	terminal *bbolt.Bucket
}

func (s *txState) stream(k Key) (streamState, error) {
	var st streamState
	kb := s.streams.Bucket([]byte(k.Kind))
	if kb == nil {
		return st, fmt.Errorf("%w: bucket streams/%s missing", ErrCorrupt, k.Kind)
	}
	sb := kb.Bucket([]byte(k.ID))
	if sb == nil {
		return st, nil
	}
	st.exists, st.bucket = true, sb
	sb.FillPercent = 1 // keys only grow: pack pages full
	last, _ := sb.Cursor().Last()
	if len(last) != 8 {
		return st, fmt.Errorf("%w: stream %s has no events or a bad key", ErrCorrupt, k)
	}
	st.lastSeq = seqFromKey(last)
	lv := s.live.Get(liveKey(k))
	if lv == nil {
		st.terminal = true
		return st, nil
	}
	e, err := decodeLive(k, lv)
	if err != nil {
		return st, err
	}
	st.parent = e.Parent
	return st, nil
}

// check assigns sequences to r's records against the transaction's current
// state without writing anything. A request error is returned as is; a storage
// error is wrapped so commit can tell them apart.
func (s *txState) check(r *request, local map[Key]*streamState) (reqErr, txErr error) {
	const op = "journal.append"
	clear(local)
	r.events = make([]Event, len(r.recs))
	r.stored = make([]bool, len(r.recs))
	for i, rec := range r.recs {
		st, ok := local[rec.Key]
		if !ok {
			v, err := s.stream(rec.Key)
			if err != nil {
				return nil, err
			}
			st = &v
			local[rec.Key] = st
		}
		if rec.Sequenced && st.lastSeq != rec.After {
			ev, same, err := s.sameAsLast(st, rec)
			if err != nil {
				return nil, err
			}
			if !same {
				return spec.Wrap(spec.CodeConflict, op, ErrSequence, "record %d: %s is at seq %d, not %d", i, rec.Key, st.lastSeq, rec.After), nil
			}
			r.events[i], r.stored[i] = ev, true
			continue
		}
		switch {
		case st.terminal:
			return spec.Wrap(spec.CodeInvalidArgument, op, ErrTerminal, "record %d: %s ended at seq %d", i, rec.Key, st.lastSeq), nil
		case !st.exists && rec.Key.Kind == KindProcess && rec.Parent == "":
			return errInvalid(op, "record %d: the first event of %s needs its sandbox as Parent", i, rec.Key), nil
		case st.exists && rec.Parent != "" && rec.Parent != st.parent:
			return errInvalid(op, "record %d: %s belongs to sandbox %q, not %q", i, rec.Key, st.parent, rec.Parent), nil
		}
		if !st.exists {
			st.exists = true
			st.parent = rec.Parent
		}
		st.lastSeq++
		st.terminal = rec.Terminal
		st.pending = r.envs[i]
		r.events[i] = Event{Key: rec.Key, Seq: st.lastSeq, Type: rec.Type, Version: EnvelopeVersion,
			Payload: rec.Payload, Terminal: rec.Terminal}
	}
	return nil, nil
}

// sameAsLast reports whether rec is already the stream's last event, at
// rec.After+1: a retry of an append that did land. It returns that event.
func (s *txState) sameAsLast(st *streamState, rec Record) (Event, bool, error) {
	if !st.exists || st.lastSeq != rec.After+1 {
		return Event{}, false, nil
	}
	stored := st.pending
	if stored == nil {
		stored = st.bucket.Get(seqKey(st.lastSeq))
	}
	old, err := decodeEnvelope(stored)
	if err != nil {
		return Event{}, false, fmt.Errorf("stream %s seq %d: %w", rec.Key, st.lastSeq, err)
	}
	if string(old.typ) != rec.Type || old.terminal != rec.Terminal || !bytes.Equal(old.payload, rec.Payload) {
		return Event{}, false, nil
	}
	return Event{Key: rec.Key, Seq: st.lastSeq, Type: rec.Type, Version: old.version, Time: unixTime(old.time),
		Payload: rec.Payload, Terminal: rec.Terminal}, true, nil
}

// apply writes r's checked records.
func (s *txState) apply(r *request, local map[Key]*streamState) error {
	for i, rec := range r.recs {
		if r.stored[i] {
			continue
		}
		ev := &r.events[i]
		st := local[rec.Key]
		sb := st.bucket
		if sb == nil {
			var err error
			if sb, err = s.streams.Bucket([]byte(rec.Key.Kind)).CreateBucket([]byte(rec.Key.ID)); err != nil {
				return err
			}
			sb.FillPercent = 1 // keys only grow: pack pages full
			st.bucket = sb
		}
		if err := sb.Put(seqKey(ev.Seq), r.envs[i]); err != nil {
			return err
		}
		lk := liveKey(rec.Key)
		if rec.Terminal {
			if err := s.live.Delete(lk); err != nil {
				return err
			}
			if err := s.terminal.Put(terminalKey(envTime(r.envs[i]), rec.Key), nil); err != nil {
				return err
			}
			continue
		}
		le := LiveEntity{Parent: st.parent, LastSeq: ev.Seq, Type: rec.Type, Updated: unixTime(envTime(r.envs[i]))}
		if err := s.live.Put(lk, encodeLive(le)); err != nil {
			return err
		}
	}
	return nil
}

// commit runs one bbolt transaction for batch and wakes every caller.
func (j *Journal) commit(batch []*request) {
	local := make(map[Key]*streamState)
	began := time.Now()
	err := j.db.Update(func(tx *bbolt.Tx) error {
		s := &txState{tx: tx, streams: tx.Bucket(bucketStreams), live: tx.Bucket(bucketLive), terminal: tx.Bucket(bucketTerminal)}
		for _, r := range batch {
			reqErr, err := s.check(r, local)
			if err != nil {
				return err
			}
			if reqErr != nil {
				r.err = reqErr
				continue
			}
			if err := s.apply(r, local); err != nil {
				return err
			}
		}
		if j.failCommit != nil {
			return j.failCommit()
		}
		return nil
	})
	j.stats.observe(len(batch), time.Since(began))
	j.commits.Add(1)
	for _, r := range batch {
		if err != nil && r.err == nil {
			r.err = errJournal("journal.append", err, "commit to %s failed; nothing of this append is stored", j.path)
		}
		if r.err != nil {
			r.events = nil
		} else {
			for i := range r.events {
				if !r.stored[i] {
					r.events[i].Time = unixTime(envTime(r.envs[i]))
				}
			}
		}
	}
	// Subscribers hear of a commit before its appenders return: a
	// subscription taken after an Append returned never sees its events.
	j.publish(batch)
	for _, r := range batch {
		close(r.done)
	}
}

func envTime(env []byte) int64 { return int64(binary.BigEndian.Uint64(env[3:11])) }

func seqFromKey(k []byte) uint64 { return binary.BigEndian.Uint64(k) }
