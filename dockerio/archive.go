package dockerio

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"path"
	"strings"
	"sync"

	"github.com/docker/docker/api/types/container"

	"github.com/stockade/stockade/spec"
)

// workspacePath turns a path relative to /workspace into an absolute one,
// refusing anything that would leave it.
func workspacePath(p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 || path.IsAbs(p) {
		return "", spec.Errorf(spec.CodeInvalidArgument, "dockerio.archive", "path %q is not relative to %s", p, WorkspaceDir)
	}
	c := path.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", spec.Errorf(spec.CodeInvalidArgument, "dockerio.archive", "path %q leaves %s", p, WorkspaceDir)
	}
	if c == "." {
		return WorkspaceDir, nil
	}
	return WorkspaceDir + "/" + c, nil
}

// rewrite copies a tar stream, setting every entry's owner to uid:gid,
// clearing setuid/setgid/sticky bits, and refusing devices, FIFOs and
// absolute or escaping names.
func rewrite(dst io.Writer, src io.Reader, u spec.User) error {
	tr := tar.NewReader(src)
	tw := tar.NewWriter(dst)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return tw.Close()
		}
		if err != nil {
			return spec.Wrap(spec.CodeInvalidArgument, "dockerio.archive", err, "reading the archive")
		}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink:
		default:
			return spec.Errorf(spec.CodeInvalidArgument, "dockerio.archive", "entry %q: type %q is not a file, directory or link", h.Name, h.Typeflag)
		}
		if path.IsAbs(h.Name) || strings.HasPrefix(path.Clean(h.Name), "..") {
			return spec.Errorf(spec.CodeInvalidArgument, "dockerio.archive", "entry %q leaves the destination", h.Name)
		}
		h.Uid, h.Gid = int(u.UID), int(u.GID)
		h.Uname, h.Gname = "", ""
		h.Mode &= 0o777
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return spec.Wrap(spec.CodeInvalidArgument, "dockerio.archive", err, "entry %q", h.Name)
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return spec.Wrap(spec.CodeInvalidArgument, "dockerio.archive", err, "entry %q", h.Name)
		}
	}
}

// PutArchive extracts a tar stream into /workspace/<dir> through the export
// container (never an exec in the workload). Every entry is owned by the
// sandbox's uid:gid; special files and setuid bits are refused or cleared.
// dir must exist.
func (a *Adapter) PutArchive(ctx context.Context, sb Sandbox, dir string, r io.Reader) error {
	cli, err := a.ready(ctx)
	if err != nil {
		return err
	}
	dst, err := workspacePath(dir)
	if err != nil {
		return err
	}
	pr, pw := io.Pipe()
	var rerr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rerr = rewrite(pw, r, sb.Spec.Policy.User)
		pw.CloseWithError(rerr)
	}()
	err = cli.CopyToContainer(ctx, sb.Export, dst, pr, container.CopyToContainerOptions{})
	pr.CloseWithError(errors.New("dockerio: archive upload ended"))
	wg.Wait()
	if rerr != nil {
		return rerr
	}
	if err != nil {
		return translate(err, "dockerio.archive", "extracting into %s through export container %s", dst, sb.Export)
	}
	return nil
}

// GetArchive returns a tar stream of /workspace/<p> read through the export
// container. If the workload runs and pause is true, it is paused until the
// stream is closed (or ctx ends), so the copy is consistent; if pause is
// false, live reports that the copy was taken from a running workload.
// The caller must Close rc.
func (a *Adapter) GetArchive(ctx context.Context, sb Sandbox, p string, pause bool) (io.ReadCloser, bool, error) {
	cli, err := a.ready(ctx)
	if err != nil {
		return nil, false, err
	}
	src, err := workspacePath(p)
	if err != nil {
		return nil, false, err
	}
	c, err := cli.ContainerInspect(ctx, sb.Workload)
	if err != nil {
		return nil, false, translate(err, "dockerio.archive", "inspecting workload %s", sb.Workload)
	}
	running := c.State != nil && c.State.Running && !c.State.Paused
	unpause := func() error { return nil }
	if running && pause {
		if err := cli.ContainerPause(ctx, sb.Workload); err != nil {
			return nil, false, translate(err, "dockerio.archive", "pausing workload %s", sb.Workload)
		}
		var once sync.Once
		var uerr error
		unpause = func() error {
			once.Do(func() {
				uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
				defer cancel()
				if err := cli.ContainerUnpause(uctx, sb.Workload); err != nil {
					uerr = translate(err, "dockerio.archive", "unpausing workload %s", sb.Workload)
				}
			})
			return uerr
		}
	}
	rc, _, err := cli.CopyFromContainer(ctx, sb.Export, src)
	if err != nil {
		return nil, false, errors.Join(translate(err, "dockerio.archive", "reading %s through export container %s", src, sb.Export), unpause())
	}
	stop := context.AfterFunc(ctx, func() { unpause() })
	return &archiveReader{ReadCloser: rc, done: func() error { stop(); return unpause() }}, running && !pause, nil
}

type archiveReader struct {
	io.ReadCloser
	once sync.Once
	done func() error
	err  error
}

func (r *archiveReader) Close() error {
	r.once.Do(func() { r.err = errors.Join(r.ReadCloser.Close(), r.done()) })
	return r.err
}
