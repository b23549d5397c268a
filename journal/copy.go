package journal

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/bbolt"

	"github.com/stockade/stockade/spec"
)

// Copies of a journal: taken by snapshot, marked, restored, published in
// one rename.

// CopyInfo is the marker CopyTo and CopyFile put in a copy's meta bucket. A
// copy carries the original's owner id, which labels every Docker resource
// the original's runtime makes; a runtime started on the copy would take the
// sandboxes the original made after the copy for orphans and remove them.
// So Open refuses a marked file unless Options.ReadOnly is set (ErrCopy),
// and only Restore, asked deliberately, turns a copy back into a journal.
type CopyInfo struct {
	Of string    // absolute path of the journal the copy was taken from
	At time.Time // when the copy was taken (the source's Options.Now), UTC; zero if unrecorded
}

func copyError(op, path string, ci *CopyInfo) error {
	at := "an unrecorded time"
	if !ci.At.IsZero() {
		at = ci.At.UTC().Format(time.RFC3339)
	}
	return spec.Wrap(spec.CodeIdentityMismatch, op, ErrCopy,
		"%s is a copy of journal %q taken at %s: it opens only read-only (Options.ReadOnly), "+
			"since a runtime on it would share the original's owner and remove the original's newer sandboxes as orphans; "+
			"to resume from it deliberately, once the original will never run again, "+
			"restore it to a new file with `stockade journal restore %s DEST` (journal.Restore) and open that",
		path, ci.Of, at, path)
}

// Restore turns the copy at copyPath into a writable journal at dstPath, a
// new file: the same owner, daemon id and events, without the copy marker.
// The copy itself is left as it was. Use it only when the original journal
// will never be run again (lost or damaged): the restored journal has the
// original's owner, so two runtimes on the two files would each remove the
// other's sandboxes as orphans.
//
// dstPath must not exist (it is never overwritten); the result is written
// beside it, fsynced, and then linked into place, and the directory fsynced,
// so a crash leaves either no dstPath or a complete one.
//
// Errors: invalid_argument (dstPath exists, cause fs.ErrExist; copyPath is
// not a copy), not_found (copyPath missing), journal_locked, journal
// (copyPath is not a journal this build reads, I/O).
func Restore(copyPath, dstPath string) error {
	const op = "journal.restore"
	if copyPath == "" || dstPath == "" {
		return errInvalid(op, "empty path (copy %q, destination %q)", copyPath, dstPath)
	}
	if abs, err := filepath.Abs(dstPath); err == nil {
		dstPath = abs
	}
	if err := refuseExisting(op, dstPath); err != nil {
		return err
	}
	src, err := Open(copyPath, Options{ReadOnly: true})
	if err != nil {
		return err
	}
	defer func() { _ = src.Close() }() // opened read-only: closing loses nothing
	if src.copyOf == nil {
		return errInvalid(op, "%s is not a copy (no %s marker): a journal needs no restore; open it directly", src.path, metaCopyOf)
	}
	if err := os.MkdirAll(filepath.Dir(dstPath), 0o700); err != nil {
		return errJournal(op, err, "create directory for %s", dstPath)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dstPath), "."+filepath.Base(dstPath)+".restore-*")
	if err != nil {
		return errJournal(op, err, "create a file beside %s", dstPath)
	}
	// Removes the file on a failure; publish has removed it on success.
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := src.snapshot(op, tmp); err != nil {
		return err
	}
	if err := editMeta(tmp.Name(), func(meta *bbolt.Bucket) error {
		if meta.Get(metaCopyOf) == nil {
			// The copy was restored in place between our checks; never
			// happens through this package, which writes restores to new
			// files only.
			return fmt.Errorf("%w: marker vanished", ErrCorrupt)
		}
		if err := meta.Delete(metaCopyOf); err != nil {
			return err
		}
		return meta.Delete(metaCopiedAt)
	}); err != nil {
		return errJournal(op, err, "unmark the restored copy of %s", src.path)
	}
	return publish(op, tmp.Name(), dstPath)
}

// snapshot writes a consistent copy of the file to f (a read transaction),
// fsyncs and closes f, and reports whether the copy already carries the copy
// marker (the source is itself a copy).
func (j *Journal) snapshot(op string, f *os.File) (marked bool, err error) {
	err = j.view(op, func(tx *bbolt.Tx) error {
		marked = tx.Bucket(bucketMeta).Get(metaCopyOf) != nil
		if _, err := tx.WriteTo(f); err != nil {
			return userErr{errJournal(op, err, "copy %s to %s", j.path, f.Name())}
		}
		return nil
	})
	if err == nil {
		if serr := f.Sync(); serr != nil {
			err = errJournal(op, serr, "sync %s", f.Name())
		}
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = errJournal(op, cerr, "close %s", f.Name())
	}
	return marked, err
}

// markCopy puts the copy marker naming the original into the copy at path.
func markCopy(path string, ci CopyInfo) error {
	return editMeta(path, func(meta *bbolt.Bucket) error {
		if err := meta.Put(metaCopyOf, []byte(ci.Of)); err != nil {
			return err
		}
		return meta.Put(metaCopiedAt, []byte(ci.At.UTC().Format(time.RFC3339Nano)))
	})
}

// editMeta changes the meta bucket of the unpublished file at path (a copy
// only this process knows of) in one durable bbolt transaction.
func editMeta(path string, fn func(meta *bbolt.Bucket) error) error {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: DefaultLockTimeout, FreelistType: bbolt.FreelistMapType})
	if err != nil {
		return err
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			return ErrNotJournal
		}
		return fn(meta)
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	return err
}

// refuseExisting fails with invalid_argument (cause fs.ErrExist) if path
// exists: copies and restores never overwrite a file, least of all a journal.
func refuseExisting(op, path string) error {
	_, err := os.Lstat(path)
	switch {
	case err == nil:
		return spec.Wrap(spec.CodeInvalidArgument, op, fs.ErrExist, "destination %s exists; it is never overwritten", path)
	case !errors.Is(err, fs.ErrNotExist):
		return errJournal(op, err, "check destination %s", path)
	}
	return nil
}

// publish gives the complete, fsynced file tmp the name dst, failing if dst
// exists, and fsyncs the directory. A hard link, unlike a rename, never
// replaces an existing file, even one created since refuseExisting looked.
// tmp is removed in every case.
func publish(op, tmp, dst string) error {
	// On a failure below; the success path removes it and checks.
	defer func() { _ = os.Remove(tmp) }()
	if err := os.Link(tmp, dst); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return spec.Wrap(spec.CodeInvalidArgument, op, fs.ErrExist, "destination %s exists; it is never overwritten", dst)
		}
		return errJournal(op, err, "link %s to %s", tmp, dst)
	}
	if err := os.Remove(tmp); err != nil {
		return errJournal(op, err, "remove %s", tmp)
	}
	return syncDir(op, filepath.Dir(dst))
}
