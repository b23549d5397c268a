package serve

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// TestServeEndToEnd builds the binary, runs `stockade serve` on a fresh
// journal and socket, and drives it through client/: a kept sandbox, an
// exec with stdin, stdout, stderr and its exit code; a second serve on the
// same journal fails naming the holder; SIGTERM ends the server with exit 0
// and leaves the kept sandbox running, which the next runtime re-adopts.
func TestServeEndToEnd(t *testing.T) {
	cli := dockertest.Client(t)
	image := dockertest.ImageID(t, cli)
	root, err := dockertest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "stockade")
	if out, err := exec.Command("go", "build", "-o", bin, filepath.Join(root, "cmd", "stockade")).CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	jpath := filepath.Join(dir, "journal.db")
	sock := filepath.Join(dir, "s.sock")
	// Registered first, so it runs last (after the server is gone): remove
	// whatever this journal's owner left, whatever failed.
	t.Cleanup(func() {
		j, err := journal.Open(jpath, journal.Options{ReadOnly: true})
		if err != nil {
			return // no journal: nothing was made
		}
		owner := j.Owner()
		_ = j.Close()
		if err := dockertest.RemoveOwned(context.Background(), cli, owner); err != nil {
			t.Errorf("cleanup of owner %s: %v", owner, err)
		}
	})

	var logs testkit.LockedBuffer
	srv := exec.Command(bin, "serve", "--journal", jpath, "--socket", sock)
	srv.Env = os.Environ()
	srv.Stdout, srv.Stderr = &logs, &logs
	sub := testkit.StartSubprocess(t, srv)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := testkit.DialServer(t, ctx, sock, sub, &logs)
	defer func() { _ = c.Close() }()
	var rt host.Runtime = c
	sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: image, Policy: testkit.SmallPolicy(), Lifetime: spec.Kept})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", "cat; echo err >&2; exit 7"}, Stdin: true})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if _, err := io.WriteString(p.Stdin(), "hello through the server\n"); err != nil {
		t.Fatal(err)
	}
	if err := p.Stdin().Close(); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	errDone := make(chan struct{})
	go func() { _, _ = io.Copy(&stderr, p.Stderr()); close(errDone) }()
	stdout, err := io.ReadAll(p.Stdout())
	<-errDone
	res, werr := p.Wait(ctx)
	if err != nil || werr != nil || string(stdout) != "hello through the server\n" || stderr.String() != "err\n" || res.ExitCode != 7 || res.Reason != "exited" {
		t.Fatalf("exec: stdout %q stderr %q result %+v (%v, %v)", stdout, stderr.String(), res, err, werr)
	}

	// A second server on the same journal fails fast, naming the holder.
	second := exec.Command(bin, "serve", "--journal", jpath, "--socket", filepath.Join(dir, "other.sock"))
	second.Env = os.Environ()
	out, err := second.CombinedOutput()
	if second.ProcessState.ExitCode() != 1 || !strings.Contains(string(out), string(spec.CodeJournalLocked)) {
		t.Fatalf("second serve: exit %d (%v)\n%s", second.ProcessState.ExitCode(), err, out)
	}

	_ = c.Close()
	if err := srv.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-sub.Done
	if sub.Err != nil {
		t.Fatalf("serve after SIGTERM: %v (want exit 0)\n%s", sub.Err, logs.String())
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("the socket is left behind after a clean stop: %v", err)
	}

	// The kept sandbox ran on: the next runtime re-adopts it (which needs
	// its workload running and verified), then removes it.
	next, err := stockade.Open(ctx, stockade.Options{Journal: jpath})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer func() { _ = next.Close() }()
	again, err := next.Sandbox(ctx, sb.ID())
	if err != nil {
		t.Fatalf("the kept sandbox after the server stopped: %v", err)
	}
	st, err := again.State(ctx)
	if err != nil || st.Phase != lifecycle.PhaseStarted || !st.Adopted {
		t.Fatalf("kept sandbox after the server stopped: phase %s adopted %v (%v), want started and re-adopted", st.Phase, st.Adopted, err)
	}
	if err := again.Remove(ctx); err != nil {
		t.Fatal(err)
	}
}
