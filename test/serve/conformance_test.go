package serve

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/client"
	"github.com/stockade/stockade/host/hosttest"
	"github.com/stockade/stockade/server"
	"github.com/stockade/stockade/test/testkit"
)

// TestConformanceRealDaemon runs host.Runtime's conformance suite on a
// real daemon: through the embedded runtime and through the client of its
// server, answer for answer (the sandbox image's busybox runs the suite's
// commands).
func TestConformanceRealDaemon(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := server.SocketPath(filepath.Join(dir, "journal.db"))
	lis, err := server.Listen(sock, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(e.RT.Host(), server.Options{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	c, err := client.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Close() // a connection: nothing to lose
		srv.Stop(5 * time.Second)
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	hosttest.Run(t, hosttest.Target{
		Ways:          []hosttest.Way{{Name: "embedded", Runtime: e.RT.Host()}, {Name: "served", Runtime: c}},
		Image:         e.Image,
		TracksChanges: true,
		Doctor:        true,
		RunsCommands:  true,
	})
}
