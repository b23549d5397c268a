package dockerio

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/spec"
)

// The warden binary's place in a sandbox: a root-owned execute-only file
// in a root-owned directory of the workspace volume, written through the
// export container when the workspace is seeded. The sandbox user can
// neither replace nor rename it, so every later exec of it runs our
// program; and since it cannot read it, the kernel makes each process of
// it undumpable from its execve (no ptrace by the workload, not even in
// the instant before the warden's own PR_SET_DUMPABLE).
const (
	WardenDir  = WorkspaceDir + "/" + spec.ReservedDir
	wardenPath = WardenDir + "/stockade-warden"
	// wardenMode is the binary's mode: execute-only.
	wardenMode = 0o111
)

// reservedPath reports whether a workspace-relative path (already cleaned)
// is the warden's, which no caller may write or read through the archive
// API.
func reservedPath(rel string) bool { return spec.Reserved(rel) }

// WardenConn is one link's transport to a warden: the exec's stdout (Docker's
// multiplex framing removed; stderr goes to the request's Stderr) and its
// stdin.
type WardenConn struct {
	ExecID string
	R      io.Reader
	W      io.Writer
	C      io.Closer
}

// wardenTar adds the warden's directory and binary to a seed archive. The
// workspace root itself is made root-owned 0755: Docker copies an image's
// own /workspace (and its owner) into a fresh volume, and a sandbox user
// owning the root could rename the warden's directory away.
func wardenTar(tw *tar.Writer, bin []byte, now time.Time) error {
	hdrs := []*tar.Header{
		{Typeflag: tar.TypeDir, Name: "./", Mode: 0o755, ModTime: now, Format: tar.FormatPAX},
		{Typeflag: tar.TypeDir, Name: spec.ReservedDir + "/", Mode: 0o755, ModTime: now, Format: tar.FormatPAX},
		{Typeflag: tar.TypeReg, Name: spec.ReservedDir + "/stockade-warden", Mode: wardenMode, Size: int64(len(bin)), ModTime: now, Format: tar.FormatPAX},
	}
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
	}
	_, err := tw.Write(bin)
	return err
}

// HasWarden reports whether sandboxes get a warden (the adapter was given
// its binary).
func (a *Adapter) HasWarden() bool { return a.warden != nil }

// payloadError wraps a Payload's refusal, keeping its code (a source that
// gives none: engine).
func payloadError(err error, op, msg string) error {
	code := spec.CodeOf(err)
	if code == "" {
		code = spec.CodeEngine
	}
	return spec.Wrap(code, op, err, "%s", msg)
}

// StartWarden starts the sandbox's warden: one exec of the delivered binary
// as the sandbox's user, stdin attached, no TTY. Its stdin and stdout are
// the link; what it writes on stderr goes to stderr (bounded lines, for the
// log). unsupported when the adapter has no warden binary.
func (a *Adapter) StartWarden(ctx context.Context, sb Sandbox, stderr io.Writer) (WardenConn, error) {
	return a.wardenExec(ctx, sb, stderr, wardenPath, "serve")
}

// AttachWarden bridges a new link to a running warden through its socket:
// an exec of `stockade-warden attach SOCKET` whose stdin and stdout are the
// link for as long as it lives.
func (a *Adapter) AttachWarden(ctx context.Context, sb Sandbox, socket string, stderr io.Writer) (WardenConn, error) {
	if err := checkWardenSocket(socket); err != nil {
		return WardenConn{}, err
	}
	return a.wardenExec(ctx, sb, stderr, wardenPath, "attach", socket)
}

// checkWardenSocket refuses a reattach socket that is not a plain name
// under TmpDir (what a warden's Hello says; the journal keeps it).
func checkWardenSocket(socket string) error {
	rel, ok := spec.CleanRelPath(strings.TrimPrefix(socket, TmpDir+"/"))
	if !strings.HasPrefix(socket, TmpDir+"/") || !ok || rel != strings.TrimPrefix(socket, TmpDir+"/") || strings.Contains(rel, "/") || len(socket) > 108 {
		return spec.Errorf(spec.CodeInvalidArgument, "dockerio.warden", "warden socket %q is not a path under %s", socket, TmpDir)
	}
	return nil
}

func (a *Adapter) wardenExec(ctx context.Context, sb Sandbox, stderr io.Writer, argv ...string) (_ WardenConn, err error) {
	if !a.HasWarden() {
		return WardenConn{}, spec.Errorf(spec.CodeUnsupported, "dockerio.warden", "this runtime has no warden binary")
	}
	return a.execLink(ctx, sb.Workload, user(sb.Spec.Policy), WorkDir, stderr, argv...)
}

// execLink starts an exec whose stdin and stdout are a byte stream to the
// caller (a warden's or a proxy's link): no TTY, Docker's multiplexing
// removed, stderr handed to stderr.
func (a *Adapter) execLink(ctx context.Context, containerID, usr, dir string, stderr io.Writer, argv ...string) (_ WardenConn, err error) {
	cli, err := a.ready(ctx)
	if err != nil {
		return WardenConn{}, err
	}
	resp, err := cli.ContainerExecCreate(ctx, containerID, container.ExecOptions{
		User: usr, AttachStdin: true, AttachStdout: true, AttachStderr: true,
		WorkingDir: dir, Cmd: argv,
	})
	if err != nil {
		return WardenConn{}, translate(err, "dockerio.exec", "creating the %s exec in %s", argv[0], containerID)
	}
	hj, err := cli.ContainerExecAttach(ctx, resp.ID, container.ExecAttachOptions{})
	if err != nil {
		return WardenConn{}, translate(err, "dockerio.exec", "attaching the %s exec %s", argv[0], resp.ID)
	}
	if mt, ok := hj.MediaType(); ok && mt != multiplexedMediaType {
		hj.Close()
		return WardenConn{}, spec.Errorf(spec.CodeStreamFailure, "dockerio.exec", "%s exec %s: media type %q, want %q", argv[0], resp.ID, mt, multiplexedMediaType)
	}
	r := &demuxReader{dec: framing.NewDecoder(hj.Reader, framing.Options{FrameLimit: spec.DefaultFrameLimit, ChunkSize: spec.DefaultReceiveChunk}), stderr: stderr}
	c := &onceCloser{c: hj.Conn}
	return WardenConn{ExecID: resp.ID, R: r, W: hj.Conn, C: c}, nil
}

// demuxReader reads a warden exec's stdout as a plain stream: Docker's frames
// (from the daemon, trusted) are removed; stderr is handed on.
type demuxReader struct {
	dec    *framing.Decoder
	stderr io.Writer
	rest   []byte
}

func (d *demuxReader) Read(p []byte) (int, error) {
	for len(d.rest) == 0 {
		id, b, err := d.dec.Next()
		if err != nil {
			return 0, err
		}
		if id == framing.Stderr {
			if d.stderr != nil {
				// Diagnostics only: a failing sink must not fail the
				// warden's stream.
				_, _ = d.stderr.Write(b)
			}
			continue
		}
		d.rest = b
	}
	n := copy(p, d.rest)
	d.rest = d.rest[n:]
	return n, nil
}

type onceCloser struct {
	once sync.Once
	c    io.Closer
	err  error
}

func (o *onceCloser) Close() error {
	o.once.Do(func() { o.err = o.c.Close() })
	return o.err
}

// LineLog is an io.Writer that hands complete lines (each cut at 1 KiB) to
// log, and at most max lines in all: a warden's stderr is the sandbox's to
// write, and must not flood the runtime's log.
type LineLog struct {
	Log  func(line string)
	Max  int
	mu   sync.Mutex
	buf  bytes.Buffer
	seen int
	last string
}

func (l *LineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range p {
		if c == '\n' || l.buf.Len() >= 1024 {
			l.emit()
			if c == '\n' {
				continue
			}
		}
		l.buf.WriteByte(c)
	}
	return len(p), nil
}

func (l *LineLog) emit() {
	if l.buf.Len() > 0 {
		l.last = strings.ToValidUTF8(l.buf.String(), "?")
		if l.seen < l.Max {
			l.Log(l.last)
		}
	}
	l.seen++
	l.buf.Reset()
}

// Last returns the last whole line written ("" if none): why an exec
// that ended early says it did.
func (l *LineLog) Last() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

// EnsureWarden checks, through the export container, that the sandbox's
// warden directory and binary are exactly ours (root-owned; the file 0111,
// our bytes), and writes them again if not. The sandbox user cannot write it, but a Put
// through a symlink the workload made is extracted by the daemon as root:
// so the binary is checked before any exec of it that follows a Put, and
// on every reattach.
func (a *Adapter) EnsureWarden(ctx context.Context, sb Sandbox) error {
	if !a.HasWarden() {
		return spec.Errorf(spec.CodeUnsupported, "dockerio.warden", "this runtime has no warden binary")
	}
	cli, err := a.ready(ctx)
	if err != nil {
		return err
	}
	bin, err := a.warden.Bytes()
	if err != nil {
		return payloadError(err, "dockerio.warden", "reading the warden binary")
	}
	a.seeds.settle(ctx, sb, false) // the seed writes the binary first
	// Read first: on a reattach (every kept sandbox at recovery) it is
	// almost always intact, and a read is cheaper than an extraction.
	if ok, err := a.wardenIntact(ctx, cli, sb, bin); err != nil || ok {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := wardenTar(tw, bin, time.Now()); err != nil {
		return spec.Wrap(spec.CodeEngine, "dockerio.warden", err, "building the warden archive")
	}
	if err := tw.Close(); err != nil {
		return spec.Wrap(spec.CodeEngine, "dockerio.warden", err, "building the warden archive")
	}
	if err := cli.CopyToContainer(ctx, sb.Export, WorkspaceDir, &buf, container.CopyToContainerOptions{}); err != nil {
		return translate(err, "dockerio.warden", "writing the warden binary of sandbox %s", sb.ID)
	}
	if ok, err := a.wardenIntact(ctx, cli, sb, bin); err != nil || ok {
		return err
	}
	return spec.Errorf(spec.CodeUnsupported, "dockerio.warden", "sandbox %s: the warden binary at %s is not ours, and writing it again did not hold", sb.ID, wardenPath)
}

// wardenIntact reads the warden's directory back through the export
// container: exactly the root-owned 0755 directory and the root-owned 0111
// binary with our bytes, bin. (The workspace root stays root's: a fresh
// volume's root is root:root 0755 and a Put never carries its root entry.)
func (a *Adapter) wardenIntact(ctx context.Context, cli *client.Client, sb Sandbox, bin []byte) (bool, error) {
	rc, _, err := cli.CopyFromContainer(ctx, sb.Export, WardenDir)
	if err != nil {
		if spec.IsCode(translate(err, "", ""), spec.CodeNotFound) {
			return false, nil
		}
		return false, translate(err, "dockerio.warden", "reading the warden of sandbox %s back", sb.ID)
	}
	defer func() { _ = rc.Close() }() // only read
	tr := tar.NewReader(rc)
	var dirOK, binOK bool
	for n := 0; ; n++ {
		h, err := tr.Next()
		if err == io.EOF {
			return dirOK && binOK && n == 2, nil
		}
		if err != nil {
			return false, translate(err, "dockerio.warden", "reading the warden of sandbox %s back", sb.ID)
		}
		switch strings.TrimSuffix(h.Name, "/") {
		case spec.ReservedDir:
			dirOK = h.Typeflag == tar.TypeDir && h.Uid == 0 && h.Mode&0o7777 == 0o755
		case spec.ReservedDir + "/stockade-warden":
			if h.Typeflag != tar.TypeReg || h.Uid != 0 || h.Mode&0o7777 != wardenMode || h.Size != int64(len(bin)) {
				return false, nil
			}
			got, err := io.ReadAll(io.LimitReader(tr, h.Size))
			if err != nil {
				return false, translate(err, "dockerio.warden", "reading the warden of sandbox %s back", sb.ID)
			}
			binOK = bytes.Equal(got, bin)
		default:
			return false, nil // something else in it: write it again
		}
	}
}
