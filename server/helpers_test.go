package server_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockade/stockade/profile"

	stockade "github.com/stockade/stockade"
	"github.com/stockade/stockade/client"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/internal/testenv"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/server"
	"github.com/stockade/stockade/spec"
)

// TestMain keeps every test away from the user's real state.
// As a peer child (TestPeerOfAnotherUIDRefused), it only dials.
func TestMain(m *testing.M) {
	if sock := os.Getenv(peerChildEnv); sock != "" {
		os.Exit(peerChild(sock))
	}
	os.Exit(testenv.Run(m))
}

const fakeImage = "sha256:0000000000000000000000000000000000000000000000000000000000000001"

// countingEngine is the fake engine with a count of the output bytes the
// runtime has read from its processes: what backpressure must bound.
type countingEngine struct {
	*dockerio.Fake
	read atomic.Int64
	// specs are the process specs CreateExec was asked for, in order.
	mu    sync.Mutex
	specs []spec.Process
}

func (e *countingEngine) CreateExec(ctx context.Context, sb dockerio.Sandbox, req dockerio.ExecRequest) (string, error) {
	e.mu.Lock()
	e.specs = append(e.specs, req.Spec)
	e.mu.Unlock()
	return e.Fake.CreateExec(ctx, sb, req)
}

// created returns the process specs the engine was asked to create.
func (e *countingEngine) created() []spec.Process {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]spec.Process(nil), e.specs...)
}

func (e *countingEngine) AttachExec(ctx context.Context, sb dockerio.Sandbox, execID string, req dockerio.ExecRequest) (dockerio.Attachment, error) {
	a, err := e.Fake.AttachExec(ctx, sb, execID, req)
	if err != nil {
		return nil, err
	}
	return countingAttachment{a, &e.read}, nil
}

type countingAttachment struct {
	dockerio.Attachment
	read *atomic.Int64
}

func (a countingAttachment) Next() (framing.StreamID, []byte, error) {
	id, b, err := a.Attachment.Next()
	a.read.Add(int64(len(b)))
	return id, b, err
}

// fixture is a runtime on the fake engine, served on a socket in a
// temporary directory, and a client of it.
type fixture struct {
	fake   *dockerio.Fake
	engine *countingEngine
	rt     *stockade.Runtime
	srv    *server.Server
	socket string
	c      *client.Client
}

// serve opens the runtime with the options opts amend, then serves it.
// execsOnly makes the fixture's Fake deliver no warden: every process is
// an exec (a test that reads back the order of stdout and stderr, which
// one multiplexed stream keeps and a warden's two pipes do not).
func execsOnly(o *stockade.Options) { o.Engine.(*countingEngine).NoWarden = true }

func serve(t *testing.T, opts ...func(*stockade.Options)) *fixture {
	t.Helper()
	f := testutil.NewFake(t)
	eng := &countingEngine{Fake: f}
	dir := privateDir(t)
	// Closed at the end of the test, after the server's cleanup below.
	rt := testutil.OpenFake(t, eng, filepath.Join(dir, "journal.db"), opts...)
	sock := server.SocketPath(filepath.Join(dir, "journal.db"))
	lis, err := server.Listen(sock, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(rt.Host(), server.Options{Doctor: func(context.Context) (profile.Report, error) {
		return profile.Report{Profile: "linux-x64", DaemonID: "fake"}, nil
	}})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	c, err := client.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Teardown: only serve's error is checked here (OpenFake's
		// cleanup, which runs after this one, closes the runtime).
		_ = c.Close()
		srv.Stop(time.Second)
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return &fixture{fake: f, engine: eng, rt: rt, srv: srv, socket: sock, c: c}
}

// privateDir is a 0700 directory (t.TempDir's own subdirectories follow
// the umask), as the socket's directory must be.
func privateDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

func dial(t *testing.T, sock string) *client.Client {
	t.Helper()
	c, err := client.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() }) // teardown
	return c
}

func ctxFor(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
