package journal

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/stockade/stockade/spec"
)

// SchemaVersion is the meta schema version this build writes and reads.
const SchemaVersion = 1

// DefaultLockTimeout is how long Open waits for another process's lock when
// Options.LockTimeout is zero.
const DefaultLockTimeout = time.Second

// Kind names what an event stream is about.
type Kind string

// The kinds of stream.
const (
	KindSandbox Kind = "sandbox"
	KindProcess Kind = "process" // its live entry names its sandbox as Parent
	KindRuntime Kind = "runtime" // runtime-wide facts, e.g. orphan removals
)

// Key names one entity's stream.
type Key struct {
	Kind Kind
	ID   string
}

func (k Key) String() string { return string(k.Kind) + "/" + k.ID }

// Record is one event to append.
type Record struct {
	Key Key
	// Parent is a process's sandbox id: required on a process stream's first
	// event, optional (but equal) afterwards, empty for other kinds.
	Parent string
	// Type names the event, e.g. "sandbox.reserved": 1 to 255 printable
	// ASCII bytes, no space.
	Type string
	// Payload is the event's JSON (up to MaxPayload bytes) or empty.
	Payload json.RawMessage
	// Terminal says the event ends the entity (a removed sandbox, an exited
	// process): it leaves the live index, enters the retention index, and the
	// stream accepts no more events.
	Terminal bool
	// Sequenced makes the append conditional on the stream's position, so
	// a retry of an append whose outcome was unknown can never store the
	// event twice: the stream's last sequence must be After (0: the stream
	// does not exist yet). If instead the stream's last event is at After+1
	// and is this very record (type, terminal flag and payload), an earlier
	// call stored it: nothing is written and that event is returned.
	// Anything else fails with conflict (cause ErrSequence).
	Sequenced bool
	After     uint64
}

// Event is a stored event.
type Event struct {
	Key      Key
	Seq      uint64
	Type     string
	Version  uint16    // envelope version it was stored with
	Time     time.Time // when it was appended (Options.Now), UTC
	Payload  json.RawMessage
	Terminal bool
}

// LiveEntity is one entry of the live index.
type LiveEntity struct {
	Key     Key
	Parent  string    // a process's sandbox id
	LastSeq uint64    // sequence of its last event
	Type    string    // type of its last event
	Updated time.Time // time of its last event
}

// Options configure Open. The zero value is a writable journal with a
// generated owner on a new file, a 1 s lock wait and the wall clock.
type Options struct {
	// Owner, if set, must equal the journal's recorded owner, else Open fails
	// with identity_mismatch and touches nothing. It is never used to create
	// a journal: a new file always gets a random owner, so two runtimes never
	// share one by accident (an Owner given for a missing or empty file is an
	// identity_mismatch too).
	Owner string
	// LockTimeout bounds the wait for another process's lock; 0 means
	// DefaultLockTimeout. It is never unbounded.
	LockTimeout time.Duration
	// ReadOnly opens with a shared lock; writes fail with ErrReadOnly. The
	// file must exist.
	ReadOnly bool
	// Now stamps appended events; nil means time.Now.
	Now func() time.Time
}

// Journal is an open journal file. Its methods are safe for concurrent use.
type Journal struct {
	db       *bbolt.DB
	path     string
	owner    string
	readOnly bool
	now      func() time.Time

	daemonMu sync.Mutex
	daemon   string

	copyOf *CopyInfo // the copy marker, if the file is a copy (read-only then)

	reqs     chan *request // unbuffered: a send succeeds only into a batch
	closing  chan struct{}
	stopped  chan struct{}
	closed   atomic.Bool
	closeMu  sync.Mutex
	closeErr error
	pidFile  string

	subMu sync.Mutex
	subs  []*Subscription

	commits    atomic.Uint64 // transactions the committer ran (tests, benchmarks)
	stats      commitStats   // Stats' other counters
	failCommit func() error  // test hook: fail the commit transaction
}

var (
	bucketMeta     = []byte("meta")
	bucketStreams  = []byte("streams")
	bucketLive     = []byte("live")
	bucketTerminal = []byte("terminal")

	metaSchema  = []byte("schema")
	metaOwner   = []byte("owner")
	metaDaemon  = []byte("daemon")
	metaCreated = []byte("created")
	// The copy marker: CopyTo and CopyFile put it in every copy, Restore
	// removes it. See CopyInfo.
	metaCopyOf   = []byte("copy_of")
	metaCopiedAt = []byte("copied_at")

	kinds = []Kind{KindSandbox, KindProcess, KindRuntime}
)

// Open opens the journal at path, creating it (and its directory) if it does
// not exist and opts.ReadOnly is false. See the package doc for locking.
//
// The journal's directory must be the opener's own: owned by its effective
// uid and not writable by group or others, else invalid_argument (cause
// ErrDirOwner or ErrDirWritable; see OpenDir), whether the file exists or
// not, read-only or not.
//
// Errors: journal_locked (another process holds the file), identity_mismatch
// (opts.Owner differs; or, cause ErrCopy, a writable Open of a copy made by
// CopyTo or CopyFile, which opens only read-only), not_found (read-only and missing), journal (unknown
// schema, not a journal, I/O).
func Open(path string, opts Options) (*Journal, error) {
	const op = "journal.open"
	if path == "" {
		return nil, errInvalid(op, "empty journal path")
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	timeout := opts.LockTimeout
	if timeout <= 0 {
		timeout = DefaultLockTimeout
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		if opts.ReadOnly {
			return nil, spec.Wrap(spec.CodeNotFound, op, err, "journal %s", path)
		}
		if opts.Owner != "" {
			return nil, spec.Errorf(spec.CodeIdentityMismatch, op,
				"journal %s does not exist, so it cannot hold owner %q (a new journal gets a generated owner)", path, opts.Owner)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, errJournal(op, err, "create directory for %s", path)
		}
	}
	dir, err := OpenDir(op, filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	// The file is opened through the directory just checked: one swapped
	// in at its path since is not the one opened. bbolt holds its own
	// descriptor of the file, so the directory's is closed after.
	defer func() { _ = dir.Close() }() // only read
	start := time.Now()
	db, err := bbolt.Open(dir.Join(filepath.Base(path)), 0o600, &bbolt.Options{
		Timeout:      timeout,
		ReadOnly:     opts.ReadOnly,
		FreelistType: bbolt.FreelistMapType,
	})
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, lockedError(op, path, time.Since(start))
		}
		if errors.Is(err, berrors.ErrInvalid) || errors.Is(err, berrors.ErrVersionMismatch) || errors.Is(err, berrors.ErrChecksum) {
			return nil, errJournal(op, errors.Join(ErrNotJournal, err), "open %s", path)
		}
		return nil, errJournal(op, err, "open %s", path)
	}
	j := &Journal{db: db, path: path, readOnly: opts.ReadOnly, now: opts.Now}
	if j.now == nil {
		j.now = time.Now
	}
	if err := j.load(opts.Owner); err != nil {
		_ = db.Close()
		return nil, err
	}
	if !j.readOnly {
		j.pidFile = path + ".pid"
		writePIDFile(j.pidFile)
		j.reqs = make(chan *request)
		j.closing = make(chan struct{})
		j.stopped = make(chan struct{})
		go j.run()
	}
	return j, nil
}

// load checks meta (read-only first, so a refused file is never written) and
// initialises a new file.
func (j *Journal) load(wantOwner string) error {
	const op = "journal.open"
	var fresh bool
	err := j.db.View(func(tx *bbolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			empty := true
			_ = tx.ForEach(func([]byte, *bbolt.Bucket) error { empty = false; return nil })
			if !empty || j.readOnly {
				return errJournal(op, ErrNotJournal, "%s has no meta bucket", j.path)
			}
			fresh = true
			return nil
		}
		sv := meta.Get(metaSchema)
		v, perr := strconv.Atoi(string(sv))
		if perr != nil {
			return errJournal(op, ErrUnknownSchema, "%s: schema version %q", j.path, sv)
		}
		if v != SchemaVersion {
			return errJournal(op, ErrUnknownSchema, "%s: schema version %d (this build reads %d); file untouched", j.path, v, SchemaVersion)
		}
		for _, name := range [][]byte{bucketStreams, bucketLive, bucketTerminal} {
			if tx.Bucket(name) == nil {
				return errJournal(op, ErrCorrupt, "%s: bucket %q missing", j.path, name)
			}
		}
		j.owner = string(meta.Get(metaOwner))
		if j.owner == "" {
			return errJournal(op, ErrCorrupt, "%s: no owner in meta", j.path)
		}
		j.daemon = string(meta.Get(metaDaemon))
		// Presence marks a copy, whatever the values: a damaged marker must
		// not turn a copy back into a journal.
		if of := meta.Get(metaCopyOf); of != nil {
			ci := &CopyInfo{Of: string(of)}
			ci.At, _ = time.Parse(time.RFC3339Nano, string(meta.Get(metaCopiedAt)))
			j.copyOf = ci
			if !j.readOnly {
				return copyError(op, j.path, ci)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if fresh {
		if wantOwner != "" {
			return spec.Errorf(spec.CodeIdentityMismatch, op,
				"journal %s is empty, so it cannot hold owner %q (a new journal gets a generated owner)", j.path, wantOwner)
		}
		owner, err := NewID()
		if err != nil {
			return errJournal(op, err, "generate owner id")
		}
		err = j.db.Update(func(tx *bbolt.Tx) error {
			meta, err := tx.CreateBucket(bucketMeta)
			if err != nil {
				return err
			}
			for k, v := range map[string]string{
				string(metaSchema):  strconv.Itoa(SchemaVersion),
				string(metaOwner):   owner,
				string(metaCreated): j.now().UTC().Format(time.RFC3339Nano),
			} {
				if err := meta.Put([]byte(k), []byte(v)); err != nil {
					return err
				}
			}
			for _, name := range [][]byte{bucketLive, bucketTerminal} {
				if _, err := tx.CreateBucket(name); err != nil {
					return err
				}
			}
			streams, err := tx.CreateBucket(bucketStreams)
			if err != nil {
				return err
			}
			for _, k := range kinds {
				if _, err := streams.CreateBucket([]byte(k)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return errJournal(op, err, "initialise %s", j.path)
		}
		j.owner = owner
		return nil
	}
	if wantOwner != "" && wantOwner != j.owner {
		return spec.Errorf(spec.CodeIdentityMismatch, op, "journal %s belongs to owner %q, not %q", j.path, j.owner, wantOwner)
	}
	return nil
}

// NewID returns a new entity id: a 48-bit millisecond timestamp then 96
// random bits, as 29 lowercase base32 characters (digits 2-7 and letters, in
// an order-preserving alphabet), usable in Docker names and labels.
//
// Why time first: ids key the stream and live-index buckets, and bbolt
// rewrites every page an append touches. Ids made close in time sort close
// together, so the entities a group commit creates share a few pages at the
// right edge of each bucket instead of dirtying one random page each.
// 96 random bits keep ids unguessable and collision-free.
func NewID() (string, error) {
	var b [18]byte
	ms := uint64(time.Now().UnixMilli())
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	if _, err := rand.Read(b[6:]); err != nil {
		return "", err
	}
	return idEncoding.EncodeToString(b[:]), nil
}

// idEncoding's alphabet is in ASCII order, so ids sort as their bytes do.
var idEncoding = base32.NewEncoding("234567abcdefghijklmnopqrstuvwxyz").WithPadding(base32.NoPadding)

// Path returns the journal file's absolute path.
func (j *Journal) Path() string { return j.path }

// Owner returns the journal's owner id.
func (j *Journal) Owner() string { return j.owner }

// CopyOf reports whether the file is a copy made by CopyTo or CopyFile (such
// a journal is always read-only) and, if so, of which journal and when.
func (j *Journal) CopyOf() (CopyInfo, bool) {
	if j.copyOf == nil {
		return CopyInfo{}, false
	}
	return *j.copyOf, true
}

// ReadOnly reports whether the journal was opened read-only.
func (j *Journal) ReadOnly() bool { return j.readOnly }

// DaemonID returns the recorded Docker daemon id, or "" before BindDaemon.
func (j *Journal) DaemonID() string {
	j.daemonMu.Lock()
	defer j.daemonMu.Unlock()
	return j.daemon
}

// BindDaemon records the Docker daemon id on first use and checks it after:
// an id different from the recorded one fails with identity_mismatch and
// nothing is written. The write is durable on return.
func (j *Journal) BindDaemon(ctx context.Context, id string) error {
	const op = "journal.bind_daemon"
	if id == "" || !validType(id) {
		return errInvalid(op, "daemon id %q", id)
	}
	if err := j.usable(op, true); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return spec.Wrap(spec.CodeCancelled, op, err, "")
	}
	j.daemonMu.Lock()
	defer j.daemonMu.Unlock()
	var recorded string
	err := j.db.Update(func(tx *bbolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if cur := meta.Get(metaDaemon); cur != nil {
			recorded = string(cur)
			return nil
		}
		return meta.Put(metaDaemon, []byte(id))
	})
	if err != nil {
		return errJournal(op, err, "record daemon id in %s", j.path)
	}
	if recorded != "" && recorded != id {
		j.daemon = recorded
		return spec.Errorf(spec.CodeIdentityMismatch, op, "journal %s is bound to Docker daemon %q, not %q", j.path, recorded, id)
	}
	j.daemon = id
	return nil
}

// usable reports ErrClosed or, for writes, ErrReadOnly.
func (j *Journal) usable(op string, write bool) error {
	if j.closed.Load() {
		return errJournal(op, ErrClosed, "%s", j.path)
	}
	if write && j.readOnly {
		return errJournal(op, ErrReadOnly, "%s", j.path)
	}
	return nil
}

// Close waits for queued appends to commit, stops the committer and closes
// the file. Calls after the first return the first result.
func (j *Journal) Close() error {
	j.closeMu.Lock()
	defer j.closeMu.Unlock()
	if j.closed.Swap(true) {
		return j.closeErr
	}
	if j.closing != nil {
		close(j.closing)
		<-j.stopped
	}
	j.closeSubs()
	if err := j.db.Close(); err != nil {
		j.closeErr = errJournal("journal.close", err, "close %s", j.path)
	}
	if j.pidFile != "" {
		removePIDFile(j.pidFile)
	}
	return j.closeErr
}

// Key encodings.

func seqKey(seq uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], seq)
	return b[:]
}

func liveKey(k Key) []byte {
	b := make([]byte, 0, len(k.Kind)+1+len(k.ID))
	return append(append(append(b, k.Kind...), '/'), k.ID...)
}

func parseLiveKey(b []byte) (Key, bool) {
	i := bytes.IndexByte(b, '/')
	if i < 0 {
		return Key{}, false
	}
	k := Key{Kind: Kind(b[:i]), ID: string(b[i+1:])}
	return k, validKey(k) == nil
}

func terminalKey(ended int64, k Key) []byte {
	b := make([]byte, 8, 8+len(k.Kind)+1+len(k.ID))
	binary.BigEndian.PutUint64(b, uint64(ended))
	return append(append(append(b, k.Kind...), '/'), k.ID...)
}

func encodeLive(e LiveEntity) []byte {
	b := make([]byte, 0, 17+len(e.Parent)+len(e.Type))
	b = binary.BigEndian.AppendUint64(b, e.LastSeq)
	b = binary.BigEndian.AppendUint64(b, uint64(e.Updated.UnixNano()))
	b = append(b, byte(len(e.Parent)))
	b = append(b, e.Parent...)
	return append(b, e.Type...)
}

func decodeLive(k Key, b []byte) (LiveEntity, error) {
	e := LiveEntity{Key: k}
	if len(b) < 17 || 17+int(b[16]) > len(b) {
		return e, fmt.Errorf("%w: live entry of %s is %d bytes", ErrCorrupt, k, len(b))
	}
	e.LastSeq = binary.BigEndian.Uint64(b)
	e.Updated = unixTime(int64(binary.BigEndian.Uint64(b[8:])))
	p := int(b[16])
	e.Parent = string(b[17 : 17+p])
	e.Type = string(b[17+p:])
	if e.LastSeq == 0 || !validType(e.Type) {
		return e, fmt.Errorf("%w: live entry of %s", ErrCorrupt, k)
	}
	return e, nil
}

// Validation.

const maxIDLen = 128

func validID(id string) bool {
	if len(id) == 0 || len(id) > maxIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' || c == '/' {
			return false
		}
	}
	return true
}

func validKind(k Kind) bool {
	return k == KindSandbox || k == KindProcess || k == KindRuntime
}

func validKey(k Key) error {
	if !validKind(k.Kind) {
		return fmt.Errorf("unknown kind %q", k.Kind)
	}
	if !validID(k.ID) {
		return fmt.Errorf("bad %s id %q (1 to %d printable ASCII bytes, no '/')", k.Kind, k.ID, maxIDLen)
	}
	return nil
}
