package test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/spec"
)

// dioEnv is one test's Docker world: the adapter under the profile named by
// STOCKADE_PROFILE, a raw client (for tampering and leak checks), a fresh
// owner whose resources are removed when the test ends, and the image.
type dioEnv struct {
	a     *dockerio.Adapter
	cli   *client.Client
	owner string
	image string
}

func newDio(t testing.TB) *dioEnv {
	t.Helper()
	cli := dockertest.Client(t)
	owner := dockertest.Owner(t, cli)
	image := dockertest.ImageID(t, cli)
	if os.Getenv(dockerio.ProfileEnv) == "" {
		t.Logf("%s is unset: using the default profile %s (the Makefile exports this machine's)", dockerio.ProfileEnv, dockerio.DefaultProfile)
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
	return &dioEnv{a: a, cli: cli, owner: owner, image: image}
}

func newID() string { return dockertest.RandomHex(12) }

func (e *dioEnv) spec(mutate func(*spec.Sandbox)) spec.Sandbox {
	s := spec.Sandbox{Image: e.image, Policy: spec.DefaultPolicy(), Lifetime: spec.OneShot}
	s.Policy.MemoryBytes = 128 << 20
	s.Policy.TmpBytes = 16 << 20
	s.Policy.HomeBytes = 8 << 20
	s.Policy.Pids = 64
	if mutate != nil {
		mutate(&s)
	}
	return s
}

// sandbox creates and starts a sandbox; it is removed with the owner.
func (e *dioEnv) sandbox(t testing.TB, mutate func(*spec.Sandbox)) dockerio.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := e.a.CreateSandbox(ctx, dockerio.SandboxRequest{Owner: e.owner, ID: newID(), Spec: e.spec(mutate)})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if err := e.a.StartSandbox(ctx, sb); err != nil {
		t.Fatalf("start: %v", err)
	}
	return sb
}

// result is one finished process.
type result struct {
	code           int
	stdout, stderr []byte
	group          int
}

// exec runs argv with optional stdin through dockerio and collects its
// output (bounded by the test's own sizes).
func (e *dioEnv) exec(t testing.TB, sb dockerio.Sandbox, stdin []byte, argv ...string) result {
	t.Helper()
	r, err := e.tryExec(sb, stdin, argv...)
	if err != nil {
		t.Fatalf("exec %q: %v", argv, err)
	}
	return r
}

func (e *dioEnv) tryExec(sb dockerio.Sandbox, stdin []byte, argv ...string) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req := dockerio.ExecRequest{ProcessID: newID(), Spec: spec.Process{Argv: argv, Stdin: stdin != nil, Stdout: spec.Pipe, Stderr: spec.Pipe}}
	id, err := e.a.CreateExec(ctx, sb, req)
	if err != nil {
		return result{}, err
	}
	att, err := e.a.AttachExec(ctx, sb, id, req)
	if err != nil {
		return result{}, err
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
	var res result
	res.group = att.Group()
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
	st, err := dockerio.WaitExec(ctx, e.a, id)
	if err != nil {
		return res, err
	}
	res.code, res.stdout, res.stderr = st.ExitCode, out.Bytes(), errb.Bytes()
	return res, nil
}

// sh runs a shell command and requires exit 0.
func (e *dioEnv) sh(t testing.TB, sb dockerio.Sandbox, script string) string {
	t.Helper()
	r := e.exec(t, sb, nil, "/bin/sh", "-c", script)
	if r.code != 0 {
		t.Fatalf("sh %q: exit %d, stdout %q, stderr %q", script, r.code, r.stdout, r.stderr)
	}
	return string(r.stdout)
}

// leftovers lists what the owner still has in Docker.
func (e *dioEnv) leftovers(t testing.TB) []dockerio.Resource {
	t.Helper()
	owned, err := e.a.ListOwned(context.Background(), e.owner)
	if err != nil {
		t.Fatalf("list owned: %v", err)
	}
	var rs []dockerio.Resource
	for _, o := range owned {
		rs = append(rs, o.Resources...)
	}
	return rs
}
