package serve

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	stockadev1 "github.com/stockade/stockade/api/stockade/v1"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/internal/testenv"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// serveRefuses runs `stockade serve` with args and checks it exits 1 with
// an invalid_argument error that names dir, its owner, this uid and each
// of also; a server that starts serving instead fails the test at once.
func serveRefuses(t *testing.T, bin, dir string, args []string, also ...string) {
	t.Helper()
	logs := &testkit.LockedBuffer{}
	cmd := exec.Command(bin, append([]string{"serve"}, args...)...)
	cmd.Stdout, cmd.Stderr = logs, logs
	sub := testkit.StartSubprocess(t, cmd)
	// A bound on a test gone wrong, not a timing assertion: the refusal
	// comes before anything slow.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for waiting := true; waiting; {
		select {
		case <-sub.Done:
			waiting = false
		case <-tick.C:
			if strings.Contains(logs.String(), "serving journal") {
				t.Fatalf("serve %v with %s owned by uid %d: it serves, want a refusal\n%s", args, dir, testenv.Nobody, logs.String())
			}
		case <-ctx.Done():
			t.Fatalf("serve %v neither served nor exited\n%s", args, logs.String())
		}
	}
	out := logs.String()
	if code := sub.Cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("serve %v exited %d, want 1\n%s", args, code, out)
	}
	for _, want := range append([]string{string(spec.CodeInvalidArgument), dir, fmt.Sprintf("uid %d", testenv.Nobody), fmt.Sprintf("uid %d", os.Geteuid()), "chown"}, also...) {
		if !strings.Contains(out, want) {
			t.Errorf("serve's refusal does not say %q:\n%s", want, out)
		}
	}
}

// TestServeRefusesASocketDirectoryAnotherUIDOwns: the real binary, its
// socket in a 0700 directory uid nobody owns, exits 1 naming the directory,
// its owner, the server's uid and what to do, and leaves no socket there.
// (Issue 30: nobody moved the socket aside, listened in its place and got
// root's `sandbox create --env API_TOKEN=...`.)
func TestServeRefusesASocketDirectoryAnotherUIDOwns(t *testing.T) {
	e := testkit.NewCLI(t)
	dir := testenv.ForeignDir(t, "nobody")
	sock := filepath.Join(dir, "journal.sock")
	serveRefuses(t, e.Bin, dir, []string{"--journal", e.Journal, "--socket", sock}, "--socket")
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("the refused serve left %s: %v", sock, err)
	}
}

// TestServeRefusesAJournalDirectoryAnotherUIDOwns: the real binary, its
// journal in a 0700 directory uid nobody owns (its socket in one of its
// own), exits 1 naming the directory, its owner, the server's uid and what
// to do, and writes nothing there (not even its marker).
func TestServeRefusesAJournalDirectoryAnotherUIDOwns(t *testing.T) {
	dockertest.Client(t) // serve needs the daemon on the way to its socket
	bin := testkit.BuildStockade(t)
	dir := testenv.ForeignDir(t, "nobody")
	mine := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(mine, 0o700); err != nil {
		t.Fatal(err)
	}
	serveRefuses(t, bin, dir, []string{"--journal", filepath.Join(dir, "journal.db"), "--socket", filepath.Join(mine, "s.sock")}, "--journal")
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Errorf("the refused serve left %v in %s (%v)", ents, dir, err)
	}
}

// impostor is a gRPC server that records every create's environment and
// counts the connections made to it.
type impostor struct {
	stockadev1.UnimplementedSandboxesServer
	net.Listener
	mu    sync.Mutex
	conns int
	envs  [][]string
}

func (i *impostor) Accept() (net.Conn, error) {
	c, err := i.Listener.Accept()
	if err == nil {
		i.mu.Lock()
		i.conns++
		i.mu.Unlock()
	}
	return c, err
}

func (i *impostor) Create(_ context.Context, req *stockadev1.CreateSandboxRequest) (*stockadev1.CreateSandboxResponse, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.envs = append(i.envs, req.GetEnv())
	return nil, status.Error(codes.Unavailable, "the impostor has what it wanted")
}

// TestCLIRefusesASocketDirectoryAnotherUIDOwns is issue 30's impostor
// itself: a server in a 0700 directory uid nobody owns answers, and root's
// `sandbox create --env API_TOKEN=...` is pointed at it ($STOCKADE_SOCKET).
// The client never connects to it, so the token never reaches it; the
// command runs embedded on its own journal instead.
func TestCLIRefusesASocketDirectoryAnotherUIDOwns(t *testing.T) {
	e := testkit.NewCLI(t)
	dir := testenv.ForeignDir(t, "nobody")
	sock := filepath.Join(dir, "journal.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	imp := &impostor{Listener: l}
	srv := grpc.NewServer()
	stockadev1.RegisterSandboxesServer(srv, imp)
	go func() { _ = srv.Serve(imp) }() // ends with Stop
	cmd := exec.Command(e.Bin, "--journal", e.Journal, "sandbox", "create", "--memory", "128m", "--env", "API_TOKEN=s3cr3t-of-root")
	cmd.Env = append(os.Environ(), "STOCKADE_SOCKET="+sock)
	out, err := cmd.CombinedOutput()
	srv.Stop()
	imp.mu.Lock()
	defer imp.mu.Unlock()
	if imp.conns != 0 || len(imp.envs) != 0 {
		t.Fatalf("the impostor in a directory uid %d owns was connected to %d times and got the environments %v (create: %v, %s)", testenv.Nobody, imp.conns, imp.envs, err, out)
	}
	if err != nil {
		t.Fatalf("create, embedded once the impostor's socket is refused: %v\n%s", err, out)
	}
}
