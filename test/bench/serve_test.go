package bench

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/client"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/server"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// BenchmarkServeExecTrue: `true` through the server (client → unix socket
// → gRPC → server → the runtime) vs the same runtime embedded, the same
// sandbox, alternating order. Target ratio ≤ 1.10.
//
//	go test -run '^$' -bench BenchmarkServeExecTrue -benchtime 20x ./test/bench/
func BenchmarkServeExecTrue(b *testing.B) {
	ctx := context.Background()
	rt, c := servedRuntime(b)

	sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: dockertest.ImageTag, Policy: testkit.SmallPolicy()})
	if err != nil {
		b.Fatal(err)
	}
	remote, err := c.Sandbox(ctx, sb.ID())
	if err != nil {
		b.Fatal(err)
	}
	embedded := rt.Host()
	local, err := embedded.Sandbox(ctx, sb.ID())
	if err != nil {
		b.Fatal(err)
	}
	exec := func(s host.Sandbox, total *time.Duration) func() {
		return func() {
			t0 := time.Now()
			p, err := s.Start(ctx, spec.Process{Argv: []string{"true"}})
			if err != nil {
				b.Fatal(err)
			}
			go func() { _, _ = io.Copy(io.Discard, p.Stderr()) }()
			_, _ = io.Copy(io.Discard, p.Stdout())
			if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 {
				b.Fatalf("%+v %v", res, err)
			}
			*total += time.Since(t0)
		}
	}
	var served, direct time.Duration
	alternate(b.N, exec(remote, &served), exec(local, &direct))
	report(b, "served", served, "embedded", direct)
}

// servedRuntime opens a runtime on a fresh journal and serves it in this
// process; its client talks to it over the unix socket. Both close, and
// the owner's resources go, when b ends.
func servedRuntime(b *testing.B) (*stockade.Runtime, *client.Client) {
	b.Helper()
	cli := dockertest.Client(b)
	dockertest.ImageID(b, cli)
	dir := filepath.Join(b.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	rt, err := stockade.Open(context.Background(), stockade.Options{Journal: filepath.Join(dir, "j.db")})
	if err != nil {
		b.Fatal(err)
	}
	dockertest.CleanupOwner(b, cli, rt.Owner())
	b.Cleanup(func() {
		_ = rt.Close()
	})
	lis, err := server.Listen(filepath.Join(dir, "j.sock"), nil)
	if err != nil {
		b.Fatal(err)
	}
	srv := server.New(rt.Host(), server.Options{})
	go func() { _ = srv.Serve(lis) }()
	b.Cleanup(func() { srv.Stop(time.Second) })
	c, err := client.Dial(filepath.Join(dir, "j.sock"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = c.Close()
	})
	return rt, c
}
