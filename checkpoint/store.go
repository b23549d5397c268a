// Package checkpoint keeps sandbox workspace checkpoints beside the journal,
// content-addressed: one blob per distinct file content (by sha256), and one
// manifest per checkpoint naming every entry of the tree and what a restart
// needs (env, dir, image). Two checkpoints of a mostly unchanged workspace
// share their blobs. A checkpoint is read from a tar stream (Docker's
// archive of /workspace/work) and written back as one (Restore), every
// blob verified as it is read.
//
// On disk (Dir of the journal):
//
//	blobs/ab/<64 hex>     a file's content, named by its sha256
//	manifests/<id>.json   a checkpoint
//	tmp/                  blobs and manifests being written
//
// Every file is written into tmp/, synced, and renamed into place; a
// manifest is written last, so a crash never leaves a manifest naming a
// missing blob. Blobs no manifest names (a capture that failed or was
// killed) are collected at Open and after Remove, never while a capture
// that may name them runs.
//
// A manifest is JSON: the Manifest's fields, its entries last. An entry's
// path and a symlink's target are bytes, not text: one that is not UTF-8
// is written base64 in path_b64 or link_b64 instead of path or link, so
// it is restored byte for byte.
//
// The store's bound (Open's limit) counts every byte it writes: blobs,
// manifests, and what captures in flight hold in tmp/ (reserved as it is
// written, so a file far past the bound, or many captures at once, never
// put more than the bound on disk). Content the store already has costs
// nothing; a file that finds no room is read on, without being written,
// only to learn whether the store has it. A manifest is capped
// (MaxManifest) as it is built, and so is the stream that restores a
// checkpoint (MaxRestore). A manifest that cannot be read (corrupt, or
// past the cap) is left out of List and makes Get of it fail naming it;
// the others are unaffected, and no blob is collected while one is
// there (what it names is not known).
package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/stockade/stockade/spec"
)

// Bounds.
const (
	// DefaultLimit bounds the blobs a store holds when Open is given 0.
	DefaultLimit = 4 << 30
	// MaxEntries bounds a checkpoint's entries.
	MaxEntries = 1_000_000
	// MaxPath bounds an entry's path and a link's target.
	MaxPath = 4096
	// MaxManifest bounds a manifest as it is built (a capture whose
	// manifest would pass it fails resource_exhausted) and as it is read
	// back: about 300,000 entries of typical names.
	MaxManifest = 64 << 20
	// MaxRestore bounds the tar stream Restore writes for a checkpoint
	// (headers, content and padding, with a staging root name of up to
	// maxRoot bytes): a rollback puts it through one archive put, whose
	// spool is bounded alike (dockerio.MaxArchiveBytes). A capture whose
	// restore would pass it fails resource_exhausted: a checkpoint that
	// cannot be restored is never kept.
	MaxRestore = 1 << 30
	// maxRoot bounds the root name Restore is given.
	maxRoot = 128
)

// Entry types.
const (
	TypeDir      = "dir"
	TypeFile     = "file"
	TypeSymlink  = "symlink"
	TypeHardlink = "hardlink"
)

// Entry is one path of a checkpoint's tree.
type Entry struct {
	// Path is relative to the tree's root; "." is the root itself.
	Path string `json:"path"`
	Type string `json:"type"`
	// Mode is the permission bits with setuid, setgid and sticky (07777).
	Mode uint32 `json:"mode"`
	// Size and SHA256 are a file's content (its blob).
	Size   int64  `json:"size,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	// Link is a symlink's target (data, never followed) or a hardlink's
	// path in the tree.
	Link    string    `json:"link,omitempty"`
	ModTime time.Time `json:"mtime"`
}

// entryJSON is an Entry as a manifest holds it: a path or link target
// that is not UTF-8 (JSON would replace its bytes) is base64 in path_b64
// or link_b64 instead.
type entryJSON struct {
	Path    string    `json:"path,omitempty"`
	PathB64 []byte    `json:"path_b64,omitempty"`
	Type    string    `json:"type"`
	Mode    uint32    `json:"mode"`
	Size    int64     `json:"size,omitempty"`
	SHA256  string    `json:"sha256,omitempty"`
	Link    string    `json:"link,omitempty"`
	LinkB64 []byte    `json:"link_b64,omitempty"`
	ModTime time.Time `json:"mtime"`
}

// MarshalJSON encodes e with its path and link as bytes.
func (e Entry) MarshalJSON() ([]byte, error) {
	j := entryJSON{Path: e.Path, Type: e.Type, Mode: e.Mode, Size: e.Size, SHA256: e.SHA256, Link: e.Link, ModTime: e.ModTime}
	if !utf8.ValidString(e.Path) {
		j.Path, j.PathB64 = "", []byte(e.Path)
	}
	if !utf8.ValidString(e.Link) {
		j.Link, j.LinkB64 = "", []byte(e.Link)
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes an entry of a manifest: unknown fields, both forms
// of a path or link, or the base64 form of a UTF-8 one (not canonical)
// fail.
func (e *Entry) UnmarshalJSON(b []byte) error {
	var j entryJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return err
	}
	if len(j.PathB64) > 0 {
		if j.Path != "" || utf8.Valid(j.PathB64) {
			return fmt.Errorf("entry %q: path_b64 beside a path, or UTF-8", clip(j.Path))
		}
		j.Path = string(j.PathB64)
	}
	if len(j.LinkB64) > 0 {
		if j.Link != "" || utf8.Valid(j.LinkB64) {
			return fmt.Errorf("entry %q: link_b64 beside a link, or UTF-8", clip(j.Path))
		}
		j.Link = string(j.LinkB64)
	}
	*e = Entry{Path: j.Path, Type: j.Type, Mode: j.Mode, Size: j.Size, SHA256: j.SHA256, Link: j.Link, ModTime: j.ModTime}
	return nil
}

// Meta is what the caller knows of a checkpoint: whose it is and what a
// restart needs.
type Meta struct {
	Sandbox string
	// Name is optional: [a-z0-9][a-z0-9._-]{0,62}.
	Name    string
	Image   string
	Env     []string
	Dir     string
	Created time.Time
}

// Manifest is a checkpoint.
type Manifest struct {
	ID      string    `json:"id"`
	Sandbox string    `json:"sandbox"`
	Name    string    `json:"name,omitempty"`
	Image   string    `json:"image,omitempty"`
	Env     []string  `json:"env,omitempty"`
	Dir     string    `json:"dir,omitempty"`
	Created time.Time `json:"created"`
	// Files counts the entries; Bytes the files' content.
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
	// Skipped names the entries not kept (FIFOs, devices) with their type.
	Skipped []string `json:"skipped,omitempty"`
	// Entries, in the tar's order (a directory before what it holds);
	// List leaves them out.
	Entries []Entry `json:"entries,omitempty"`
}

// Store is a checkpoint directory. Safe for concurrent use.
type Store struct {
	dir   string
	limit int64

	mu    sync.Mutex
	usage int64          // bytes of blobs and manifests on disk
	tmp   int64          // bytes captures in flight hold in tmp/
	pins  map[string]int // blobs an in-flight capture refers to
}

// reserve takes n bytes of the bound for a file being written into tmp/,
// or reports false when they are not there (s.mu held).
func (s *Store) reserve(n int64) bool {
	if n < 0 || s.usage+s.tmp+n > s.limit {
		return false
	}
	s.tmp += n
	return true
}

// Open opens (making it if needed) the store at dir, bounded to limit
// bytes of blobs (0: DefaultLimit), and collects what a crash left.
func Open(dir string, limit int64) (*Store, error) {
	if limit <= 0 {
		limit = DefaultLimit
	}
	for _, d := range []string{dir, filepath.Join(dir, "blobs"), filepath.Join(dir, "manifests"), filepath.Join(dir, "tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, spec.Wrap(spec.CodeJournal, "checkpoint", err, "making the checkpoint store %s", dir)
		}
	}
	// Whatever tmp holds was being written when a runtime ended.
	if err := clearDir(filepath.Join(dir, "tmp")); err != nil {
		return nil, spec.Wrap(spec.CodeJournal, "checkpoint", err, "clearing %s", filepath.Join(dir, "tmp"))
	}
	s := &Store{dir: dir, limit: limit, pins: map[string]int{}}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.collect(); err != nil {
		return nil, err
	}
	return s, nil
}

func clearDir(d string) error {
	ents, err := os.ReadDir(d)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(d, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// Usage returns the bytes the store holds (blobs and manifests) and the
// number of blobs.
func (s *Store) Usage() (bytes int64, blobs int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	err = s.walkBlobs(func(_ string, size int64) error {
		bytes += size
		blobs++
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	m, err := s.manifestBytes()
	return bytes + m, blobs, err
}

// manifestBytes is what the manifest files take, every one of them
// (those that cannot be read too).
func (s *Store) manifestBytes() (int64, error) {
	ents, err := os.ReadDir(filepath.Join(s.dir, "manifests"))
	if err != nil {
		return 0, spec.Wrap(spec.CodeJournal, "checkpoint", err, "listing the manifests of %s", s.dir)
	}
	var n int64
	for _, e := range ents {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			n += info.Size()
		}
	}
	return n, nil
}

func (s *Store) blobPath(sum string) string {
	return filepath.Join(s.dir, "blobs", sum[:2], sum)
}

func (s *Store) manifestPath(id string) string {
	return filepath.Join(s.dir, "manifests", id+".json")
}

// walkBlobs calls fn for every blob on disk (its sum and size).
func (s *Store) walkBlobs(fn func(sum string, size int64) error) error {
	root := filepath.Join(s.dir, "blobs")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return fn(d.Name(), info.Size())
	})
	if err != nil {
		return spec.Wrap(spec.CodeJournal, "checkpoint", err, "reading the blobs of %s", s.dir)
	}
	return nil
}

// collect removes every blob no manifest and no capture in flight names,
// and recounts the usage (s.mu held). While a manifest cannot be read,
// what it names is not known, and no blob is removed.
func (s *Store) collect() error {
	ms, bad, err := s.manifests(true)
	if err != nil {
		return err
	}
	named := map[string]bool{}
	for _, m := range ms {
		for _, e := range m.Entries {
			if e.SHA256 != "" {
				named[e.SHA256] = true
			}
		}
	}
	usage, err := s.manifestBytes()
	if err != nil {
		return err
	}
	err = s.walkBlobs(func(sum string, size int64) error {
		if named[sum] || s.pins[sum] > 0 || len(bad) > 0 {
			usage += size
			return nil
		}
		if err := os.Remove(s.blobPath(sum)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	})
	s.usage = usage
	return err
}

// manifests reads every manifest (with their entries or not); bad holds
// the error of each that cannot be read, which is left out. Only the
// listing of the directory fails the whole.
func (s *Store) manifests(entries bool) (out []Manifest, bad []error, err error) {
	ents, err := os.ReadDir(filepath.Join(s.dir, "manifests"))
	if err != nil {
		return nil, nil, spec.Wrap(spec.CodeJournal, "checkpoint", err, "listing the manifests of %s", s.dir)
	}
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !spec.IsCheckpointID(id) {
			continue
		}
		m, err := s.read(id)
		if err != nil {
			bad = append(bad, err)
			continue
		}
		if !entries {
			m.Entries = nil
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	return out, bad, nil
}

// read reads and checks manifest id, holding at most MaxManifest bytes of
// it. A manifest that cannot be read fails journal, naming it and what to
// do: it is this checkpoint's alone, and removing it is safe.
func (s *Store) read(id string) (Manifest, error) {
	f, err := os.Open(s.manifestPath(id))
	if errors.Is(err, os.ErrNotExist) {
		return Manifest{}, spec.Errorf(spec.CodeNotFound, "checkpoint", "no checkpoint %s", id)
	}
	unreadable := func(err error) (Manifest, error) {
		return Manifest{}, spec.Wrap(spec.CodeJournal, "checkpoint", err,
			"checkpoint %s cannot be read (its manifest %s); it cannot be restored: remove it (stockade checkpoint rm %s)", id, s.manifestPath(id), id)
	}
	if err != nil {
		return unreadable(err)
	}
	defer func() { _ = f.Close() }() // read only
	if info, err := f.Stat(); err != nil || !info.Mode().IsRegular() || info.Size() > MaxManifest {
		if err == nil {
			err = fmt.Errorf("not a regular file of at most %d bytes (%s, %d bytes)", MaxManifest, info.Mode().Type(), info.Size())
		}
		return unreadable(err)
	}
	b, err := readBounded(f, MaxManifest)
	if err != nil {
		return unreadable(err)
	}
	m, err := decodeManifest(b)
	if err != nil {
		return unreadable(err)
	}
	if m.ID != id {
		return unreadable(fmt.Errorf("it names checkpoint %s", m.ID))
	}
	return m, nil
}

// List returns every checkpoint, oldest first, without their entries.
func (s *Store) List() ([]Manifest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ms, _, err := s.manifests(false)
	return ms, err
}

// Get returns checkpoint id with its entries; not_found when unknown.
func (s *Store) Get(id string) (Manifest, error) {
	if !spec.IsCheckpointID(id) {
		return Manifest{}, spec.Errorf(spec.CodeInvalidArgument, "checkpoint", "%q is not a checkpoint id (ck- and 20 lowercase hex digits)", clip(id))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.read(id)
}

// Find returns a checkpoint by id, or by name among sandbox's checkpoints.
func (s *Store) Find(sandbox, ref string) (Manifest, error) {
	if spec.IsCheckpointID(ref) {
		return s.Get(ref)
	}
	if err := CheckName(ref); err != nil {
		return Manifest{}, err
	}
	ms, err := s.List()
	if err != nil {
		return Manifest{}, err
	}
	for _, m := range ms {
		if m.Sandbox == sandbox && m.Name == ref {
			return s.Get(m.ID)
		}
	}
	return Manifest{}, spec.Errorf(spec.CodeNotFound, "checkpoint", "sandbox %s has no checkpoint named %q", sandbox, ref)
}

// Remove deletes checkpoint id and the blobs no other checkpoint names.
func (s *Store) Remove(id string) error {
	if !spec.IsCheckpointID(id) {
		return spec.Errorf(spec.CodeInvalidArgument, "checkpoint", "%q is not a checkpoint id", clip(id))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	err := os.Remove(s.manifestPath(id))
	if errors.Is(err, os.ErrNotExist) {
		return spec.Errorf(spec.CodeNotFound, "checkpoint", "no checkpoint %s", id)
	}
	if err != nil {
		return spec.Wrap(spec.CodeJournal, "checkpoint", err, "removing checkpoint %s", id)
	}
	if err := syncDir(filepath.Join(s.dir, "manifests")); err != nil {
		return spec.Wrap(spec.CodeJournal, "checkpoint", err, "removing checkpoint %s", id)
	}
	return s.collect()
}

// CheckName checks a checkpoint's name: [a-z0-9][a-z0-9._-]{0,62}.
func CheckName(name string) error {
	ok := name != "" && len(name) <= 63
	for i, c := range name {
		ok = ok && ('a' <= c && c <= 'z' || '0' <= c && c <= '9' || i > 0 && (c == '.' || c == '_' || c == '-'))
	}
	if !ok {
		return spec.Errorf(spec.CodeInvalidArgument, "checkpoint", "name %q: 1 to 63 of a-z 0-9 . _ -, starting with a letter or digit", clip(name))
	}
	return nil
}

// manifestID is the content address of m (its ID left out).
func manifestID(m Manifest) (string, error) {
	m.ID = ""
	sum := sha256.New()
	if _, err := encodeManifestTo(sum, m); err != nil {
		return "", err
	}
	return "ck-" + hex.EncodeToString(sum.Sum(nil))[:20], nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

func syncDir(d string) error {
	f, err := os.Open(d)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// FullError is a checkpoint the store had no room for.
func fullError(limit, used, needed int64) error {
	return spec.Errorf(spec.CodeResourceExhausted, "checkpoint",
		"the checkpoint store is full: its limit is %d bytes, %d are in use and this checkpoint needed %d more", limit, used, needed)
}
