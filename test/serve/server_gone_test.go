package serve

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/client"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/server"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

var csFollowRe = regexp.MustCompile("`stockade logs -f ([^`]+)`")

// TestServeGoneAttachedExec: an attached `stockade exec` whose server stops
// (SIGTERM) or dies (SIGKILL) while the process runs says the server went
// away, names the process and how to follow it again, and exits 125; the
// process runs on, and a restarted server re-adopts it and sees it exit 0
// (not lost).
func TestServeGoneAttachedExec(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			e, first, c, sb := testkit.ServedKeptSandbox(t, ctx)
			_ = c.Close()
			cmd := exec.Command(e.Bin, "--journal", e.Journal, "exec", sb.ID(), "--", "sh", "-c", "echo up; sleep 8")
			var errb bytes.Buffer
			cmd.Stderr = &errb
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			sub := testkit.StartSubprocess(t, cmd)
			if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "up\n" {
				t.Fatalf("first line of the attached exec: %q %v", line, err)
			}
			_ = first.Stop(t, sig)
			select {
			case <-sub.Done:
			case <-ctx.Done():
				t.Fatal("the exec did not end after its server went away")
			}
			var exit *exec.ExitError
			if !errors.As(sub.Err, &exit) || exit.ExitCode() != 125 {
				t.Fatalf("exec after the server went away: %v, want exit 125\n%s", sub.Err, errb.String())
			}
			msg := errb.String()
			m := csFollowRe.FindStringSubmatch(msg)
			if m == nil || !strings.Contains(msg, "server went away") || strings.Contains(msg, "lost") || strings.Count(strings.TrimSpace(msg), "\n") != 0 {
				t.Fatalf("exec's message: %q, want one line saying the server went away and `stockade logs -f ID`", msg)
			}
			t.Logf("exec said: %s", msg)
			pid := m[1]

			second := e.Serve(t, ctx)
			c2 := second.Dial(t)
			// The command it names follows the process to its end.
			if code, out, errOut := e.Run(t, "", "logs", "-f", pid); code != 0 || out != "up\n" {
				t.Fatalf("stockade logs -f %s: exit %d, %q\n%s", pid, code, out, errOut)
			}
			if res, err := c2.Wait(ctx, pid); err != nil || res.Reason != "exited" || res.ExitCode != 0 {
				t.Fatalf("wait for %s after the restart: %+v %v, want exited 0 (it ran on)\n%s", pid, res, err, second.Logs.String())
			}
			_ = c2.Close()
			if err := second.Stop(t, syscall.SIGTERM); err != nil {
				t.Fatalf("serve after SIGTERM: %v\n%s", err, second.Logs.String())
			}
		})
	}
}

// TestServeRestartCLIWaitsForRecovery: commands run in a loop while a
// server restarts and recovers kept sandboxes never fail journal_locked:
// a command that finds the journal held by a server still recovering
// waits for its socket.
func TestServeRestartCLIWaitsForRecovery(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e, first, c, _ := testkit.ServedKeptSandbox(t, ctx)
	image := dockertest.ImageID(t, dockertest.Client(t))
	for range 2 {
		if _, err := c.CreateSandbox(ctx, spec.Sandbox{Image: image, Policy: testkit.SmallPolicy(), Lifetime: spec.Kept}); err != nil {
			t.Fatalf("create: %v", err)
		}
	}
	_ = c.Close()
	if err := first.Stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("serve after SIGTERM: %v", err)
	}

	logs := &testkit.LockedBuffer{}
	cmd := exec.Command(e.Bin, "serve", "--journal", e.Journal)
	cmd.Stdout, cmd.Stderr = logs, logs
	second := &testkit.Served{Subprocess: testkit.StartSubprocess(t, cmd), Logs: logs, Sock: first.Sock}
	// Right as it starts: commands until one has been answered by the
	// server, and two more.
	answered := 0
	for i := 0; answered < 3; i++ {
		code, out, errOut := e.Run(t, "", "sandbox", "ls")
		if code != 0 || strings.Contains(errOut, string(spec.CodeJournalLocked)) || strings.Count(out, "\n") < 3 {
			t.Fatalf("command %d while the server restarts: exit %d\n%s\n%s\nserver:\n%s", i, code, out, errOut, logs.String())
		}
		if answered > 0 || csAnswers(second.Sock) {
			answered++
		}
		select {
		case <-second.Done:
			t.Fatalf("the server ended: %v\n%s", second.Err, logs.String())
		default:
		}
		if ctx.Err() != nil {
			t.Fatal("the server never answered")
		}
	}
	if err := second.Stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("serve after SIGTERM: %v\n%s", err, logs.String())
	}
	if _, err := os.Stat(server.MarkerPath(e.Journal)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the server's marker after it stopped: %v", err)
	}
}

// csAnswers reports whether a server answers on sock.
func csAnswers(sock string) bool {
	c, err := client.Dial(sock)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}
