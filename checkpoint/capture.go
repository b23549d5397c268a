package checkpoint

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/stockade/stockade/spec"
)

// capture is one Capture in flight: the blobs it added (removed if it
// fails) and the ones it pinned (so no collection takes them).
type capture struct {
	s      *Store
	added  []string
	pinned []string
	needed int64 // bytes of blobs it added
	// manifest is the size its manifest's entries will take, restore the
	// size of the stream that restores it: both capped as they grow.
	manifest, restore int64
}

// pin marks sum as named by this capture (s.mu held).
func (c *capture) pin(sum string) {
	c.s.pins[sum]++
	c.pinned = append(c.pinned, sum)
}

// end unpins, and on failure removes what the capture added that nothing
// else names.
func (c *capture) end(failed bool) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sum := range c.pinned {
		if s.pins[sum]--; s.pins[sum] <= 0 {
			delete(s.pins, sum)
		}
	}
	if failed && len(c.added) > 0 {
		// collect keeps what a manifest or another capture names.
		if err := s.collect(); err != nil {
			_ = err // the blobs stay until the next collection; nothing names them
		}
	}
}

// Capture stores the tree a tar stream holds (Docker's archive of a
// directory: its first entry is the directory itself) as a checkpoint of m,
// and returns its manifest. Paths are kept relative to the first entry.
// The stream is untrusted (a workspace untrusted code wrote): an absolute
// path, a path that leaves the tree, a NUL, a path or link longer than
// MaxPath, more than MaxEntries entries or a hardlink to a path not in the
// tree fail with invalid_argument naming the entry; FIFOs and devices are
// skipped and named in Skipped. Names and link targets are kept as bytes
// (not UTF-8, absolute, leaving the tree: a symlink's target is data,
// never followed). Past the store's limit (a file larger than it, content
// that finds no room, a manifest), past MaxManifest, or past MaxRestore,
// it fails resource_exhausted as soon as that is known, with no more than
// the limit on the store's disk; nothing of a failed capture is kept.
func (s *Store) Capture(ctx context.Context, r io.Reader, m Meta) (Manifest, error) {
	if m.Name != "" {
		if err := CheckName(m.Name); err != nil {
			return Manifest{}, err
		}
	}
	c := &capture{s: s}
	man, err := c.run(ctx, r, m)
	c.end(err != nil)
	return man, err
}

func (c *capture) run(ctx context.Context, r io.Reader, meta Meta) (Manifest, error) {
	s := c.s
	m := Manifest{Sandbox: meta.Sandbox, Name: meta.Name, Image: meta.Image, Env: meta.Env, Dir: meta.Dir, Created: meta.Created.UTC()}
	tr := tar.NewReader(ctxReader{ctx: ctx, r: r})
	prefix := ""
	seen := map[string]string{} // path → type
	for n := 0; ; n++ {
		if err := ctx.Err(); err != nil {
			return Manifest{}, spec.Wrap(spec.CodeCancelled, "checkpoint", err, "capturing")
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Manifest{}, spec.Wrap(spec.CodeInvalidArgument, "checkpoint", err, "reading the archive")
		}
		if n >= MaxEntries {
			return Manifest{}, spec.Errorf(spec.CodeInvalidArgument, "checkpoint", "more than %d entries", MaxEntries)
		}
		if n == 0 {
			prefix = strings.TrimSuffix(h.Name, "/")
			if h.Typeflag != tar.TypeDir || prefix == "" || strings.Contains(prefix, "/") || prefix == "." || prefix == ".." {
				return Manifest{}, spec.Errorf(spec.CodeInvalidArgument, "checkpoint", "the archive's first entry %q is not the directory of the tree", clip(h.Name))
			}
		}
		rel, err := relPath(prefix, h.Name)
		if err != nil {
			return Manifest{}, err
		}
		if _, dup := seen[rel]; dup {
			return Manifest{}, spec.Errorf(spec.CodeInvalidArgument, "checkpoint", "entry %q is in the archive twice", clip(rel))
		}
		e, skipped, err := c.entry(h, tr, prefix, rel, seen)
		if err != nil {
			return Manifest{}, err
		}
		if skipped != "" {
			m.Skipped = append(m.Skipped, skipped)
			continue
		}
		m.Bytes += e.Size
		if rel != "." {
			if parent := path.Dir(rel); seen[parent] != TypeDir {
				return Manifest{}, spec.Errorf(spec.CodeInvalidArgument, "checkpoint", "entry %q comes before its directory %q", clip(rel), clip(parent))
			}
		}
		b, err := json.Marshal(e)
		if err != nil {
			return Manifest{}, spec.Wrap(spec.CodeInternal, "checkpoint", err, "encoding entry %q", clip(rel))
		}
		if err := c.grow(rel, int64(len(b))+1, restoreCost(e)); err != nil {
			return Manifest{}, err
		}
		seen[rel] = e.Type
		m.Entries = append(m.Entries, e)
	}
	if len(m.Entries) == 0 {
		return Manifest{}, spec.Errorf(spec.CodeInvalidArgument, "checkpoint", "the archive is empty")
	}
	m.Files = len(m.Entries)
	id, err := manifestID(m)
	if err != nil {
		return Manifest{}, err
	}
	m.ID = id
	if err := s.writeManifest(m); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// entry is the manifest entry of one archive entry at rel (a file's
// content stored), or why it is skipped (a type a restore cannot make, a
// symlink climbing out of the workspace), or why the capture fails.
func (c *capture) entry(h *tar.Header, tr io.Reader, prefix, rel string, seen map[string]string) (e Entry, skipped string, err error) {
	e = Entry{Path: rel, Mode: uint32(h.Mode) & 0o7777, ModTime: h.ModTime.UTC()}
	switch h.Typeflag {
	case tar.TypeDir:
		e.Type = TypeDir
	case tar.TypeReg, tar.TypeRegA: //nolint:staticcheck // TypeRegA: an old writer's regular file
		e.Type = TypeFile
		// Known from the header before a byte of it is read (a sparse
		// file is its full size here).
		if err := c.fileFits(rel, h.Size); err != nil {
			return Entry{}, "", err
		}
		if e.SHA256, e.Size, err = c.store(h, tr, rel); err != nil {
			return Entry{}, "", err
		}
	case tar.TypeSymlink:
		e.Type = TypeSymlink
		if len(h.Linkname) > MaxPath || h.Linkname == "" || strings.IndexByte(h.Linkname, 0) >= 0 {
			return Entry{}, "", spec.Errorf(spec.CodeInvalidArgument, "checkpoint", "entry %q: a symlink target of %d bytes", clip(rel), len(h.Linkname))
		}
		e.Link = h.Linkname
		if climbsOut(rel, e.Link) {
			// Docker's extraction refuses such a link: kept, it would
			// make a checkpoint that cannot be restored.
			skipped := fmt.Sprintf("%q (a symlink to %q, climbing out of the workspace by its own \"..\", which a restore cannot make)", rel, e.Link)
			if err := c.grow(rel, int64(len(skipped))*6+3, 0); err != nil {
				return Entry{}, "", err
			}
			return Entry{}, skipped, nil
		}
	case tar.TypeLink:
		e.Type = TypeHardlink
		target, err := relPath(prefix, h.Linkname)
		if err != nil {
			return Entry{}, "", spec.Errorf(spec.CodeInvalidArgument, "checkpoint", "entry %q: a hardlink out of the tree (%q)", clip(rel), clip(h.Linkname))
		}
		if seen[target] != TypeFile {
			return Entry{}, "", spec.Errorf(spec.CodeInvalidArgument, "checkpoint", "entry %q: a hardlink to %q, not a file before it in the tree", clip(rel), clip(target))
		}
		e.Link = target
	default:
		skipped := fmt.Sprintf("%s (%s)", rel, typeName(h.Typeflag))
		if !utf8.ValidString(rel) {
			skipped = fmt.Sprintf("%q (%s)", rel, typeName(h.Typeflag))
		}
		if err := c.grow(rel, int64(len(skipped))*6+3, 0); err != nil {
			return Entry{}, "", err
		}
		return Entry{}, skipped, nil
	}
	return e, "", nil
}

// climbsOut reports whether a symlink at rel (in a tree one level below
// the workspace, as /workspace/work and a rollback's staging directory
// are) has a relative target whose own ".." leave the workspace: Docker's
// extraction refuses to make such a link, so no restore could.
func climbsOut(rel, target string) bool {
	if path.IsAbs(target) {
		return false
	}
	c := path.Clean(path.Join("r", path.Dir(rel), target))
	return c == ".." || strings.HasPrefix(c, "../")
}

// fileFits fails resource_exhausted when a file's size (from its header,
// before a byte is read) can never be stored or restored.
func (c *capture) fileFits(rel string, size int64) error {
	if size > c.s.limit {
		return spec.Errorf(spec.CodeResourceExhausted, "checkpoint",
			"entry %q is a file of %d bytes, larger than the checkpoint store's whole bound of %d bytes (a sparse file counts its full size): remove it from the workspace, or raise the store's bound (Options.CheckpointBytes)", clip(rel), size, c.s.limit)
	}
	if c.restore+size > MaxRestore-restoreSlack {
		return restoreTooBig(rel)
	}
	return nil
}

// grow counts an entry's bytes in its manifest and in the stream that
// restores it, failing resource_exhausted past MaxManifest or MaxRestore
// as soon as that is known, so a hostile tree costs no more than the caps
// to refuse.
func (c *capture) grow(rel string, manifest, restore int64) error {
	c.manifest += manifest
	c.restore += restore
	if c.manifest > MaxManifest-manifestSlack {
		return spec.Errorf(spec.CodeResourceExhausted, "checkpoint",
			"the checkpoint's manifest would pass %d bytes at entry %q: the tree has too many entries, or names and link targets too long, to checkpoint; remove some from the workspace", MaxManifest, clip(rel))
	}
	if c.restore > MaxRestore-restoreSlack {
		return restoreTooBig(rel)
	}
	return nil
}

func restoreTooBig(rel string) error {
	return spec.Errorf(spec.CodeResourceExhausted, "checkpoint",
		"the checkpoint would restore as an archive of more than %d bytes at entry %q, more than a rollback can write: remove large files from the workspace", MaxRestore, clip(rel))
}

// Room kept under the caps for what grow does not count: the manifest's
// own fields, the restore stream's root entry and end.
const (
	manifestSlack = 1 << 20
	restoreSlack  = 16 << 10
)

// restoreCost bounds the bytes Restore writes for e under a root of at
// most maxRoot bytes: a header, a PAX header when the name or the link
// does not fit one (long, or not ASCII), and the content padded.
func restoreCost(e Entry) int64 {
	n := int64(512)
	if len(e.Path)+maxRoot+2 > 100 || len(e.Link)+maxRoot+1 > 100 || !isASCII(e.Path) || !isASCII(e.Link) {
		n += 512 + pad512(int64(len(e.Path)+len(e.Link)+maxRoot+128))
	}
	return n + pad512(e.Size)
}

func pad512(n int64) int64 { return (n + 511) / 512 * 512 }

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// ctxReader fails its reads once ctx ends: a capture stops mid-file.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

func typeName(t byte) string {
	switch t {
	case tar.TypeFifo:
		return "fifo"
	case tar.TypeChar:
		return "character device"
	case tar.TypeBlock:
		return "block device"
	}
	return fmt.Sprintf("type %q", t)
}

// relPath is an entry's path relative to the tree's root: "." for the
// root, else clean, within the tree, without NUL, at most MaxPath bytes.
// A name is bytes: one that is not UTF-8 is kept as it is.
func relPath(prefix, name string) (string, error) {
	bad := func(why string) error {
		return spec.Errorf(spec.CodeInvalidArgument, "checkpoint", "entry %q: %s", clip(name), why)
	}
	if len(name) > MaxPath+len(prefix)+1 || strings.IndexByte(name, 0) >= 0 {
		return "", bad("too long, or with a NUL byte")
	}
	if strings.HasPrefix(name, "/") {
		return "", bad("an absolute path")
	}
	n := strings.TrimSuffix(name, "/")
	if n == prefix {
		return ".", nil
	}
	rest, ok := strings.CutPrefix(n, prefix+"/")
	if !ok {
		return "", bad("not under the tree's directory " + prefix)
	}
	clean := path.Clean(rest)
	if clean != rest || clean == "." || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", bad("not a clean path within the tree")
	}
	return clean, nil
}

// smallFile is the size up to which a file's content is hashed in
// memory first: a blob the store has is then never written again.
const smallFile = 1 << 20

// store writes one file's content into the store as a blob (or finds it
// there) and pins it. Blobs are not synced one by one: writeManifest syncs
// the store's filesystem once before the manifest that names them.
//
// Every byte written into tmp/ is reserved in the store's bound first
// (Store.reserve), so the store's disk never holds more than its bound,
// whatever a file's size and however many captures run. A large file that
// finds no room is read on without being written, only hashed: content
// the store has costs nothing; other content fails resource_exhausted.
func (c *capture) store(h *tar.Header, r io.Reader, rel string) (string, int64, error) {
	s := c.s
	fail := func(err error) (string, int64, error) {
		return "", 0, spec.Wrap(spec.CodeJournal, "checkpoint", err, "storing %s", clip(rel))
	}
	var small []byte
	var n int64
	sum := sha256.New()
	var spill *spillWriter
	if h.Size <= smallFile {
		b, err := io.ReadAll(io.LimitReader(r, smallFile+1))
		if err != nil {
			return readFail(rel, err)
		}
		if int64(len(b)) > smallFile {
			return fail(fmt.Errorf("more content than its header's %d bytes", h.Size))
		}
		small, n = b, int64(len(b))
		sum.Write(b) // a hash's Write never fails
	} else {
		tmp, err := os.CreateTemp(filepath.Join(s.dir, "tmp"), "blob-*")
		if err != nil {
			return fail(err)
		}
		spill = &spillWriter{s: s, f: tmp, name: tmp.Name()}
		defer spill.release() // a no-op once renamed into the store
		n, err = io.Copy(io.MultiWriter(spill, sum), r)
		if cerr := spill.close(); err == nil {
			err = cerr
		}
		if err != nil {
			var se *spec.Error
			if errors.As(err, &se) {
				return "", 0, err
			}
			return readFail(rel, err)
		}
	}
	hexSum := hex.EncodeToString(sum.Sum(nil))
	s.mu.Lock()
	defer s.mu.Unlock()
	dst := s.blobPath(hexSum)
	if _, err := os.Stat(dst); err == nil {
		c.pin(hexSum)
		return hexSum, n, nil
	}
	if spill != nil && spill.dropped {
		return "", 0, fullError(s.limit, s.usage+s.tmp, c.needed+n)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return fail(err)
	}
	tmpName := ""
	if spill != nil {
		tmpName = spill.name
	} else {
		// Reserved, written aside and renamed: a reader never sees half a
		// blob.
		if !s.reserve(n) {
			return "", 0, fullError(s.limit, s.usage+s.tmp, c.needed+n)
		}
		defer func() { s.tmp -= n }() // usage once renamed, else given back
		tmpName = filepath.Join(s.dir, "tmp", "blob-"+hexSum)
		defer func() { _ = os.Remove(tmpName) }() // gone once renamed
		if err := os.WriteFile(tmpName, small, 0o600); err != nil {
			return fail(err)
		}
	}
	if err := os.Rename(tmpName, dst); err != nil {
		return fail(err)
	}
	if spill != nil {
		spill.kept()
	}
	s.usage += n
	c.needed += n
	c.added = append(c.added, hexSum)
	c.pin(hexSum)
	return hexSum, n, nil
}

// readFail is a file's content that could not be read: the stream's fault
// (a copy broken), or a context that ended.
func readFail(rel string, err error) (string, int64, error) {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return "", 0, spec.Wrap(spec.CodeCancelled, "checkpoint", err, "capturing %s", clip(rel))
	}
	return "", 0, spec.Wrap(spec.CodeInvalidArgument, "checkpoint", err, "reading %s", clip(rel))
}

// spillWriter writes a large file into tmp/, each write reserved in the
// store's bound first. Once a reservation fails it removes the file (and
// gives back what it reserved) and takes the rest unwritten: the hash
// beside it goes on, to learn whether the store has the content.
type spillWriter struct {
	s        *Store
	f        *os.File // nil once closed
	name     string
	reserved int64
	dropped  bool // the file was removed for want of room
	done     bool // renamed into the store: the reservation is usage
}

func (w *spillWriter) Write(p []byte) (int, error) {
	if w.dropped {
		return len(p), nil
	}
	w.s.mu.Lock()
	ok := w.s.reserve(int64(len(p)))
	w.s.mu.Unlock()
	if !ok {
		w.drop()
		return len(p), nil
	}
	w.reserved += int64(len(p))
	if _, err := w.f.Write(p); err != nil {
		return 0, spec.Wrap(spec.CodeJournal, "checkpoint", err, "writing %s", w.name)
	}
	return len(p), nil
}

// close closes the file written, if still open.
func (w *spillWriter) close() error {
	if w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f = nil
	if err != nil {
		return spec.Wrap(spec.CodeJournal, "checkpoint", err, "writing %s", w.name)
	}
	return nil
}

// drop removes the file written so far and gives its reservation back.
func (w *spillWriter) drop() {
	_ = w.close()         // removed next: nothing of it is wanted
	_ = os.Remove(w.name) // best effort: tmp/ is cleared at Open
	w.dropped = true
	w.s.mu.Lock()
	w.s.tmp -= w.reserved
	w.s.mu.Unlock()
	w.reserved = 0
}

// kept marks the file renamed into the store (s.mu held): its reservation
// leaves tmp, and the caller counts it as usage.
func (w *spillWriter) kept() {
	w.s.tmp -= w.reserved
	w.reserved = 0
	w.done = true
}

// release removes a file not kept and gives its reservation back.
func (w *spillWriter) release() {
	if !w.done && !w.dropped {
		w.drop()
	}
}

// Restore writes checkpoint id as a tar stream with every entry under the
// directory root (the root's own entry first), owned by uid:gid, each
// blob's size and sha256 checked as it is read: a missing or corrupt blob
// fails naming it and the path, and nothing after it is written.
func (s *Store) Restore(id string, w io.Writer, root string, uid, gid int) error {
	if root == "" || strings.ContainsAny(root, "/\x00") || root == "." || root == ".." || len(root) > maxRoot {
		return spec.Errorf(spec.CodeInvalidArgument, "checkpoint", "restore root %q is not one plain name of at most %d bytes", clip(root), maxRoot)
	}
	m, err := s.Get(id)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	for _, e := range m.Entries {
		name := root
		if e.Path != "." {
			name = root + "/" + e.Path
		}
		h := &tar.Header{Name: name, Mode: int64(e.Mode), Uid: uid, Gid: gid, ModTime: e.ModTime, Format: tar.FormatPAX}
		switch e.Type {
		case TypeDir:
			h.Typeflag, h.Name = tar.TypeDir, name+"/"
		case TypeSymlink:
			h.Typeflag, h.Linkname = tar.TypeSymlink, e.Link
		case TypeHardlink:
			h.Typeflag, h.Linkname = tar.TypeLink, root+"/"+e.Link
		case TypeFile:
			h.Typeflag, h.Size = tar.TypeReg, e.Size
		}
		if err := tw.WriteHeader(h); err != nil {
			return spec.Wrap(spec.CodeStreamFailure, "checkpoint", err, "writing %s of checkpoint %s", clip(e.Path), id)
		}
		if e.Type == TypeFile {
			if err := s.copyBlob(tw, e); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return spec.Wrap(spec.CodeStreamFailure, "checkpoint", err, "writing checkpoint %s", id)
	}
	return nil
}

// copyBlob writes e's blob, checked by size and sha256.
func (s *Store) copyBlob(w io.Writer, e Entry) error {
	f, err := os.Open(s.blobPath(e.SHA256))
	if err != nil {
		return spec.Wrap(spec.CodeJournal, "checkpoint", err, "blob %s of %s", e.SHA256, clip(e.Path))
	}
	defer func() { _ = f.Close() }() // read only
	if info, err := f.Stat(); err != nil || info.Size() != e.Size {
		return spec.Errorf(spec.CodeJournal, "checkpoint", "blob %s of %s is corrupt: not %d bytes", e.SHA256, clip(e.Path), e.Size)
	}
	sum := sha256.New()
	if _, err := io.Copy(w, io.TeeReader(io.LimitReader(f, e.Size), sum)); err != nil {
		return spec.Wrap(spec.CodeStreamFailure, "checkpoint", err, "writing %s", clip(e.Path))
	}
	if hex.EncodeToString(sum.Sum(nil)) != e.SHA256 {
		return spec.Errorf(spec.CodeJournal, "checkpoint", "blob %s of %s is corrupt: its content has another sha256", e.SHA256, clip(e.Path))
	}
	return nil
}

// Verify checks every manifest decodes and every blob it names is there
// with its size (contents are checked by Restore as they are read).
func (s *Store) Verify() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ms, bad, err := s.manifests(true)
	if err != nil {
		return err
	}
	errs := bad
	for _, m := range ms {
		for _, e := range m.Entries {
			if e.Type != TypeFile {
				continue
			}
			if info, err := os.Stat(s.blobPath(e.SHA256)); err != nil || info.Size() != e.Size {
				errs = append(errs, spec.Errorf(spec.CodeJournal, "checkpoint", "checkpoint %s: blob %s of %s is missing or not %d bytes", m.ID, e.SHA256, clip(e.Path), e.Size))
			}
		}
	}
	return errors.Join(errs...)
}
