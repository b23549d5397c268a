package dockerio

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/stockade/stockade/spec"
)

// Archive limits.
const (
	// MaxArchiveBytes bounds one Put's archive as spooled (headers, data
	// and padding), so a caller cannot fill the runtime host's disk.
	MaxArchiveBytes = 1 << 30
	// maxLinkHops bounds the symlinks followed resolving one path, as the
	// kernel's ELOOP limit does, so a loop ends in a refusal.
	maxLinkHops = 40
	// maxLinkBytes bounds what one Put's symlinks may hold (names plus
	// relative targets) while their resolution is tracked: no less than a
	// checkpoint's manifest may hold, so every checkpoint restores.
	maxLinkBytes = 64 << 20
)

// links records the symlinks an archive has made so far, by the clean path
// they were made at (relative to the destination), so later entries and
// link targets are resolved as the kernel will resolve them at extraction.
type links struct {
	target map[string]string
	bytes  int
}

// resolve walks p (relative to the destination, not cleaned: ".." must apply
// after a symlink is followed, not before) one component at a time,
// following this archive's symlinks, and returns the clean path it reaches.
// It reports false if the walk climbs out of the destination, meets an
// absolute symlink target (it would resolve against the container's root),
// or follows more than maxLinkHops links: nothing is extracted through
// such a link. Symlinks already in the destination are not known here; see
// PutArchive.
func (l *links) resolve(p string) (string, bool) {
	cur, rest := ".", strings.Split(p, "/")
	for hops := 0; len(rest) > 0; {
		// cur holds no symlink, so ".." may pop its last component.
		next, ok := spec.CleanRelPath(cur + "/" + rest[0])
		if !ok {
			return "", false
		}
		cur, rest = next, rest[1:]
		t, isLink := l.target[cur]
		if !isLink {
			continue
		}
		if hops++; hops > maxLinkHops || path.IsAbs(t) {
			return "", false
		}
		cur, rest = path.Dir(cur), append(strings.Split(t, "/"), rest...)
	}
	return cur, true
}

// check refuses an entry that would be written, or whose link would point,
// outside the destination, and records a symlink for the entries after it.
func (l *links) check(h *tar.Header) error {
	bad := func(format string, args ...any) error {
		return spec.Errorf(spec.CodeInvalidArgument, "dockerio.archive", "entry %q: %s", h.Name, fmt.Sprintf(format, args...))
	}
	name, ok := spec.CleanRelPath(h.Name)
	if !ok {
		return bad("its name leaves the destination")
	}
	// Docker cleans names too; cleaning here means it extracts exactly the
	// path checked.
	h.Name = name
	if h.Typeflag == tar.TypeDir && name != "." {
		h.Name += "/"
	}
	parent, ok := l.resolve(path.Dir(name))
	if !ok {
		return bad("its directory resolves, through a symlink of this archive, outside the destination (or loops)")
	}
	switch h.Typeflag {
	case tar.TypeSymlink:
		// A symlink's target is data (an absolute one, as every Python
		// venv has, resolves against the root of whoever reads it, never
		// the destination): the link is made as it is, and nothing of this
		// archive is extracted through it (resolve refuses the path).
		// Docker's extraction refuses only a relative target whose "..",
		// read lexically from the link's own path, leave the destination:
		// refused here first, before anything is extracted.
		if h.Linkname == "" || strings.IndexByte(h.Linkname, 0) >= 0 {
			return bad("a symlink without a target, or with a NUL byte in it")
		}
		target := h.Linkname
		if path.IsAbs(target) {
			target = "/" // all resolve needs to know of it
		} else if _, ok := spec.CleanRelPath(path.Join(path.Dir(name), target)); !ok { //nolint:gosec // G305: a check of the path, not a write to it
			return bad("symlink target %q climbs out of the destination by its own \"..\" components, which the engine's extraction refuses; make it absolute, or keep it within the destination", h.Linkname)
		}
		if l.bytes += len(name) + len(target); l.bytes > maxLinkBytes {
			return bad("the archive's symlinks exceed %d bytes of names and targets", maxLinkBytes)
		}
		if l.target == nil {
			l.target = map[string]string{}
		}
		l.target[path.Join(parent, path.Base(name))] = target
	case tar.TypeLink:
		// A hardlink target names a path relative to the destination, which
		// Docker cleans before link(2) resolves its directories (but not
		// its last component: a hardlink to a symlink is to the symlink).
		t, ok := spec.CleanRelPath(h.Linkname)
		if !ok || t == "." {
			return bad("hardlink target %q is not a path within the destination", h.Linkname)
		}
		if _, ok := l.resolve(path.Dir(t)); !ok {
			return bad("hardlink target %q resolves, through a symlink of this archive, outside the destination (or loops)", h.Linkname)
		}
		h.Linkname = t
	}
	return nil
}

// rewrite copies a tar stream, setting every entry's owner to uid:gid,
// clearing setuid/setgid/sticky bits, dropping PAX records, and refusing
// devices, FIFOs, entries written through a symlink that leaves the
// destination, and hardlinks that leave it. Names and symlink targets are
// bytes, passed on unchanged (not UTF-8, absolute: data).
func rewrite(dst io.Writer, src io.Reader, u spec.User, atRoot bool) error {
	tr := tar.NewReader(src)
	tw := tar.NewWriter(dst)
	// An error of the destination (the spool's limit, its disk) keeps its
	// own code; anything else is the archive's fault.
	wrap := func(err error, format string, args ...any) error {
		if err == nil {
			return nil
		}
		var se *spec.Error
		if errors.As(err, &se) {
			return err
		}
		return spec.Wrap(spec.CodeInvalidArgument, "dockerio.archive", err, format, args...)
	}
	var l links
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return wrap(tw.Close(), "ending the archive")
		}
		if err != nil {
			return wrap(err, "reading the archive")
		}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink:
		default:
			return spec.Errorf(spec.CodeInvalidArgument, "dockerio.archive", "entry %q: type %q is not a file, directory or link", h.Name, h.Typeflag)
		}
		if err := l.check(h); err != nil {
			return err
		}
		if atRoot {
			name := strings.TrimSuffix(h.Name, "/")
			if name == "." {
				// The workspace root itself: its owner and mode are the
				// runtime's (root, 0755, so the warden's directory in it
				// stays put), not the archive's.
				//nolint:gosec // G110: no decompression here; tr reads the caller's uncompressed stream and keeps nothing of it.
				if _, err := io.Copy(io.Discard, tr); err != nil {
					return wrap(err, "reading the archive")
				}
				continue
			}
			// Where the entry lands, through this archive's symlinks, and
			// what a hardlink would share.
			at, _ := l.resolve(path.Dir(name))
			if reservedPath(name) || reservedPath(path.Join(at, path.Base(name))) || h.Typeflag == tar.TypeLink && reservedPath(h.Linkname) {
				return spec.Errorf(spec.CodeInvalidArgument, "dockerio.archive", "entry %q: %s is the warden's, reserved", h.Name, WardenDir)
			}
		}
		h.Uid, h.Gid = int(u.UID), int(u.GID)
		h.Uname, h.Gname = "", ""
		h.Mode &= 0o777
		// PAX records would carry extended attributes (SCHILY.xattr.*,
		// LIBARCHIVE.xattr.*: security.capability, trusted.*), ACLs and
		// sparse maps past every check above; the writer derives the ones
		// a header needs (long names, sizes) from its fields.
		h.PAXRecords = nil
		h.Xattrs = nil //nolint:staticcheck // the deprecated field is still written
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return wrap(err, "entry %q", h.Name)
		}
		//nolint:gosec // G110: no decompression here; tr reads the caller's uncompressed stream and dst (the spool) is bounded by MaxArchiveBytes.
		if _, err := io.Copy(tw, tr); err != nil {
			return wrap(err, "entry %q", h.Name)
		}
	}
}

// spoolFile is the spool's destination: a file bounded by MaxArchiveBytes.
type spoolFile struct {
	f *os.File
	n int64
}

func (s *spoolFile) Write(p []byte) (int, error) {
	if s.n+int64(len(p)) > MaxArchiveBytes {
		return 0, spec.Errorf(spec.CodeInvalidArgument, "dockerio.archive", "the archive exceeds the limit of %d bytes on one put", MaxArchiveBytes)
	}
	n, err := s.f.Write(p)
	s.n += int64(n)
	if err != nil {
		return n, spec.Wrap(spec.CodeInternal, "dockerio.archive", err, "spooling the archive")
	}
	return n, nil
}

// spool rewrites and checks the caller's whole archive into an unlinked
// temporary file before Docker sees a byte of it, and returns that file at
// its start. Checking while streaming to Docker cannot keep a bad entry from
// costing anything: Docker extracts each entry as it arrives, so an upload
// aborted at entry n leaves entries 1..n-1 written. Buffering in memory is
// unbounded; the spool is bounded (MaxArchiveBytes) and on disk.
//
// It returns when ctx ends even if the caller's reader blocks: that read
// cannot be interrupted, so the rewrite is left to end with it and then
// closes the file.
func spool(ctx context.Context, r io.Reader, u spec.User, atRoot bool) (*os.File, error) {
	f, err := os.CreateTemp("", "stockade-put-*.tar")
	if err != nil {
		return nil, spec.Wrap(spec.CodeInternal, "dockerio.archive", err, "making the archive's spool file")
	}
	// Unlinked at once: nothing is left behind, even by a crash.
	// Best effort: the file was just made in the temp dir, and the put
	// works from the open file either way.
	_ = os.Remove(f.Name())
	done := make(chan error, 1)
	go func() { done <- rewrite(&spoolFile{f: f}, r, u, atRoot) }()
	select {
	case err := <-done:
		if err == nil {
			if _, serr := f.Seek(0, io.SeekStart); serr != nil {
				err = spec.Wrap(spec.CodeInternal, "dockerio.archive", serr, "rewinding the archive's spool file")
			}
		}
		if err != nil {
			_ = f.Close() // the rewrite's error is the one reported
			return nil, err
		}
		return f, nil
	case <-ctx.Done():
		go func() {
			<-done        //nolint:errcheck // the put already failed with ctx's error
			_ = f.Close() // the spool is unlinked and abandoned: nothing to lose
		}()
		return nil, translate(ctx.Err(), "dockerio.archive", "reading the archive to put")
	}
}

// PutArchive extracts a tar stream into /workspace/<dir> through the export
// container (never an exec in the workload). Every entry is owned by the
// sandbox's uid:gid; special files are refused, setuid bits and PAX records
// (extended attributes) dropped. A symlink's target is data, made as it is
// (absolute, or resolving outside dir through other links); but an entry
// whose name or hardlink would resolve outside dir, following the archive's
// own symlinks, and a relative symlink target whose own ".." leave dir
// (Docker's extraction refuses it), fail the whole put with
// invalid_argument before anything is extracted: the archive is checked in
// full (spooled) first. The daemon extracts as root and follows a link
// already in the workspace (a process may have made one): so every
// directory the extraction would pass through without making it first (dir
// itself, and each parent an entry names that no earlier entry of the
// archive made, which would replace a link with a directory) is read back
// through the export container, and one that is a link fails the put with
// invalid_argument before anything is extracted. A process that swaps a
// directory for a link while the extraction runs is not stopped by this
// (SECURITY.md). dir must exist.
func (a *Adapter) PutArchive(ctx context.Context, sb Sandbox, dir string, r io.Reader) error {
	dst, err := archivePath(dir)
	if err != nil {
		return err
	}
	f, err := spool(ctx, r, sb.Spec.Policy.User, dst == WorkspaceDir)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }() // only read: the unlinked spool goes with it
	passed, err := passedDirs(f, dst)
	if err != nil {
		return err
	}
	cli, err := a.ready(ctx)
	if err != nil {
		return err
	}
	a.seeds.settle(ctx, sb, false) // an extraction never overlaps the seed's
	for _, p := range passed {
		st, err := cli.ContainerStatPath(ctx, sb.Export, p)
		if cerrdefs.IsNotFound(err) {
			continue // made by the extraction: nothing below it can be a link yet
		}
		if err != nil {
			return translate(err, "dockerio.archive", "reading %s back through export container %s", p, sb.Export)
		}
		if st.Mode&os.ModeSymlink != 0 || st.LinkTarget != "" {
			return spec.Errorf(spec.CodeInvalidArgument, "dockerio.archive", "the put would extract through %s, a link in the workspace (to %q): the daemon writes as root, so it is refused; remove the link or put elsewhere", p, st.LinkTarget)
		}
	}
	if err := cli.CopyToContainer(ctx, sb.Export, dst, f, container.CopyToContainerOptions{}); err != nil {
		if cerrdefs.IsNotFound(err) {
			// The caller's words, not the daemon's (its container ids).
			return spec.Errorf(spec.CodeNotFound, "dockerio.archive", "directory %s does not exist: make it first (Sandbox.Files().MkdirAll), or put into one that does", dst)
		}
		return translate(err, "dockerio.archive", "extracting into %s through export container %s", dst, sb.Export)
	}
	return nil
}

// maxPassedDirs bounds the directories a put reads back before extracting.
const maxPassedDirs = 512

// passedDirs lists, shortest first, the absolute paths an extraction of the
// spooled archive into dst passes through without making them itself: the
// components of dst below the workspace, each parent of an entry (or of a
// hardlink's target) that no earlier entry of the archive made as a
// directory, and a hardlink's target no earlier entry made as a file. An
// entry under one of the archive's own symlinks is refused. It rewinds the
// spool.
func passedDirs(f *os.File, dst string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(dst, WorkspaceDir), "/")
	if rel != "" {
		parts := strings.Split(rel, "/")
		for i := range parts {
			add(WorkspaceDir + "/" + strings.Join(parts[:i+1], "/"))
		}
	}
	// made: what earlier entries made (a directory, or a file a hardlink
	// may name); links: the archive's own symlinks, which nothing may be
	// extracted through (the daemon would follow one to a link planted in
	// the workspace).
	made, links := map[string]tar.Header{}, map[string]bool{}
	parents := func(what, name string) error {
		c, ok := spec.CleanRelPath(name)
		if !ok || c == "." {
			return nil
		}
		parts := strings.Split(c, "/")
		for i := 1; i < len(parts); i++ {
			p := strings.Join(parts[:i], "/")
			if links[p] {
				return spec.Errorf(spec.CodeInvalidArgument, "dockerio.archive", "%s %q is under %q, a link of the archive: a put extracts nothing through a link (put the directory itself)", what, name, p)
			}
			if h, ok := made[p]; !ok || h.Typeflag != tar.TypeDir {
				add(path.Join(dst, p))
			}
		}
		return nil
	}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, spec.Wrap(spec.CodeInternal, "dockerio.archive", err, "reading the spooled archive")
		}
		if err := parents("entry", h.Name); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeLink {
			if err := parents("hardlink target", h.Linkname); err != nil {
				return nil, err
			}
			// The target itself: the daemon chmods and times the new
			// link, which follows a symlink planted there.
			if c, ok := spec.CleanRelPath(h.Linkname); ok {
				if t, ok := made[c]; !ok || t.Typeflag != tar.TypeReg {
					if links[c] {
						return nil, spec.Errorf(spec.CodeInvalidArgument, "dockerio.archive", "hardlink %q names %q, a link of the archive", h.Name, h.Linkname)
					}
					add(path.Join(dst, c))
				}
			}
		}
		if c, ok := spec.CleanRelPath(h.Name); ok {
			made[c] = *h
			links[c] = h.Typeflag == tar.TypeSymlink
		}
		if len(out) > maxPassedDirs {
			return nil, spec.Errorf(spec.CodeInvalidArgument, "dockerio.archive", "the archive's entries pass through more than %d directories it does not hold: add their directory entries to it (each before what it holds)", maxPassedDirs)
		}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, spec.Wrap(spec.CodeInternal, "dockerio.archive", err, "rewinding the archive's spool file")
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) < len(out[j]) })
	return out, nil
}

// GetArchive returns a tar stream of /workspace/<p> read through the export
// container. It pauses nothing: a consistent copy is the sandbox actor's
// business (PauseSandbox, journaled, counted across concurrent readers). The
// caller must Close rc; ctx bounds the stream's whole life.
func (a *Adapter) GetArchive(ctx context.Context, sb Sandbox, p string) (io.ReadCloser, error) {
	cli, err := a.ready(ctx)
	if err != nil {
		return nil, err
	}
	src, err := archivePath(p)
	if err != nil {
		return nil, err
	}
	a.seeds.settle(ctx, sb, false) // a copy sees the workspace seeded
	rc, _, err := cli.CopyFromContainer(ctx, sb.Export, src)
	if err != nil {
		if strings.HasSuffix(err.Error(), ": not a directory") {
			// The daemon's lstat met a file where the path wants a
			// directory: as good as absent, and nothing of Docker's
			// (its storage path) is worth quoting.
			return nil, spec.Errorf(spec.CodeNotFound, "dockerio.archive", "%s does not exist: a component of it is a file, not a directory", src)
		}
		if cerrdefs.IsNotFound(err) {
			return nil, spec.Errorf(spec.CodeNotFound, "dockerio.archive", "%s does not exist", src)
		}
		return nil, translate(err, "dockerio.archive", "reading %s through export container %s", src, sb.Export)
	}
	return rc, nil
}

// PauseSandbox freezes the workload (the cgroup freezer): its files hold
// still for a consistent copy, and Docker refuses execs into it meanwhile.
func (a *Adapter) PauseSandbox(ctx context.Context, sb Sandbox) error {
	cli, err := a.ready(ctx)
	if err != nil {
		return err
	}
	if err := cli.ContainerPause(ctx, sb.Workload); err != nil {
		return translate(err, "dockerio.pause", "pausing workload %s", sb.Workload)
	}
	return nil
}

// UnpauseSandbox thaws the workload. One that is not paused (never was, or
// stopped meanwhile) or gone is not an error.
func (a *Adapter) UnpauseSandbox(ctx context.Context, sb Sandbox) error {
	cli, err := a.ready(ctx)
	if err != nil {
		return err
	}
	return a.unpause(ctx, cli, sb.Workload)
}

func (a *Adapter) unpause(ctx context.Context, cli *client.Client, id string) error {
	c, err := cli.ContainerInspect(ctx, id)
	switch {
	case cerrdefs.IsNotFound(err):
		return nil
	case err != nil:
		return translate(err, "dockerio.pause", "inspecting workload %s", id)
	case c.State == nil || !c.State.Paused:
		return nil // not paused: nothing to thaw
	}
	if err := cli.ContainerUnpause(ctx, id); err != nil && !cerrdefs.IsNotFound(err) {
		return translate(err, "dockerio.pause", "unpausing workload %s", id)
	}
	return nil
}

// archivePath is the absolute path of a Put's or Get's workspace path: it
// refuses one that leaves the workspace, and the warden's directory and
// what is in it.
func archivePath(p string) (string, error) {
	rel, err := spec.WorkspaceRel(p)
	if err != nil {
		return "", err
	}
	// Judged on the clean relative path, whichever form p came in.
	if reservedPath(rel) {
		return "", spec.Errorf(spec.CodeInvalidArgument, "dockerio.archive", "path %q: %s is the warden's, reserved", p, WardenDir)
	}
	return spec.WorkspacePath(rel)
}
