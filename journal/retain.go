package journal

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/stockade/stockade/spec"
)

// retainBatch is how many entities one Retain transaction deletes.
const retainBatch = 1000

// Retain deletes every terminal entity whose terminal event is older than
// olderThan (by Options.Now), stream and index entries together, in
// transactions of up to 1000 entities, and returns how many it deleted. Live
// entities are never touched. bbolt reuses the freed pages; Compact shrinks
// the file. ctx is checked between transactions: entities already deleted
// stay deleted.
func (j *Journal) Retain(ctx context.Context, olderThan time.Duration) (removed int, err error) {
	const op = "journal.retain"
	if olderThan < 0 {
		return 0, errInvalid(op, "negative age %s", olderThan)
	}
	if err := j.usable(op, true); err != nil {
		return 0, err
	}
	cutoff := j.now().Add(-olderThan).UnixNano()
	for {
		if err := ctx.Err(); err != nil {
			return removed, spec.Wrap(spec.CodeCancelled, op, err, "after removing %d", removed)
		}
		n := 0
		err := j.db.Update(func(tx *bbolt.Tx) error {
			tb := tx.Bucket(bucketTerminal)
			streams := tx.Bucket(bucketStreams)
			var done [][]byte
			c := tb.Cursor()
			for k, _ := c.First(); k != nil && len(done) < retainBatch; k, _ = c.Next() {
				if len(k) < 9 || int64(seqFromKey(k[:8])) > cutoff {
					break
				}
				key, ok := parseLiveKey(k[8:])
				if !ok {
					return errJournal(op, ErrCorrupt, "terminal index key %q", k)
				}
				kb := streams.Bucket([]byte(key.Kind))
				if err := kb.DeleteBucket([]byte(key.ID)); err != nil && !errors.Is(err, berrors.ErrBucketNotFound) {
					return err
				}
				done = append(done, append([]byte(nil), k...))
			}
			for _, k := range done {
				if err := tb.Delete(k); err != nil {
					return err
				}
			}
			n = len(done)
			return nil
		})
		if err != nil {
			if spec.CodeOf(err) != "" {
				return removed, err
			}
			return removed, errJournal(op, err, "retain in %s", j.path)
		}
		removed += n
		if n < retainBatch {
			return removed, nil
		}
	}
}

// Compact copies the journal at src into a new file dst, dropping free pages,
// so dst is as small as the data allows. src must not be held by a writer (it
// is opened read-only, journal_locked otherwise) and must be a journal this
// build reads; dst must not exist. On error dst is removed. Replace src with
// dst yourself (a rename) while no runtime holds it.
func Compact(src, dst string) (err error) {
	const op = "journal.compact"
	if _, err := os.Stat(dst); !errors.Is(err, fs.ErrNotExist) {
		return errInvalid(op, "destination %s exists (or cannot be checked: %v)", dst, err)
	}
	sj, err := Open(src, Options{ReadOnly: true})
	if err != nil {
		return err
	}
	defer func() { _ = sj.Close() }() // opened read-only: closing loses nothing
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return errJournal(op, err, "create directory for %s", dst)
	}
	ddb, err := bbolt.Open(dst, 0o600, &bbolt.Options{Timeout: DefaultLockTimeout, FreelistType: bbolt.FreelistMapType})
	if err != nil {
		return errJournal(op, err, "create %s", dst)
	}
	defer func() {
		if cerr := ddb.Close(); err == nil && cerr != nil {
			err = errJournal(op, cerr, "close %s", dst)
		}
		if err != nil {
			_ = os.Remove(dst)
			return
		}
		err = syncDir(op, filepath.Dir(dst))
	}()
	if err := bbolt.Compact(ddb, sj.db, 64<<20); err != nil {
		return errJournal(op, err, "compact %s into %s", src, dst)
	}
	return nil
}

// syncDir fsyncs a directory, so a name just given to a file survives a
// crash.
func syncDir(op, dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return errJournal(op, err, "sync %s", dir)
	}
	if err := d.Sync(); err != nil {
		_ = d.Close() // the Sync error is the one to report
		return errJournal(op, err, "sync %s", dir)
	}
	if err := d.Close(); err != nil {
		return errJournal(op, err, "sync %s", dir)
	}
	return nil
}
