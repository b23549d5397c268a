package main

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/spec"
)

const cpUsage = "stockade cp SRC DST (one side ID:PATH, PATH relative to /workspace or absolute under it)"

// cpCmd copies between the local filesystem and a sandbox's /workspace,
// through the export container (Put, Get), like docker cp.
type cpCmd struct {
	g global
	// in: local → sandbox; else sandbox → local.
	in     bool
	id     string
	remote string // relative to /workspace, or absolute under it
	local  string
}

func parseCp(g global, args []string) (command, error) {
	c := &cpCmd{g: g}
	fs := newFlags("cp", &c.g)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return nil, err
	}
	if err := wantArgs("cp", pos, 2, cpUsage); err != nil {
		return nil, err
	}
	srcID, srcPath, srcRemote := splitRemote(pos[0])
	dstID, dstPath, dstRemote := splitRemote(pos[1])
	switch {
	case srcRemote == dstRemote:
		return nil, spec.Errorf(spec.CodeInvalidArgument, "cp", "exactly one of SRC and DST must be ID:PATH (usage: %s)", cpUsage)
	case dstRemote:
		c.in, c.id, c.remote, c.local = true, dstID, dstPath, pos[0]
	default:
		c.id, c.remote, c.local = srcID, srcPath, pos[1]
	}
	if c.id == "" || c.local == "" {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "cp", "an empty sandbox id or path (usage: %s)", cpUsage)
	}
	// The remote path is checked here as Put and Get will check it.
	if _, err := spec.WorkspacePath(strings.TrimSuffix(c.remote, "/")); err != nil {
		return nil, err
	}
	if !c.in && strings.TrimSuffix(c.remote, "/") == "" {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "cp", "copy out a path under /workspace, e.g. ID:work")
	}
	return c, nil
}

// splitRemote reads ID:PATH. A colon after a slash belongs to a local path
// (./a:b), as docker cp reads it.
func splitRemote(arg string) (id, p string, ok bool) {
	id, p, ok = strings.Cut(arg, ":")
	if !ok || strings.Contains(id, "/") {
		return "", "", false
	}
	return id, p, true
}

func (c *cpCmd) execute(ctx context.Context, _ io.Reader, stdout, stderr io.Writer) (code int) {
	rt, sb, _, err := openSandbox(ctx, c.g, c.id)
	if err != nil {
		return fail(stderr, err, 1)
	}
	defer closeRuntime(rt, stderr, &code, 1)
	if c.in {
		err = c.copyIn(ctx, sb)
	} else {
		err = c.copyOut(ctx, sb, stderr)
	}
	if err != nil {
		return fail(stderr, err, 1)
	}
	return 0
}

// copyIn sends the local file or directory as a tar stream. A remote path
// ending in "/" (or empty: /workspace) is the directory to copy into, under
// the source's own name; otherwise its last element is the new name.
func (c *cpCmd) copyIn(ctx context.Context, sb host.Sandbox) error {
	dir, name := path.Split(c.remote)
	if name == "" {
		name = filepath.Base(filepath.Clean(c.local))
	}
	if _, err := os.Stat(c.local); err != nil {
		return spec.Wrap(spec.CodeNotFound, "cp", err, "%s", c.local)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTar(pw, c.local, name)) }()
	// Ends the tar writer if Put stopped reading; a pipe's Close never
	// fails.
	defer func() { _ = pr.Close() }()
	return sb.Put(ctx, strings.TrimSuffix(dir, "/"), pr)
}

// writeTar writes root (a file, or a directory and everything under it) as
// a tar stream whose top entry is called name. The archive is checked again
// by Put (no entry may leave the target).
func writeTar(w io.Writer, root, name string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name = path.Join(name, filepath.ToSlash(rel))
		if info.IsDir() {
			h.Name += "/"
		}
		h.Uname, h.Gname = "", "" // Put owns every entry by the sandbox's user
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		// The tree is the CLI user's own, read with the user's rights: a
		// link swapped in reaches nothing the user could not name.
		f, err := os.Open(p) //nolint:gosec // G122: see above
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }() // only read
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return spec.Wrap(spec.CodeInvalidArgument, "cp", err, "reading %s", root)
	}
	return tw.Close()
}

// copyOut reads the remote path's tar stream into the local path: into it
// when it is an existing directory, else as that name.
func (c *cpCmd) copyOut(ctx context.Context, sb host.Sandbox, stderr io.Writer) error {
	rc, _, err := sb.Get(ctx, strings.TrimSuffix(c.remote, "/"), false)
	if err != nil {
		return err
	}
	defer func() { _ = rc.Close() }() // only read
	dest, rename := c.local, ""
	fi, err := os.Stat(c.local)
	switch {
	case err == nil && fi.IsDir():
	case strings.HasSuffix(c.local, "/"):
		// Asked to copy into a directory that is not there (docker cp
		// refuses it too), rather than made a file named like it.
		return spec.Errorf(spec.CodeNotFound, "cp", "directory %s does not exist", c.local)
	default:
		dest, rename = filepath.Dir(c.local), filepath.Base(c.local)
	}
	return extractTar(rc, dest, rename, stderr)
}

// extractTar writes a tar stream from a sandbox (untrusted) under dest,
// renaming its top element when rename is set. Only directories and regular
// files are written, with permission bits only (no setuid), never through
// or as a link: a name that would leave dest, a link or a device is skipped
// with a warning.
func extractTar(r io.Reader, dest, rename string, warn io.Writer) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return spec.Wrap(spec.CodeStreamFailure, "cp", err, "reading the archive")
		}
		name, ok := spec.CleanRelPath(h.Name)
		if !ok || name == "." {
			note(warn, "cp: skipped %q: not a path inside the copy", h.Name)
			continue
		}
		if rename != "" {
			_, rest, _ := strings.Cut(name, "/")
			name = path.Join(rename, rest)
		}
		target := filepath.Join(dest, filepath.FromSlash(name))
		if err := noLinkBetween(dest, target); err != nil {
			return err
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, fs.FileMode(h.Mode)&0o777|0o700); err != nil {
				return spec.Wrap(spec.CodeInvalidArgument, "cp", err, "%s", target)
			}
		case tar.TypeReg:
			if err := writeFile(target, tr, fs.FileMode(h.Mode)&0o777); err != nil {
				return err
			}
		default:
			note(warn, "cp: skipped %s: a %s, not a file or directory", termSafe(name), typeName(h.Typeflag))
		}
	}
}

func writeFile(target string, r io.Reader, mode fs.FileMode) error {
	// Made like any directory of the user's (the umask applies), as
	// docker cp does.
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil { //nolint:gosec // G301: see above
		return spec.Wrap(spec.CodeInvalidArgument, "cp", err, "%s", target)
	}
	// O_NOFOLLOW: never write through a link someone left at the target.
	f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|noFollow, mode)
	if err != nil {
		return spec.Wrap(spec.CodeInvalidArgument, "cp", err, "%s", target)
	}
	if _, err := io.Copy(f, r); err != nil {
		_ = f.Close() // the copy's error is the one reported
		return spec.Wrap(spec.CodeStreamFailure, "cp", err, "writing %s", target)
	}
	return f.Close()
}

// noLinkBetween refuses a target whose directories below dest include a
// symbolic link: writing through it could leave dest.
func noLinkBetween(dest, target string) error {
	rel, err := filepath.Rel(dest, filepath.Dir(target))
	if err != nil {
		return spec.Wrap(spec.CodeInvalidArgument, "cp", err, "%s", target)
	}
	p := dest
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		if part == "." || part == "" {
			continue
		}
		p = filepath.Join(p, part)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return spec.Errorf(spec.CodeInvalidArgument, "cp", "%s is a symbolic link: refusing to write through it", p)
		}
	}
	return nil
}

func typeName(t byte) string {
	switch t {
	case tar.TypeSymlink:
		return "symbolic link"
	case tar.TypeLink:
		return "hard link"
	case tar.TypeChar, tar.TypeBlock:
		return "device"
	case tar.TypeFifo:
		return "fifo"
	}
	return fmt.Sprintf("tar entry of type %q", t)
}
