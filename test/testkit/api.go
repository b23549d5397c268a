package testkit

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/spec"
)

// APIEnv is a runtime on a fresh journal; every resource its owner labels
// is removed when the test ends.
type APIEnv struct {
	RT      *stockade.Runtime
	Docker  *client.Client
	Image   string
	Journal string
}

// NewAPI opens a runtime with opts on a fresh journal (opts.Journal, when
// empty) and the sandbox image; the runtime is closed, its asks checked
// answered and its owner's resources removed when the test ends.
func NewAPI(t testing.TB, opts stockade.Options) *APIEnv {
	t.Helper()
	cli := dockertest.Client(t)
	image := dockertest.ImageID(t, cli)
	if opts.Journal == "" {
		opts.Journal = filepath.Join(t.TempDir(), "journal.db")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt, err := stockade.Open(ctx, opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	dockertest.CleanupOwner(t, cli, rt.Owner())
	t.Cleanup(func() {
		_ = rt.Close()
		CheckAnswered(t, rt)
	})
	return &APIEnv{RT: rt, Docker: cli, Image: image, Journal: opts.Journal}
}

// CheckAnswered fails the test when a sandbox the runtime removed still
// held an ask (a launch, a rollback) nobody had answered: every ask gets
// an answer or an error of its own.
func CheckAnswered(t testing.TB, rt *stockade.Runtime) {
	t.Helper()
	if u := rt.Unanswered(); len(u) > 0 {
		t.Errorf("removed sandboxes left asks unanswered: %v", u)
	}
}

// SmallPolicy is the default policy with 128 MiB of memory and 64 pids: the
// sandbox most tests make.
func SmallPolicy() spec.Policy {
	p := spec.DefaultPolicy()
	p.MemoryBytes = 128 << 20
	p.Pids = 64
	return p
}

// Sandbox creates a sandbox of the image with SmallPolicy and lifetime; it
// is removed with the runtime's owner.
func (e *APIEnv) Sandbox(t *testing.T, lifetime spec.Lifetime) *stockade.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := e.RT.CreateSandbox(ctx, spec.Sandbox{Image: e.Image, Policy: SmallPolicy(), Lifetime: lifetime})
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	return sb
}

// RunOut runs argv to its end and returns stdout, stderr and the result.
func RunOut(t testing.TB, sb *stockade.Sandbox, p spec.Process) (string, string, spec.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	proc, err := sb.Start(ctx, p)
	if err != nil {
		return "", "", spec.Result{}, err
	}
	var stdout, stderr bytes.Buffer
	var wg sync.WaitGroup
	if r := proc.Stderr(); r != nil {
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = io.Copy(&stderr, r) }()
	}
	if r := proc.Stdout(); r != nil {
		_, _ = io.Copy(&stdout, r) // what was read is checked below
	}
	wg.Wait()
	res, err := proc.Wait(ctx)
	return stdout.String(), stderr.String(), res, err
}

// Reopen closes e's runtime and opens a new one on the same journal: the
// recovery under test runs inside Open.
func (e *APIEnv) Reopen(t *testing.T, opts stockade.Options) *stockade.Runtime {
	t.Helper()
	if err := e.RT.Close(); err != nil {
		t.Fatal(err)
	}
	opts.Journal = e.Journal
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt, err := stockade.Open(ctx, opts)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	t.Cleanup(func() {
		_ = rt.Close()
		CheckAnswered(t, rt)
	})
	e.RT = rt
	return rt
}
