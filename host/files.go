package host

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/stockade/stockade/spec"
)

// Files is a sandbox's /workspace as files (Sandbox.Files): write one
// (its parents made), read one (streamed), list a directory, stat, make a
// directory tree, remove, rename. Every path is a workspace path
// (spec.WorkspaceRel: relative to /workspace, or absolute under it) and
// the runtime's own directory (spec.ReservedDir) is refused; errors name
// the path as given. Reads and writes go through the sandbox's archive
// (Put and Get: they work on a stopped sandbox too); Remove and Rename run
// rm and mv in the sandbox, as its user, as processes of its history (the
// workload must run and its image have /bin/rm and /bin/mv). Bulk copies
// stay with Put and Get.
//
// Mind the two bases: a relative path here is relative to /workspace,
// while a process's default working directory is /workspace/work (a
// process's relative Dir is relative to /workspace, as here), and
// checkpoints and rollbacks cover /workspace/work only: a file meant for
// the processes and the checkpoints goes under work/.
type Files interface {
	// Stat describes path.
	Stat(ctx context.Context, path string) (FileInfo, error)
	// List lists a directory's entries (not their contents), sorted as
	// the archive holds them, at most MaxListEntries (Truncated says
	// more were left out).
	List(ctx context.Context, dir string) (Listing, error)
	// Read streams a regular file's content; the caller closes it.
	Read(ctx context.Context, path string) (io.ReadCloser, FileInfo, error)
	// Write makes or replaces a regular file with size bytes from r and
	// permission bits mode (0: 0644), making its missing parents (0755).
	// A directory at path is refused, never replaced.
	Write(ctx context.Context, path string, r io.Reader, size int64, mode uint32) error
	// WriteFile is Write of data.
	WriteFile(ctx context.Context, path string, data []byte, mode uint32) error
	// MkdirAll makes a directory and its missing parents (mode 0: 0755);
	// one that exists is no error.
	MkdirAll(ctx context.Context, path string, mode uint32) error
	// Remove removes a path and everything under it; not_found when
	// nothing is there.
	Remove(ctx context.Context, path string) error
	// Rename moves from to to; to must not exist and its parent must.
	Rename(ctx context.Context, from, to string) error
}

// List's bounds. A directory's archive holds its whole subtree, contents
// included (Docker has no listing call), and List reads past what it does
// not list: at most MaxListEntries entries listed, and at most
// maxListHeaders entries and maxListSkipped bytes of content gone through,
// so a sandbox's huge (or sparse: Docker's tar is not sparse-aware) file
// cannot make a List read for ever. Past a bound the listing is Truncated,
// and Why says which.
const (
	MaxListEntries = 10000
	maxListHeaders = 100 * MaxListEntries
	maxListSkipped = 64 << 20
)

// FileInfo describes a workspace path.
type FileInfo struct {
	// Path is absolute, under /workspace.
	Path string `json:"path"`
	Name string `json:"name"`
	// Kind is file, dir, symlink or other.
	Kind       string    `json:"kind"`
	Size       int64     `json:"size"`
	Mode       uint32    `json:"mode"`
	ModTime    time.Time `json:"mod_time"`
	LinkTarget string    `json:"link_target,omitempty"`
}

// Listing is a directory's entries.
type Listing struct {
	Dir       string     `json:"dir"`
	Entries   []FileInfo `json:"entries"`
	Truncated bool       `json:"truncated,omitempty"`
	// Why says which bound cut a Truncated listing.
	Why string `json:"why,omitempty"`
}

// FilesOf is the Files of sb, made of its Put, Get and Start: the one
// implementation both the embedded runtime and the client hand out, so
// the two cannot differ.
func FilesOf(sb Sandbox) Files { return files{sb} }

type files struct{ sb Sandbox }

// where is a caller's path checked: absolute and relative to /workspace,
// refused when it leaves the workspace or names the runtime's directory.
func where(p string) (abs, rel string, err error) {
	rel, err = spec.WorkspaceRel(p)
	if err != nil {
		return "", "", err
	}
	if spec.Reserved(rel) {
		return "", "", spec.Errorf(spec.CodeInvalidArgument, "files", "path %q is the runtime's own (%s/%s)", p, spec.WorkspaceDir, spec.ReservedDir)
	}
	abs, _ = spec.WorkspacePath(rel)
	return abs, rel, nil
}

// get opens the archive of rel, its first header read.
func (f files) get(ctx context.Context, given, rel string) (*tar.Header, *tar.Reader, io.ReadCloser, error) {
	rc, _, err := f.sb.Get(ctx, rel, false)
	if err != nil {
		if spec.IsCode(err, spec.CodeNotFound) {
			// Docker's words name its container; the caller's path is
			// what they need.
			return nil, nil, nil, spec.Errorf(spec.CodeNotFound, "files", "%q does not exist in sandbox %s", given, f.sb.ID())
		}
		return nil, nil, nil, err
	}
	tr := tar.NewReader(rc)
	h, err := tr.Next()
	if err != nil {
		_ = rc.Close() // the read error is the one to report
		return nil, nil, nil, spec.Wrap(spec.CodeStreamFailure, "files", err, "reading %q from sandbox %s", given, f.sb.ID())
	}
	return h, tr, rc, nil
}

func infoOf(h *tar.Header, abs string) FileInfo {
	fi := FileInfo{Path: abs, Name: path.Base(abs), Size: h.Size, Mode: uint32(h.Mode) & 0o7777, ModTime: h.ModTime}
	switch h.Typeflag {
	case tar.TypeReg:
		fi.Kind = "file"
	case tar.TypeDir:
		fi.Kind, fi.Size = "dir", 0
	case tar.TypeSymlink:
		fi.Kind, fi.LinkTarget, fi.Size = "symlink", h.Linkname, 0
	default:
		fi.Kind, fi.Size = "other", 0
	}
	return fi
}

func (f files) Stat(ctx context.Context, p string) (FileInfo, error) {
	abs, rel, err := where(p)
	if err != nil {
		return FileInfo{}, err
	}
	h, _, rc, err := f.get(ctx, p, rel)
	if err != nil {
		return FileInfo{}, err
	}
	_ = rc.Close() // only its first header was wanted
	return infoOf(h, abs), nil
}

func (f files) List(ctx context.Context, dir string) (Listing, error) {
	abs, rel, err := where(dir)
	if err != nil {
		return Listing{}, err
	}
	h, tr, rc, err := f.get(ctx, dir, rel)
	if err != nil {
		return Listing{}, err
	}
	defer func() { _ = rc.Close() }() // read only
	if h.Typeflag != tar.TypeDir {
		return Listing{}, spec.Errorf(spec.CodeInvalidArgument, "files", "%q is a %s, not a directory", dir, infoOf(h, abs).Kind)
	}
	top := strings.TrimSuffix(h.Name, "/")
	out := Listing{Dir: abs, Entries: []FileInfo{}}
	cut := func(why string) (Listing, error) {
		out.Truncated, out.Why = true, why
		return out, nil
	}
	headers, skipped := 0, int64(0)
	for {
		if headers++; headers > maxListHeaders {
			return cut(fmt.Sprintf("the directory's tree holds over %d entries", maxListHeaders))
		}
		if skipped > maxListSkipped {
			return cut(fmt.Sprintf("the directory's tree holds over %d MiB of content to read past", maxListSkipped>>20))
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, spec.Wrap(spec.CodeStreamFailure, "files", err, "listing %q in sandbox %s", dir, f.sb.ID())
		}
		if h.Typeflag == tar.TypeReg {
			skipped += h.Size // the next Next reads past it
		}
		name, ok := strings.CutPrefix(strings.TrimSuffix(h.Name, "/"), top+"/")
		if !ok || name == "" || strings.Contains(name, "/") {
			continue // deeper: its directory is listed, not its contents
		}
		if len(out.Entries) == MaxListEntries {
			return cut(fmt.Sprintf("over %d entries", MaxListEntries))
		}
		out.Entries = append(out.Entries, infoOf(h, path.Join(abs, name)))
	}
}

func (f files) Read(ctx context.Context, p string) (io.ReadCloser, FileInfo, error) {
	abs, rel, err := where(p)
	if err != nil {
		return nil, FileInfo{}, err
	}
	h, tr, rc, err := f.get(ctx, p, rel)
	if err != nil {
		return nil, FileInfo{}, err
	}
	fi := infoOf(h, abs)
	if h.Typeflag != tar.TypeReg {
		_ = rc.Close() // refused: nothing read
		what := "a " + fi.Kind
		if fi.Kind == "symlink" {
			what = fmt.Sprintf("a symbolic link (to %q): read its target", fi.LinkTarget)
		}
		return nil, FileInfo{}, spec.Errorf(spec.CodeInvalidArgument, "files", "%q is %s, not a regular file", p, what)
	}
	return readCloser{Reader: tr, Closer: rc}, fi, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

func (f files) WriteFile(ctx context.Context, p string, data []byte, mode uint32) error {
	return f.Write(ctx, p, bytes.NewReader(data), int64(len(data)), mode)
}

func (f files) Write(ctx context.Context, p string, r io.Reader, size int64, mode uint32) error {
	if size < 0 {
		return spec.Errorf(spec.CodeInvalidArgument, "files", "size %d of %q is negative", size, p)
	}
	return f.make(ctx, p, &tar.Header{Typeflag: tar.TypeReg, Mode: int64(orMode(mode, 0o644)), Size: size}, r)
}

func (f files) MkdirAll(ctx context.Context, p string, mode uint32) error {
	return f.make(ctx, p, &tar.Header{Typeflag: tar.TypeDir, Mode: int64(orMode(mode, 0o755))}, nil)
}

func orMode(mode, def uint32) uint32 {
	if mode&0o777 == 0 {
		return def
	}
	return mode & 0o777
}

// make makes path as h says (a file with r's content, or a directory),
// with its missing parents: it finds the deepest directory that exists and
// puts one archive of what is missing below it.
//
// The daemon extracts as root: the checks here only word the refusals;
// the ones that keep root from following a link a sandbox process made
// are PutArchive's, with the workload frozen from before them to after the
// extraction (every Put freezes a running workload), so no process can
// swap a directory for a link in between.
func (f files) make(ctx context.Context, p string, h *tar.Header, r io.Reader) error {
	abs, rel, err := where(p)
	if err != nil {
		return err
	}
	if rel == "." {
		if h.Typeflag == tar.TypeDir {
			return nil
		}
		return spec.Errorf(spec.CodeInvalidArgument, "files", "%q is the workspace itself, a directory", p)
	}
	// The deepest directory that exists, from the parent up: what is
	// missing below it is made. A file on the way is refused.
	base := path.Dir(rel)
	var missing []string // below base, outermost first
	for base != "." {
		st, err := f.Stat(ctx, base)
		if err == nil {
			if st.Kind != "dir" {
				return spec.Errorf(spec.CodeInvalidArgument, "files", "cannot make %q: %s is a %s, not a directory", p, st.Path, st.Kind)
			}
			break
		}
		if !spec.IsCode(err, spec.CodeNotFound) {
			return err
		}
		missing = append([]string{path.Base(base)}, missing...)
		base = path.Dir(base)
	}
	if len(missing) == 0 {
		// What is there now decides: a directory is never replaced by a
		// file (the extraction would remove it whole), and one asked for
		// is done.
		switch st, err := f.Stat(ctx, rel); {
		case err == nil && st.Kind == "dir" && h.Typeflag == tar.TypeDir:
			return nil
		case err == nil && st.Kind == "dir":
			return spec.Errorf(spec.CodeInvalidArgument, "files", "%q is a directory: a file is not written over it (remove it first)", p)
		case err == nil && h.Typeflag == tar.TypeDir:
			return spec.Errorf(spec.CodeInvalidArgument, "files", "%q exists and is a %s, not a directory", p, st.Kind)
		case err != nil && !spec.IsCode(err, spec.CodeNotFound):
			return err
		}
	}
	pr, pw := io.Pipe()
	var wg sync.WaitGroup
	var werr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		werr = writeArchive(pw, missing, path.Base(rel), h, r)
		_ = pw.CloseWithError(werr) // the reader's error follows
	}()
	err = f.sb.Put(ctx, base, pr)
	_ = pr.CloseWithError(errors.New("the put ended")) // unblocks a writer the put stopped reading
	wg.Wait()
	switch {
	case werr != nil && !errors.Is(werr, io.ErrClosedPipe):
		return werr
	case spec.IsCode(err, spec.CodeNotFound):
		return spec.Errorf(spec.CodeNotFound, "files", "the directory of %q vanished while it was written (something in the sandbox removed it)", abs)
	}
	return err
}

// writeArchive writes the missing directories, then the entry itself.
func writeArchive(w io.Writer, dirs []string, name string, h *tar.Header, r io.Reader) error {
	tw := tar.NewWriter(w)
	now := time.Now()
	at := ""
	for _, d := range dirs {
		at = path.Join(at, d)
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: at + "/", Mode: 0o755, ModTime: now}); err != nil {
			return spec.Wrap(spec.CodeInternal, "files", err, "writing the archive")
		}
	}
	h.Name, h.ModTime = path.Join(at, name), now
	if h.Typeflag == tar.TypeDir {
		h.Name += "/"
	}
	if err := tw.WriteHeader(h); err != nil {
		return spec.Wrap(spec.CodeInternal, "files", err, "writing the archive")
	}
	if r != nil {
		n, err := io.Copy(tw, io.LimitReader(r, h.Size))
		if err != nil {
			return spec.Wrap(spec.CodeInvalidArgument, "files", err, "reading the content of %s", h.Name)
		}
		if n != h.Size {
			return spec.Errorf(spec.CodeInvalidArgument, "files", "the content of %s ended after %d of its %d bytes", h.Name, n, h.Size)
		}
	}
	if err := tw.Close(); err != nil {
		return spec.Wrap(spec.CodeInternal, "files", err, "writing the archive")
	}
	return nil
}

func (f files) Remove(ctx context.Context, p string) error {
	abs, rel, err := where(p)
	if err != nil {
		return err
	}
	if rel == "." {
		return spec.Errorf(spec.CodeInvalidArgument, "files", "%q is the workspace itself: remove what is in it", p)
	}
	if _, err := f.Stat(ctx, rel); err != nil {
		return err
	}
	return f.run(ctx, "/bin/rm", "-rf", "--", abs)
}

func (f files) Rename(ctx context.Context, from, to string) error {
	fromAbs, fromRel, err := where(from)
	if err != nil {
		return err
	}
	toAbs, toRel, err := where(to)
	if err != nil {
		return err
	}
	if fromRel == "." || toRel == "." {
		return spec.Errorf(spec.CodeInvalidArgument, "files", "the workspace itself is not renamed (%q to %q)", from, to)
	}
	if _, err := f.Stat(ctx, fromRel); err != nil {
		return err
	}
	switch _, err := f.Stat(ctx, toRel); {
	case err == nil:
		return spec.Errorf(spec.CodeConflict, "files", "%q exists: a rename does not replace (remove it first)", to)
	case !spec.IsCode(err, spec.CodeNotFound):
		return err
	}
	if parent := path.Dir(toRel); parent != "." {
		st, err := f.Stat(ctx, parent)
		if err != nil {
			return err
		}
		if st.Kind != "dir" {
			return spec.Errorf(spec.CodeInvalidArgument, "files", "the parent of %q is a %s, not a directory", to, st.Kind)
		}
	}
	return f.run(ctx, "/bin/mv", "--", fromAbs, toAbs)
}

// run runs argv (by absolute path: the image's, on its read-only root,
// never one a sandbox's PATH could put first) in the sandbox to its end,
// as the sandbox's user; a failure carries its stderr.
func (f files) run(ctx context.Context, argv ...string) error {
	p, err := f.sb.Start(ctx, spec.Process{Argv: argv, Stdout: spec.Discard, Timeout: time.Minute})
	if err != nil {
		if p != nil && p.Stderr() != nil {
			_ = p.Stderr().Close() // nothing will read it
		}
		return err
	}
	var stderr bytes.Buffer
	_, rerr := io.Copy(&stderr, io.LimitReader(p.Stderr(), 4<<10))
	_, _ = io.Copy(io.Discard, p.Stderr()) // the rest: every piped stream is read
	_ = p.Stderr().Close()                 // read to its end
	res, err := p.Wait(ctx)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 || rerr != nil {
		return spec.Errorf(spec.CodeExecFailed, "files", "%s in sandbox %s (process %s) exited %d: %s", strings.Join(argv, " "), f.sb.ID(), p.ID(), res.ExitCode, strings.TrimSpace(stderr.String()))
	}
	return nil
}
