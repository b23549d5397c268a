package testkit

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/profile"

	"github.com/docker/docker/client"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/spec"
)

// TarEntry is one entry of a test archive.
type TarEntry struct {
	Type       byte
	Name, Link string
	Body       string
}

// TarOf is an archive of es, in order.
func TarOf(t testing.TB, es ...TarEntry) *bytes.Reader {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := &tar.Header{Typeflag: e.Type, Name: e.Name, Linkname: e.Link, Mode: 0o644}
		switch e.Type {
		case tar.TypeReg:
			h.Size = int64(len(e.Body))
		case tar.TypeDir:
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.Body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader(buf.Bytes())
}

// ReadTar reads a one-file archive's content.
func ReadTar(t testing.TB, rc io.ReadCloser) string {
	t.Helper()
	defer func() { _ = rc.Close() }()
	tr := tar.NewReader(rc)
	if _, err := tr.Next(); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(tr)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// EscapingLinks are archives whose last entry's link leaves the
// destination, after a good file that must not be extracted.
var EscapingLinks = []struct {
	Name string
	Bad  TarEntry
}{
	{"symlink", TarEntry{Type: tar.TypeSymlink, Name: "evil", Link: "../../etc/x"}},
	{"hardlink", TarEntry{Type: tar.TypeLink, Name: "evil", Link: "../../etc/passwd"}},
	{"symlink through a symlink", TarEntry{Type: tar.TypeSymlink, Name: "here/evil", Link: "../x"}},
}

// pattern is what `yes <line> | head -c n` prints.
const PatternLine = "stockade-0123456789-abcdefghijklmnopqrstuvwxyz-ABCDEFGHIJKLMNOPQRSTUVWXYZ"

// DioEnv is one test's Docker world: the adapter under the profile named by
// STOCKADE_PROFILE, a raw client (for tampering and leak checks), a fresh
// owner whose resources are removed when the test ends, and the image.
type DioEnv struct {
	Adapter *dockerio.Adapter
	Docker  *client.Client
	Owner   string
	Image   string
}

// NewDio is a DioEnv whose adapter has passed its preflight.
func NewDio(t testing.TB) *DioEnv {
	t.Helper()
	cli := dockertest.Client(t)
	owner := dockertest.Owner(t, cli)
	image := dockertest.ImageID(t, cli)
	if os.Getenv(profile.Env) == "" {
		t.Logf("%s is unset: using the default profile %s (the Makefile exports this machine's)", profile.Env, profile.Default)
	}
	a, err := dockerio.NewAdapter(dockerio.Options{})
	if err != nil {
		t.Fatalf("adapter: %v", err)
	}
	t.Cleanup(func() {
		_ = a.Close()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := a.Preflight(ctx); err != nil {
		var b strings.Builder
		_, _ = a.Report().WriteTo(&b) // a bytes.Buffer: never fails
		t.Fatalf("preflight: %v\n%s", err, b.String())
	}
	return &DioEnv{Adapter: a, Docker: cli, Owner: owner, Image: image}
}

// NewID is a fresh sandbox or process id.
func NewID() string { return dockertest.RandomHex(12) }

// Spec is a one-shot sandbox of the image with small limits, changed by
// mutate when it is not nil.
func (e *DioEnv) Spec(mutate func(*spec.Sandbox)) spec.Sandbox {
	s := spec.Sandbox{Image: e.Image, Policy: spec.DefaultPolicy(), Lifetime: spec.OneShot}
	s.Policy.MemoryBytes = 128 << 20
	s.Policy.TmpBytes = 16 << 20
	s.Policy.HomeBytes = 8 << 20
	s.Policy.Pids = 64
	if mutate != nil {
		mutate(&s)
	}
	return s
}

// Sandbox creates and starts a sandbox; it is removed with the owner.
func (e *DioEnv) Sandbox(t testing.TB, mutate func(*spec.Sandbox)) dockerio.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := e.Adapter.CreateSandbox(ctx, dockerio.SandboxRequest{Owner: e.Owner, ID: NewID(), Spec: e.Spec(mutate)})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if err := e.Adapter.StartSandbox(ctx, sb); err != nil {
		t.Fatalf("start: %v", err)
	}
	return sb
}

// ExecResult is one finished process.
type ExecResult struct {
	Code           int
	Stdout, Stderr []byte
	Group          int
}

// Exec runs argv with optional stdin through dockerio and collects its
// output (bounded by the test's own sizes).
func (e *DioEnv) Exec(t testing.TB, sb dockerio.Sandbox, stdin []byte, argv ...string) ExecResult {
	t.Helper()
	r, err := e.TryExec(sb, stdin, argv...)
	if err != nil {
		t.Fatalf("exec %q: %v", argv, err)
	}
	return r
}

// TryExec is exec returning its error instead of failing the test.
func (e *DioEnv) TryExec(sb dockerio.Sandbox, stdin []byte, argv ...string) (ExecResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req := dockerio.ExecRequest{ProcessID: NewID(), Spec: spec.Process{Argv: argv, Stdin: stdin != nil, Stdout: spec.Pipe, Stderr: spec.Pipe}}
	id, err := e.Adapter.CreateExec(ctx, sb, req)
	if err != nil {
		return ExecResult{}, err
	}
	att, err := e.Adapter.AttachExec(ctx, sb, id, req)
	if err != nil {
		return ExecResult{}, err
	}
	defer func() { _ = att.Close() }()
	werr := make(chan error, 1)
	if stdin != nil {
		go func() {
			_, err := att.Stdin().Write(stdin)
			werr <- errors.Join(err, att.CloseStdin())
		}()
	} else {
		werr <- nil
	}
	var res ExecResult
	res.Group = att.Group()
	var out, errb bytes.Buffer
	for {
		sid, p, err := att.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return res, err
		}
		if sid == framing.Stdout {
			out.Write(p)
		} else {
			errb.Write(p)
		}
	}
	if err := <-werr; err != nil {
		return res, err
	}
	st, err := dockerio.WaitExec(ctx, e.Adapter, id)
	if err != nil {
		return res, err
	}
	res.Code, res.Stdout, res.Stderr = st.ExitCode, out.Bytes(), errb.Bytes()
	return res, nil
}

// Sh runs a shell command and requires exit 0.
func (e *DioEnv) Sh(t testing.TB, sb dockerio.Sandbox, script string) string {
	t.Helper()
	r := e.Exec(t, sb, nil, "/bin/sh", "-c", script)
	if r.Code != 0 {
		t.Fatalf("sh %q: exit %d, stdout %q, stderr %q", script, r.Code, r.Stdout, r.Stderr)
	}
	return string(r.Stdout)
}

// Leftovers lists what the owner still has in Docker.
func (e *DioEnv) Leftovers(t testing.TB) []dockerio.Resource {
	t.Helper()
	owned, err := e.Adapter.ListOwned(context.Background(), e.Owner)
	if err != nil {
		t.Fatalf("list owned: %v", err)
	}
	var rs []dockerio.Resource
	for _, o := range owned {
		rs = append(rs, o.Resources...)
	}
	return rs
}
