package recorder

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stockade/stockade/internal/failpoint"
	"github.com/stockade/stockade/spec"
)

// SyncEvery is the longest a recorded write waits for its fsync.
const SyncEvery = time.Second

// Store is a journal's recording directory.
type Store struct {
	dir string
	def spec.Record
	log *slog.Logger
	// after arms a recording's sync timer: time.AfterFunc (a test's
	// fake fires it at will).
	after func(time.Duration, func()) *time.Timer

	// mu guards live: the recordings this store made or resumed and
	// that are not closed (a nil value: a Resume under way). Resume
	// appends to files a live Recording may still write: it refuses.
	mu   sync.Mutex
	live map[string]*Recording

	stats storeStats

	// watchers counts the Follows under way; followers counts them per
	// process, and wakes holds, per followed process, the channel its
	// recording's next change closes (wmu guards both).
	watchers  atomic.Int32
	wmu       sync.Mutex
	followers map[string]int
	wakes     map[string]chan struct{}
}

// storeStats counts what the store's recordings took since it opened.
type storeStats struct {
	recorded, gaps, dropped atomic.Int64
	mu                      sync.Mutex
	verdicts                map[string]uint64
}

// Stats is what a store's recordings took since it opened: output bytes
// written to disk, bytes journaled lost in place (gap records), bytes a
// failed write dropped, and the egress decisions recorded by verdict.
type Stats struct {
	Recorded, Gaps, Dropped int64
	Decisions               map[string]uint64
}

// Stats returns the store's counts.
func (s *Store) Stats() Stats {
	st := Stats{Recorded: s.stats.recorded.Load(), Gaps: s.stats.gaps.Load(), Dropped: s.stats.dropped.Load(), Decisions: map[string]uint64{}}
	s.stats.mu.Lock()
	for k, v := range s.stats.verdicts {
		st.Decisions[k] = v
	}
	s.stats.mu.Unlock()
	return st
}

// CountDecision counts one egress decision recorded (DecisionLog.Append)
// with its verdict.
func (s *Store) CountDecision(verdict string) {
	s.stats.mu.Lock()
	if s.stats.verdicts == nil {
		s.stats.verdicts = map[string]uint64{}
	}
	s.stats.verdicts[verdict]++
	s.stats.mu.Unlock()
}

// Open makes (if needed) and opens the recording directory dir, 0700 like
// the journal's. def is the default bound of every process (spec.Record's
// zero fields take spec's defaults); log receives the write failures no
// caller is waiting for (a timed sync), nil is quiet.
func Open(dir string, def spec.Record, log *slog.Logger) (*Store, error) {
	if err := def.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, spec.Wrap(spec.CodeJournal, "recorder", err, "making the recording directory %s", dir)
	}
	return &Store{dir: dir, def: def.Over(spec.Record{}), log: log, after: time.AfterFunc}, nil
}

// Path is the store's directory.
func (s *Store) Path() string { return s.dir }

// Bounds is what a process asking r records: r over the store's default.
func (s *Store) Bounds(r spec.Record) spec.Record { return r.Over(s.def) }

func headName(dir, id string) string { return filepath.Join(dir, id+".rec") }

func tailName(dir, id string, n uint64) string {
	return filepath.Join(dir, id+".rec."+strconv.FormatUint(n, 10))
}

// validID keeps a process id a plain file name.
func validID(id string) error { return plainName("process", id) }

// plainName keeps an id (a process's or a sandbox's: what) a plain file
// name.
func plainName(what, id string) error {
	if id == "" || len(id) > 128 {
		return spec.Errorf(spec.CodeInvalidArgument, "recorder", "%s id %q is empty or over 128 bytes", what, id)
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return spec.Errorf(spec.CodeInvalidArgument, "recorder", "%s id %q has a character other than [A-Za-z0-9_-]", what, id)
		}
	}
	return nil
}

// Create starts the recording of process id with bounds r (over the
// store's default). It returns nil, nil when r turns recording off.
func (s *Store) Create(id string, r spec.Record) (*Recording, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	rec, err := s.create(id, r)
	if rec != nil {
		s.mu.Lock()
		s.setLive(id, rec)
		s.mu.Unlock()
		s.wake(id)
	}
	return rec, err
}

// create is Create's work, with id and r valid.
func (s *Store) create(id string, r spec.Record) (*Recording, error) {
	b := s.Bounds(r)
	if b.Off {
		return nil, nil
	}
	rec := &Recording{store: s, id: id, head: b.Head, tail: b.Tail}
	f, err := rec.newSegment(0)
	if err != nil {
		return nil, err
	}
	rec.cur = f
	return rec, nil
}

// setLive marks rec live; called with s.mu held.
func (s *Store) setLive(id string, rec *Recording) {
	if s.live == nil {
		s.live = make(map[string]*Recording)
	}
	s.live[id] = rec
}

// forget is Close's: rec is no longer live.
func (s *Store) forget(rec *Recording) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live[rec.id] == rec {
		delete(s.live, rec.id)
	}
}

// IDs lists the processes that have a recording in the store.
func (s *Store) IDs() ([]string, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, spec.Wrap(spec.CodeJournal, "recorder", err, "listing %s", s.dir)
	}
	var ids []string
	for _, e := range ents {
		if id, ok := strings.CutSuffix(e.Name(), ".rec"); ok && validID(id) == nil {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// Remove deletes process id's recording (its tail segments first, so a
// crash never leaves tails without their head). A missing one is no error.
func (s *Store) Remove(id string) error {
	if err := validID(id); err != nil {
		return err
	}
	tails, err := filepath.Glob(filepath.Join(s.dir, id+".rec.*"))
	if err != nil {
		return spec.Wrap(spec.CodeJournal, "recorder", err, "listing the recording of %s", id)
	}
	for _, name := range append(tails, headName(s.dir, id)) {
		if err := os.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
			return spec.Wrap(spec.CodeJournal, "recorder", err, "removing the recording of %s", id)
		}
	}
	if err := removeSide(s.dir, id); err != nil {
		return spec.Wrap(spec.CodeJournal, "recorder", err, "removing the recording of %s", id)
	}
	return nil
}

// Recording is one process's recording, written by its output read loop.
// Write never blocks on a sync: a timer syncs at most SyncEvery after a
// write, off the read loop. Close writes the end record and syncs.
type Recording struct {
	store      *Store
	id         string
	head, tail int64

	// syncMu orders syncs and the final Close: files are closed only
	// under it, never while another sync uses them.
	syncMu sync.Mutex

	mu       sync.Mutex
	cur      *os.File
	curSeg   uint64
	curBytes int64 // payload bytes in cur
	// total is the output seen so far (both streams, recorded or not):
	// the start of the next segment.
	total          int64
	stdout, stderr int64
	dropped        int64
	// droppedBefore is the bytes a resumed recording's gap records on
	// disk already count (see Resume): the end record says them too.
	droppedBefore int64
	failed        error
	retired       []retired // segments written to, not yet synced
	dirDirty      bool
	timer         *time.Timer
	closed        bool
	buf           []byte
}

type retired struct {
	seg uint64
	f   *os.File
}

// newSegment makes segment n, with its header. Called with mu held (or
// before the recording is shared).
func (r *Recording) newSegment(n uint64) (*os.File, error) {
	name := headName(r.store.dir, r.id)
	if n > 0 {
		name = tailName(r.store.dir, r.id, n)
	}
	// Exclusive: a process is recorded once; a file already there is not
	// ours to overwrite.
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		return nil, spec.Wrap(spec.CodeJournal, "recorder", err, "creating segment %d of the recording of %s", n, r.id)
	}
	hdr := appendHeader(nil, header{segment: n, start: r.total, head: r.head, tail: r.tail})
	if _, err := f.Write(hdr); err != nil {
		_ = f.Close() // the Write error is the one to report
		// A segment without its header is left to no one: a reader
		// would wait at it for ever while the records go on in the one
		// before (the end record included).
		_ = os.Remove(name)
		return nil, spec.Wrap(spec.CodeJournal, "recorder", err, "writing segment %d of the recording of %s", n, r.id)
	}
	r.dirDirty = true
	return f, nil
}

// Write records p as a chunk of stream (TypeStdout or TypeStderr). It
// returns the error that made the recording incomplete, once: later writes
// are counted as dropped and never fail the caller again. A nil Recording
// records nothing.
func (r *Recording) Write(stream byte, p []byte) error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	if stream == TypeStderr {
		r.stderr += int64(len(p))
	} else {
		r.stdout += int64(len(p))
	}
	if r.failed != nil {
		r.dropped += int64(len(p))
		r.total += int64(len(p))
		r.store.stats.dropped.Add(int64(len(p)))
		return nil
	}
	for len(p) > 0 {
		if (r.curSeg == 0 && r.curBytes >= r.head) || (r.curSeg > 0 && r.curBytes >= r.tail) {
			if err := r.rotate(); err != nil {
				r.fail(err, int64(len(p)))
				return err
			}
		}
		k := min(len(p), MaxPayload)
		if r.curSeg == 0 {
			k = min(k, int(r.head-r.curBytes))
		}
		r.buf = appendRecord(r.buf[:0], stream, p[:k])
		if _, err := r.cur.Write(r.buf); err != nil {
			err = spec.Wrap(spec.CodeJournal, "recorder", err, "writing the recording of %s", r.id)
			r.fail(err, int64(len(p)))
			return err
		}
		r.curBytes += int64(k)
		r.total += int64(k)
		r.store.stats.recorded.Add(int64(k))
		p = p[k:]
	}
	if len(r.buf) > 2*MaxPayload/16 {
		r.buf = nil // a rare big chunk is not kept for the whole recording
	}
	if r.timer == nil {
		r.timer = r.store.after(SyncEvery, r.sync)
	}
	r.store.wake(r.id)
	return nil
}

// fail marks the recording incomplete; n bytes of the current chunk were
// not recorded.
func (r *Recording) fail(err error, n int64) {
	r.store.stats.dropped.Add(n)
	r.failed = err
	r.dropped += n
	r.total += n
}

// rotate moves from the head, or a full tail segment, to the next tail
// segment and deletes the one before the full one: the last Tail bytes
// stay on disk, at most two tail segments exist.
func (r *Recording) rotate() error {
	next := r.curSeg + 1
	if next >= 3 {
		old := next - 2
		if err := os.Remove(tailName(r.store.dir, r.id, old)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return spec.Wrap(spec.CodeJournal, "recorder", err, "deleting segment %d of the recording of %s", old, r.id)
		}
		// Not synced yet and now deleted: close it at once so its space
		// is freed now, not at the next sync.
		for i, rt := range r.retired {
			if rt.seg == old {
				_ = rt.f.Close() // deleted above: nothing of it is kept
				r.retired = append(r.retired[:i], r.retired[i+1:]...)
				break
			}
		}
	}
	f, err := r.newSegment(next)
	if err != nil {
		return err
	}
	r.retired = append(r.retired, retired{seg: r.curSeg, f: r.cur})
	r.cur, r.curSeg, r.curBytes = f, next, 0
	return nil
}

// sync is the timer's: it fsyncs what was written since the last sync
// (the current segment, retired ones, the directory when a name was made)
// without holding up Write, then closes the retired segments.
func (r *Recording) sync() {
	r.syncMu.Lock()
	defer r.syncMu.Unlock()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return // Close synced everything
	}
	r.timer = nil
	ret, cur, dir := r.retired, r.cur, r.dirDirty
	r.retired, r.dirDirty = nil, false
	r.mu.Unlock()
	err := r.syncFiles(ret, cur, dir)
	for _, rt := range ret {
		if cerr := rt.f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		r.mu.Lock()
		if r.failed == nil {
			r.failed = err
		}
		r.mu.Unlock()
		r.store.log.Warn("syncing a recording failed; it is marked incomplete", "process", r.id, "err", err)
	}
}

func (r *Recording) syncFiles(ret []retired, cur *os.File, dir bool) error {
	var errs []error
	for _, rt := range ret {
		if err := rt.f.Sync(); err != nil && !errors.Is(err, os.ErrClosed) {
			errs = append(errs, err)
		}
	}
	if cur != nil {
		// A rotation may have retired and closed it meanwhile: its sync
		// is then the next one's.
		if err := cur.Sync(); err != nil && !errors.Is(err, os.ErrClosed) {
			errs = append(errs, err)
		}
	}
	if dir {
		if err := syncDir(r.store.dir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return spec.Wrap(spec.CodeJournal, "recorder", err, "syncing the recording of %s", r.id)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Close ends the recording: it writes the end record (and, if bytes were
// dropped, a gap record before it), syncs every file and the directory and
// closes them. It returns the error that made the recording incomplete, if
// any: the caller logs it; the process goes on regardless. A nil Recording
// closes nothing.
func (r *Recording) Close() error { return r.finish(true) }

// finish writes the recording's last records (the gap of dropped bytes;
// the end record when final), syncs every file and the directory, and
// closes them: Close and Suspend.
func (r *Recording) finish(final bool) error {
	if r == nil {
		return nil
	}
	r.syncMu.Lock()
	defer r.syncMu.Unlock()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	if r.timer != nil {
		r.timer.Stop()
	}
	defer r.store.forget(r)
	// Even after a failure the end is worth a try: a full disk may take
	// the few bytes that say how much is missing.
	var tail []byte
	if r.dropped > 0 {
		tail = appendRecord(tail, TypeGap, be64(uint64(r.dropped)))
	}
	if final {
		tail = appendRecord(tail, TypeEnd, endPayload(end{stdout: r.stdout, stderr: r.stderr, dropped: r.droppedBefore + r.dropped}))
	}
	var errs []error
	if r.failed != nil && final {
		errs = append(errs, r.failed)
	}
	if len(tail) > 0 {
		if _, err := r.cur.Write(tail); err != nil {
			errs = append(errs, spec.Wrap(spec.CodeJournal, "recorder", err, "writing the end of the recording of %s", r.id))
		}
	}
	ret, cur, dir := r.retired, r.cur, r.dirDirty
	r.retired = nil
	r.mu.Unlock()
	if err := r.syncFiles(ret, cur, dir); err != nil {
		errs = append(errs, err)
	}
	if final {
		failpoint.Hit(failpoint.RecorderEndRecord)
	}
	for _, rt := range ret {
		if err := rt.f.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := cur.Close(); err != nil {
		errs = append(errs, err)
	}
	r.store.wake(r.id)
	if len(errs) > 0 {
		return spec.Wrap(spec.CodeJournal, "recorder", errors.Join(errs...), "the recording of %s is incomplete", r.id)
	}
	return nil
}

// SetTotals sets the stdout and stderr totals so far (later Writes add to
// them): Close writes them in the end record, which Read's Summary shows. A
// recording counts them itself; a resumed one only as far as the records
// on disk go (see Resume), so a caller that knows the exact totals (the
// in-sandbox agent counts them) sets them before Close. Their sum should be
// the output so far (the resume offset plus what was written since): one
// that is not is set all the same, with a warning to the store's log;
// negative totals are ignored, with a warning. A nil or closed Recording
// ignores it.
func (r *Recording) SetTotals(stdout, stderr int64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	if stdout < 0 || stderr < 0 {
		r.store.log.Warn("negative output totals ignored", "process", r.id, "stdout", stdout, "stderr", stderr)
		return
	}
	if stdout+stderr != r.total {
		r.store.log.Warn("output totals differ from the output recorded", "process", r.id, "stdout", stdout, "stderr", stderr, "recorded", r.total)
	}
	r.stdout, r.stderr = stdout, stderr
}

func be64(v uint64) []byte {
	b := make([]byte, 8)
	for i := 7; i >= 0; i-- {
		b[i] = byte(v)
		v >>= 8
	}
	return b
}

// String names the recording (for logs).
func (r *Recording) String() string { return fmt.Sprintf("recording of %s", r.id) }

// Sync makes everything written so far durable (every segment and the
// directory) and keeps the recording open: the read loop's end, before
// the process's exit is journaled. The end record comes only with Close,
// after the exit is journaled, so a recording never says complete while
// its process may still run. A nil or closed Recording syncs nothing.
func (r *Recording) Sync() error {
	if r == nil {
		return nil
	}
	r.syncMu.Lock()
	defer r.syncMu.Unlock()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	ret, cur, dir := r.retired, r.cur, r.dirDirty
	r.retired, r.dirDirty = nil, false
	r.mu.Unlock()
	err := r.syncFiles(ret, cur, dir)
	for _, rt := range ret {
		if cerr := rt.f.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// Gap records that the next n bytes of output are lost (the caller knows
// they will never come: an in-sandbox agent dropped them), where they
// would have stood: a gap record at the current offset, which Read hands
// out in place. It returns the offset the gap starts at. A nil or closed
// Recording records nothing.
func (r *Recording) Gap(n int64) (int64, error) {
	if r == nil || n <= 0 {
		return 0, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	at := r.total
	if r.closed {
		return at, nil
	}
	r.total += n
	r.store.stats.gaps.Add(n)
	if r.failed != nil {
		r.dropped += n
		return at, nil
	}
	r.buf = appendRecord(r.buf[:0], TypeGap, be64(uint64(n)))
	if _, err := r.cur.Write(r.buf); err != nil {
		err = spec.Wrap(spec.CodeJournal, "recorder", err, "writing a gap in the recording of %s", r.id)
		r.failed = err
		r.dropped += n
		return at, err
	}
	if r.timer == nil {
		r.timer = r.store.after(SyncEvery, r.sync)
	}
	r.store.wake(r.id)
	return at, nil
}

// Suspend syncs and closes the recording WITHOUT its end record: the
// process goes on without this runtime (it is closing, and the process's
// sandbox keeps it), and the next runtime resumes the recording (Resume)
// where it stands. A reader sees it as a live recording meanwhile. A
// pending gap (bytes dropped by a write error) is written first so the
// count is not lost.
func (r *Recording) Suspend() error { return r.finish(false) }
