package journal

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/bbolt"

	"github.com/stockade/stockade/spec"
)

// The read methods run fn inside one bbolt read transaction: they see a
// consistent snapshot, and appends committed meanwhile are not seen. fn must
// not call Append, BindDaemon or Retain (a commit that grows the file waits
// for read transactions to end), and should be quick. An error returned by fn
// stops the walk and is returned unchanged. Events handed to fn own their
// memory.

// Read calls fn for each event of key's stream with from <= Seq <= to, in
// order; from 0 means 1 and to 0 means the end.
//
// Errors: not_found (no such stream), invalid_argument (bad key, from > to),
// journal (a record does not decode: ErrCorrupt or ErrUnknownVersion, naming
// the stream and sequence; the events before it were delivered).
func (j *Journal) Read(key Key, from, to uint64, fn func(Event) error) error {
	const op = "journal.read"
	if err := validKey(key); err != nil {
		return errInvalid(op, "%v", err)
	}
	if from == 0 {
		from = 1
	}
	if to == 0 {
		to = math.MaxUint64
	}
	if from > to {
		return errInvalid(op, "%s: from %d is after to %d", key, from, to)
	}
	if err := j.usable(op, false); err != nil {
		return err
	}
	return j.view(op, func(tx *bbolt.Tx) error {
		sb := streamBucket(tx, key)
		if sb == nil {
			return spec.Errorf(spec.CodeNotFound, op, "no stream %s in %s", key, j.path)
		}
		var d decoder
		c := sb.Cursor()
		for k, v := c.Seek(seqKey(from)); k != nil; k, v = c.Next() {
			if len(k) == 8 && seqFromKey(k) > to {
				return nil
			}
			ev, err := d.decode(op, key, k, v)
			if err != nil {
				return err
			}
			if err := fn(ev); err != nil {
				return userErr{err}
			}
		}
		return nil
	})
}

// userErr carries fn's error through bbolt unchanged.
type userErr struct{ error }

func (j *Journal) view(op string, fn func(*bbolt.Tx) error) error {
	err := j.db.View(fn)
	var u userErr
	switch {
	case err == nil:
		return nil
	case errors.As(err, &u):
		return u.error
	case spec.CodeOf(err) != "":
		return err
	case j.closed.Load():
		return errJournal(op, ErrClosed, "%s", j.path)
	default:
		return errJournal(op, err, "%s", j.path)
	}
}

// LastSeq is the sequence of the last event of key's stream (0 when the
// journal has no such stream): a reader that will want only what comes
// after now starts its Read there.
func (j *Journal) LastSeq(key Key) (uint64, error) {
	const op = "journal.last_seq"
	if err := validKey(key); err != nil {
		return 0, errInvalid(op, "%v", err)
	}
	if err := j.usable(op, false); err != nil {
		return 0, err
	}
	var last uint64
	err := j.view(op, func(tx *bbolt.Tx) error {
		sb := streamBucket(tx, key)
		if sb == nil {
			return nil
		}
		c := sb.Cursor()
		for k, _ := c.Last(); k != nil; k, _ = c.Prev() {
			if len(k) == 8 {
				last = seqFromKey(k)
				return nil
			}
		}
		return nil
	})
	return last, err
}

func streamBucket(tx *bbolt.Tx, key Key) *bbolt.Bucket {
	kb := tx.Bucket(bucketStreams).Bucket([]byte(key.Kind))
	if kb == nil {
		return nil
	}
	return kb.Bucket([]byte(key.ID))
}

// decoder turns stored records into Events, interning type strings.
type decoder struct {
	types map[string]string
}

func (d *decoder) decode(op string, key Key, k, v []byte) (Event, error) {
	if len(k) != 8 {
		return Event{}, errJournal(op, ErrCorrupt, "stream %s: key %x is not a sequence", key, k)
	}
	seq := seqFromKey(k)
	e, err := decodeEnvelope(v)
	if err != nil {
		return Event{}, errJournal(op, err, "stream %s seq %d", key, seq)
	}
	ev := Event{Key: key, Seq: seq, Version: e.version, Time: unixTime(e.time), Terminal: e.terminal}
	if d.types == nil {
		d.types = make(map[string]string)
	}
	typ, ok := d.types[string(e.typ)]
	if !ok {
		typ = string(e.typ)
		if len(d.types) < 1024 {
			d.types[typ] = typ
		}
	}
	ev.Type = typ
	if len(e.payload) > 0 {
		ev.Payload = bytes.Clone(e.payload)
	}
	return ev, nil
}

// Live calls fn for each entity in the live index, in key order (kind, then
// id). Its cost depends on the number of live entities only.
func (j *Journal) Live(fn func(LiveEntity) error) error {
	const op = "journal.live"
	if err := j.usable(op, false); err != nil {
		return err
	}
	return j.view(op, func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketLive).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			key, ok := parseLiveKey(k)
			if !ok {
				return errJournal(op, ErrCorrupt, "live index key %q", k)
			}
			e, err := decodeLive(key, v)
			if err != nil {
				return errJournal(op, err, "")
			}
			if err := fn(e); err != nil {
				return userErr{err}
			}
		}
		return nil
	})
}

// Streams calls fn for every stream, live or terminal, in key order (kind,
// then id).
func (j *Journal) Streams(fn func(Key) error) error {
	const op = "journal.streams"
	if err := j.usable(op, false); err != nil {
		return err
	}
	return j.view(op, func(tx *bbolt.Tx) error {
		return forEachStream(tx, func(k Key, _ *bbolt.Bucket) error {
			if err := fn(k); err != nil {
				return userErr{err}
			}
			return nil
		})
	})
}

func forEachStream(tx *bbolt.Tx, fn func(Key, *bbolt.Bucket) error) error {
	return tx.Bucket(bucketStreams).ForEachBucket(func(kind []byte) error {
		kb := tx.Bucket(bucketStreams).Bucket(kind)
		return kb.ForEachBucket(func(id []byte) error {
			return fn(Key{Kind: Kind(kind), ID: string(id)}, kb.Bucket(id))
		})
	})
}

// exportLine is one line of Export's output.
type exportLine struct {
	Kind     Kind            `json:"kind"`
	ID       string          `json:"id"`
	Seq      uint64          `json:"seq"`
	Type     string          `json:"type"`
	Version  uint16          `json:"version"`
	Time     time.Time       `json:"time"`
	Terminal bool            `json:"terminal,omitempty"`
	Payload  json.RawMessage `json:"payload"`
}

// Export writes events as JSON lines, one event a line:
//
//	{"kind":"sandbox","id":"…","seq":1,"type":"sandbox.reserved","version":1,"time":"…","payload":{…}}
//
// key nil exports every stream (in Streams order), else that one stream. A
// record that does not decode stops the export with its error: nothing is
// skipped silently. The output is buffered and flushed before returning.
func (j *Journal) Export(w io.Writer, key *Key) error {
	const op = "journal.export"
	if key != nil {
		if err := validKey(*key); err != nil {
			return errInvalid(op, "%v", err)
		}
	}
	if err := j.usable(op, false); err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	var d decoder
	one := func(k Key, sb *bbolt.Bucket) error {
		c := sb.Cursor()
		for kk, v := c.First(); kk != nil; kk, v = c.Next() {
			ev, err := d.decode(op, k, kk, v)
			if err != nil {
				return err
			}
			line := exportLine{Kind: k.Kind, ID: k.ID, Seq: ev.Seq, Type: ev.Type, Version: ev.Version,
				Time: ev.Time, Terminal: ev.Terminal, Payload: ev.Payload}
			if line.Payload == nil {
				line.Payload = json.RawMessage("null")
			}
			if err := enc.Encode(line); err != nil {
				return userErr{errJournal(op, err, "export %s seq %d", k, ev.Seq)}
			}
		}
		return nil
	}
	err := j.view(op, func(tx *bbolt.Tx) error {
		if key == nil {
			return forEachStream(tx, one)
		}
		sb := streamBucket(tx, *key)
		if sb == nil {
			return spec.Errorf(spec.CodeNotFound, op, "no stream %s in %s", *key, j.path)
		}
		return one(*key, sb)
	})
	if err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return errJournal(op, err, "export %s", j.path)
	}
	return nil
}

// CopyTo writes a consistent copy of the whole journal file to w and returns
// the bytes written. The copy is marked as one (see CopyInfo): Open takes it
// read-only only, and Restore turns it back into a journal. The journal
// itself is never marked.
//
// The marker has to be inside the bytes, and a read transaction cannot
// change them, so the snapshot (a bbolt read transaction: appends continue
// meanwhile) goes to a temporary file beside the journal (or in
// os.TempDir if that directory is not writable), is marked there in its own
// transaction, and is then streamed to w; that needs free space for one copy.
// A journal that is already a copy is streamed directly: its marker is in it.
// To write a copy to a file, CopyFile is simpler and durable.
func (j *Journal) CopyTo(w io.Writer) (int64, error) {
	const op = "journal.copy"
	if err := j.usable(op, false); err != nil {
		return 0, err
	}
	if j.copyOf != nil {
		var n int64
		err := j.view(op, func(tx *bbolt.Tx) error {
			var err error
			if n, err = tx.WriteTo(w); err != nil {
				return userErr{errJournal(op, err, "copy %s", j.path)}
			}
			return nil
		})
		return n, err
	}
	pattern := "." + filepath.Base(j.path) + ".copy-*"
	tmp, err := os.CreateTemp(filepath.Dir(j.path), pattern)
	if err != nil {
		if tmp, err = os.CreateTemp("", pattern); err != nil {
			return 0, errJournal(op, err, "create a temporary copy of %s", j.path)
		}
	}
	// The temporary copy is ours alone, in a directory we just wrote to;
	// w has its bytes (or the error) whether or not it can be removed.
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := j.markedCopy(op, tmp); err != nil {
		return 0, err
	}
	f, err := os.Open(tmp.Name())
	if err != nil {
		return 0, errJournal(op, err, "reopen the copy of %s", j.path)
	}
	defer func() { _ = f.Close() }() // only read
	n, err := io.Copy(w, f)
	if err != nil {
		return n, errJournal(op, err, "copy %s", j.path)
	}
	return n, nil
}

// CopyFile writes a consistent, marked copy of the whole journal (as CopyTo)
// to the new file dst and returns its size. dst must not exist: it is never
// overwritten (least of all by a copy of itself). The copy is written and
// marked beside dst, fsynced, then linked into place and the directory
// fsynced, so a crash leaves either no dst or a complete, marked one.
//
// Errors: invalid_argument (dst exists, cause fs.ErrExist), journal (I/O,
// ErrClosed).
func (j *Journal) CopyFile(dst string) (int64, error) {
	const op = "journal.copy"
	if err := j.usable(op, false); err != nil {
		return 0, err
	}
	if dst == "" {
		return 0, errInvalid(op, "empty destination path")
	}
	if abs, err := filepath.Abs(dst); err == nil {
		dst = abs
	}
	if err := refuseExisting(op, dst); err != nil {
		return 0, err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return 0, errJournal(op, err, "create directory for %s", dst)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".copy-*")
	if err != nil {
		return 0, errJournal(op, err, "create a file beside %s", dst)
	}
	// Removes the file on a failure; publish has removed it on success.
	defer func() { _ = os.Remove(tmp.Name()) }()
	n, err := j.markedCopy(op, tmp)
	if err != nil {
		return 0, err
	}
	if err := publish(op, tmp.Name(), dst); err != nil {
		return 0, err
	}
	return n, nil
}

// markedCopy snapshots the journal into tmp (closing it), marks the copy
// unless the journal is a copy already (then it keeps the first marker: its
// data are still that journal's at that time), and returns the copy's size.
func (j *Journal) markedCopy(op string, tmp *os.File) (int64, error) {
	ci := CopyInfo{Of: j.path, At: j.now().UTC()}
	marked, err := j.snapshot(op, tmp)
	if err != nil {
		return 0, err
	}
	if !marked {
		if err := markCopy(tmp.Name(), ci); err != nil {
			return 0, errJournal(op, err, "mark the copy of %s", j.path)
		}
	}
	fi, err := os.Stat(tmp.Name())
	if err != nil {
		return 0, errJournal(op, err, "copy %s", j.path)
	}
	return fi.Size(), nil
}

// Verify checks the whole file: bbolt's own page consistency, every record
// decodes, sequences run 1, 2, 3… without a gap, only a stream's last event
// may be terminal, and the live and terminal indexes hold exactly the live
// and terminal streams with the right last sequence, type, parent and time.
// It returns nil or a journal error (cause ErrInconsistent, ErrCorrupt or
// ErrUnknownVersion) listing up to 20 problems.
func (j *Journal) Verify() error {
	const op = "journal.verify"
	if err := j.usable(op, false); err != nil {
		return err
	}
	if !j.readOnly {
		// bbolt's page check reads the free list a writer changes under
		// it: beside a live writer it reports sound pages as freed. Check
		// a consistent copy instead.
		return j.verifyCopy(op)
	}
	return j.verify(op)
}

// verifyCopy verifies a snapshot of the journal (CopyFile), opened read-only
// on its own, and deletes it.
func (j *Journal) verifyCopy(op string) error {
	dir, err := os.MkdirTemp(filepath.Dir(j.path), ".verify-")
	if err != nil {
		return spec.Wrap(spec.CodeJournal, op, err, "making a directory for the copy to verify")
	}
	// A scratch directory of ours; the verdict stands whether or not it
	// can be removed.
	defer func() { _ = os.RemoveAll(dir) }()
	cp := filepath.Join(dir, filepath.Base(j.path))
	if _, err := j.CopyFile(cp); err != nil {
		return err
	}
	c, err := Open(cp, Options{ReadOnly: true})
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }() // opened read-only: closing loses nothing
	return c.verify(op)
}

func (j *Journal) verify(op string) error {
	v := &verifier{}
	err := j.view(op, func(tx *bbolt.Tx) error {
		for err := range tx.Check() {
			v.add(ErrCorrupt, "bbolt: %v", err)
		}
		live, term := v.liveIndex(tx), v.terminalIndex(tx)
		var d decoder
		err := forEachStream(tx, func(key Key, sb *bbolt.Bucket) error {
			v.stream(op, &d, key, sb, live, term)
			return nil
		})
		if err != nil {
			return err
		}
		for k := range live {
			v.add(ErrInconsistent, "%s is in the live index but has no stream", k)
		}
		for k := range term {
			v.add(ErrInconsistent, "%s is in the terminal index but has no stream", k)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(v.problems) > 0 {
		msg := fmt.Sprintf("%s: %d problem(s): %s", j.path, len(v.problems), v.problems[0])
		for _, p := range v.problems[1:] {
			msg += "; " + p
		}
		return errJournal(op, v.cause, "%s", msg)
	}
	return nil
}

// verifier collects what Verify finds: the first problem's cause and the
// first 20 problems' words.
type verifier struct {
	problems []string
	cause    error
}

func (v *verifier) add(c error, format string, args ...any) {
	if v.cause == nil {
		v.cause = c
	}
	if len(v.problems) < 20 {
		v.problems = append(v.problems, fmt.Sprintf(format, args...))
	}
}

// liveIndex reads the live index, by key.
func (v *verifier) liveIndex(tx *bbolt.Tx) map[string]LiveEntity {
	live := map[string]LiveEntity{}
	lc := tx.Bucket(bucketLive).Cursor()
	for k, val := lc.First(); k != nil; k, val = lc.Next() {
		key, ok := parseLiveKey(k)
		if !ok {
			v.add(ErrCorrupt, "live index key %q", k)
			continue
		}
		e, err := decodeLive(key, val)
		if err != nil {
			v.add(ErrCorrupt, "%v", err)
			continue
		}
		live[string(k)] = e
	}
	return live
}

// terminalIndex reads the terminal index: each ended entity's end time, by
// its live key.
func (v *verifier) terminalIndex(tx *bbolt.Tx) map[string]int64 {
	term := map[string]int64{}
	tc := tx.Bucket(bucketTerminal).Cursor()
	for k, _ := tc.First(); k != nil; k, _ = tc.Next() {
		if len(k) < 9 {
			v.add(ErrCorrupt, "terminal index key %q", k)
			continue
		}
		if _, ok := parseLiveKey(k[8:]); !ok {
			v.add(ErrCorrupt, "terminal index key %q", k)
			continue
		}
		if _, dup := term[string(k[8:])]; dup {
			v.add(ErrInconsistent, "%s is twice in the terminal index", k[8:])
		}
		term[string(k[8:])] = int64(seqFromKey(k[:8]))
	}
	return term
}

// stream checks one stream: its events decode, their sequence has no hole
// and nothing follows a terminal event, and the indexes say what its last
// event says. The stream's entries leave live and term (what is left has
// no stream).
func (v *verifier) stream(op string, d *decoder, key Key, sb *bbolt.Bucket, live map[string]LiveEntity, term map[string]int64) {
	if validKey(key) != nil {
		v.add(ErrCorrupt, "stream name %s", key)
		return
	}
	var last Event
	c := sb.Cursor()
	want := uint64(1)
	for k, val := c.First(); k != nil; k, val = c.Next() {
		ev, err := d.decode(op, key, k, val)
		if err != nil {
			v.add(errors.Unwrap(err), "%v", err)
			return
		}
		if ev.Seq != want {
			v.add(ErrInconsistent, "stream %s: seq %d where %d was expected", key, ev.Seq, want)
			return
		}
		if last.Terminal {
			v.add(ErrInconsistent, "stream %s: seq %d follows a terminal event", key, ev.Seq)
		}
		last = ev
		want++
	}
	if last.Seq == 0 {
		v.add(ErrInconsistent, "stream %s is empty", key)
		return
	}
	lk := string(liveKey(key))
	le, isLive := live[lk]
	ended, isTerm := term[lk]
	delete(live, lk)
	delete(term, lk)
	switch {
	case last.Terminal && isLive:
		v.add(ErrInconsistent, "%s ended at seq %d but is in the live index", key, last.Seq)
	case last.Terminal && !isTerm:
		v.add(ErrInconsistent, "%s ended at seq %d but is not in the terminal index", key, last.Seq)
	case last.Terminal && ended != last.Time.UnixNano():
		v.add(ErrInconsistent, "%s: terminal index time %d, event time %d", key, ended, last.Time.UnixNano())
	case !last.Terminal && isTerm:
		v.add(ErrInconsistent, "%s is live (seq %d) but in the terminal index", key, last.Seq)
	case !last.Terminal && !isLive:
		v.add(ErrInconsistent, "%s is live (seq %d) but not in the live index", key, last.Seq)
	case !last.Terminal && (le.LastSeq != last.Seq || le.Type != last.Type || !le.Updated.Equal(last.Time)):
		v.add(ErrInconsistent, "%s: live index says seq %d %q at %s, stream says seq %d %q at %s",
			key, le.LastSeq, le.Type, le.Updated, last.Seq, last.Type, last.Time)
	case !last.Terminal && (key.Kind == KindProcess) != (le.Parent != ""):
		v.add(ErrInconsistent, "%s: parent %q", key, le.Parent)
	}
}
