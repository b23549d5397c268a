package checkpoint

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/stockade/stockade/spec"
)

// A checkpoint's manifest: written, encoded, decoded (bounded), and the
// digest of a tree.

// writeManifest writes m durably: its blobs' directory entries synced
// first, then the manifest through tmp/, its size reserved in the store's
// bound (and counted in it once renamed), never more than MaxManifest.
func (s *Store) writeManifest(m Manifest) error {
	size, err := encodeManifestTo(io.Discard, m)
	if err != nil {
		return err
	}
	if size > MaxManifest {
		return spec.Errorf(spec.CodeResourceExhausted, "checkpoint",
			"the checkpoint's manifest would be %d bytes, past %d: the tree has too many entries, or names and link targets too long, to checkpoint; remove some from the workspace", size, MaxManifest)
	}
	s.mu.Lock()
	ok := s.reserve(size)
	used := s.usage + s.tmp
	s.mu.Unlock()
	if !ok {
		return spec.Errorf(spec.CodeResourceExhausted, "checkpoint",
			"the checkpoint store is full: its limit is %d bytes, %d are in use and this checkpoint's manifest needs %d more (its blobs are kept only with it)", s.limit, used, size)
	}
	kept := false
	defer func() {
		s.mu.Lock()
		s.tmp -= size
		if kept {
			s.usage += size
		}
		s.mu.Unlock()
	}()
	// Every blob it names, and their directory entries, reach the disk
	// before the manifest does: one sync of the store's filesystem, not
	// one per blob.
	if err := syncFS(s.dir); err != nil {
		return spec.Wrap(spec.CodeJournal, "checkpoint", err, "syncing the checkpoint store %s", s.dir)
	}
	tmp, err := os.CreateTemp(filepath.Join(s.dir, "tmp"), "manifest-*")
	if err != nil {
		return spec.Wrap(spec.CodeJournal, "checkpoint", err, "writing checkpoint %s", m.ID)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // gone once renamed
	bw := bufio.NewWriter(tmp)
	n, err := encodeManifestTo(bw, m)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil && n != size {
		err = fmt.Errorf("encoded as %d bytes, then %d", size, n)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), s.manifestPath(m.ID))
	}
	if err == nil {
		kept = true
		err = syncDir(filepath.Join(s.dir, "manifests"))
	}
	if err != nil {
		return spec.Wrap(spec.CodeJournal, "checkpoint", err, "writing checkpoint %s", m.ID)
	}
	return nil
}

// TreeDigest is a canonical digest of the tree a tar stream holds (Docker's
// archive of a directory): every entry's path relative to the first one,
// type, permission bits, content and link target — not times, owners or
// the top directory's name. Two trees with the same digest are the same
// to a reader of their files.
func TreeDigest(r io.Reader) (string, error) {
	tr := tar.NewReader(r)
	var lines []string
	prefix := ""
	for n := 0; ; n++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", spec.Wrap(spec.CodeInvalidArgument, "checkpoint", err, "reading the archive")
		}
		if n == 0 {
			prefix = strings.TrimSuffix(h.Name, "/")
		}
		rel, err := relPath(prefix, h.Name)
		if err != nil {
			return "", err
		}
		content := ""
		if h.Typeflag == tar.TypeReg {
			sum := sha256.New()
			//nolint:gosec // G110: no decompression here; the stream is hashed, never kept.
			if _, err := io.Copy(sum, tr); err != nil {
				return "", spec.Wrap(spec.CodeInvalidArgument, "checkpoint", err, "reading %s", clip(rel))
			}
			content = hex.EncodeToString(sum.Sum(nil))
		}
		link := h.Linkname
		if h.Typeflag == tar.TypeLink {
			// A hardlink names a path in the archive: relative to its top.
			if link, err = relPath(prefix, h.Linkname); err != nil {
				return "", err
			}
		}
		lines = append(lines, fmt.Sprintf("%q %c %o %s %q", rel, h.Typeflag, h.Mode&0o7777, content, link))
	}
	sort.Strings(lines)
	sum := sha256.New()
	for _, l := range lines {
		writeLine(sum, l)
	}
	return hex.EncodeToString(sum.Sum(nil)), nil
}

func writeLine(h hash.Hash, l string) {
	h.Write([]byte(l)) // a hash's Write never fails
	h.Write([]byte{'\n'})
}

// encodeManifest is a manifest's canonical JSON (json.Marshal's).
func encodeManifest(m Manifest) ([]byte, error) {
	var b bytes.Buffer
	if _, err := encodeManifestTo(&b, m); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// encodeManifestTo writes a manifest's canonical JSON, the same bytes as
// json.Marshal's, one entry at a time: it holds no more than one entry's
// encoding beside m. It returns the bytes written.
func encodeManifestTo(w io.Writer, m Manifest) (int64, error) {
	fail := func(err error) (int64, error) {
		return 0, spec.Wrap(spec.CodeInternal, "checkpoint", err, "encoding a manifest")
	}
	entries := m.Entries
	m.Entries = nil
	head, err := json.Marshal(m)
	if err != nil {
		return fail(err)
	}
	cw := &countWriter{w: w}
	if len(entries) == 0 {
		_, err := cw.Write(head)
		return cw.n, err
	}
	_, err = cw.Write(append(head[:len(head)-1:len(head)-1], `,"entries":[`...))
	for i, e := range entries {
		if err != nil {
			break
		}
		var b []byte
		if b, err = json.Marshal(e); err != nil {
			return fail(err)
		}
		if i > 0 {
			_, err = cw.Write([]byte{','})
		}
		if err == nil {
			_, err = cw.Write(b)
		}
	}
	if err == nil {
		_, err = cw.Write([]byte("]}"))
	}
	return cw.n, err
}

// countWriter counts what it passes on.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// decodeManifest decodes a manifest read back from disk: untrusted bytes,
// every field checked.
func decodeManifest(b []byte) (Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	bad := func(format string, args ...any) (Manifest, error) {
		return Manifest{}, spec.Errorf(spec.CodeJournal, "checkpoint", "a manifest: "+format, args...)
	}
	if err := dec.Decode(&m); err != nil {
		return bad("%v", err)
	}
	if !spec.IsCheckpointID(m.ID) {
		return bad("id %q", clip(m.ID))
	}
	if m.Name != "" && CheckName(m.Name) != nil {
		return bad("name %q", clip(m.Name))
	}
	if len(m.Entries) == 0 || len(m.Entries) > MaxEntries || m.Files != len(m.Entries) {
		return bad("%d entries, %d files", len(m.Entries), m.Files)
	}
	if len(m.Sandbox) > 128 || len(m.Image) > 256 || len(m.Dir) > MaxPath || len(m.Env) > 4096 || len(m.Skipped) > MaxEntries {
		return bad("a field out of bounds")
	}
	var bytes int64
	seen := map[string]string{}
	for i, e := range m.Entries {
		if i == 0 && (e.Path != "." || e.Type != TypeDir) {
			return bad("the first entry is not the root directory")
		}
		if i > 0 {
			if rel, err := relPath("r", "r/"+e.Path); err != nil || rel != e.Path {
				return bad("entry path %q", clip(e.Path))
			}
			if seen[path.Dir(e.Path)] != TypeDir {
				return bad("entry %q before its directory", clip(e.Path))
			}
		}
		if _, dup := seen[e.Path]; dup {
			return bad("entry %q twice", clip(e.Path))
		}
		if e.Mode > 0o7777 || e.Size < 0 {
			return bad("entry %q: mode %o, size %d", clip(e.Path), e.Mode, e.Size)
		}
		switch e.Type {
		case TypeDir:
			if e.Size != 0 || e.SHA256 != "" || e.Link != "" {
				return bad("directory %q with content", clip(e.Path))
			}
		case TypeFile:
			if b, err := hex.DecodeString(e.SHA256); err != nil || len(b) != 32 || strings.ToLower(e.SHA256) != e.SHA256 || e.Link != "" {
				return bad("file %q: sha256 %q", clip(e.Path), clip(e.SHA256))
			}
			bytes += e.Size
		case TypeSymlink:
			if e.Link == "" || len(e.Link) > MaxPath || strings.IndexByte(e.Link, 0) >= 0 || e.SHA256 != "" || e.Size != 0 {
				return bad("symlink %q", clip(e.Path))
			}
		case TypeHardlink:
			if seen[e.Link] != TypeFile || e.SHA256 != "" || e.Size != 0 {
				return bad("hardlink %q to %q", clip(e.Path), clip(e.Link))
			}
		default:
			return bad("entry %q of type %q", clip(e.Path), clip(e.Type))
		}
		seen[e.Path] = e.Type
	}
	if bytes != m.Bytes {
		return bad("%d bytes of files, %d said", bytes, m.Bytes)
	}
	return m, nil
}

// readBounded reads r to its end, failing past max bytes.
func readBounded(r io.Reader, max int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("more than %d bytes", max)
	}
	return b, nil
}
