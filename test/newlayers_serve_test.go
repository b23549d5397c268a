package test

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
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/server"
	"github.com/stockade/stockade/spec"
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
			e, first, c, sb := servedKeptSandbox(t, ctx)
			_ = c.Close()
			cmd := exec.Command(e.bin, "--journal", e.journal, "exec", sb.ID(), "--", "sh", "-c", "echo up; sleep 8")
			var errb bytes.Buffer
			cmd.Stderr = &errb
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			sub := startSubprocess(t, cmd)
			if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "up\n" {
				t.Fatalf("first line of the attached exec: %q %v", line, err)
			}
			_ = first.stop(t, sig)
			select {
			case <-sub.done:
			case <-ctx.Done():
				t.Fatal("the exec did not end after its server went away")
			}
			var exit *exec.ExitError
			if !errors.As(sub.err, &exit) || exit.ExitCode() != 125 {
				t.Fatalf("exec after the server went away: %v, want exit 125\n%s", sub.err, errb.String())
			}
			msg := errb.String()
			m := csFollowRe.FindStringSubmatch(msg)
			if m == nil || !strings.Contains(msg, "server went away") || strings.Contains(msg, "lost") || strings.Count(strings.TrimSpace(msg), "\n") != 0 {
				t.Fatalf("exec's message: %q, want one line saying the server went away and `stockade logs -f ID`", msg)
			}
			t.Logf("exec said: %s", msg)
			pid := m[1]

			second := e.serve(t, ctx)
			c2 := second.dial(t)
			// The command it names follows the process to its end.
			if code, out, errOut := e.run(t, "", "logs", "-f", pid); code != 0 || out != "up\n" {
				t.Fatalf("stockade logs -f %s: exit %d, %q\n%s", pid, code, out, errOut)
			}
			if res, err := c2.Wait(ctx, pid); err != nil || res.Reason != "exited" || res.ExitCode != 0 {
				t.Fatalf("wait for %s after the restart: %+v %v, want exited 0 (it ran on)\n%s", pid, res, err, second.logs.String())
			}
			_ = c2.Close()
			if err := second.stop(t, syscall.SIGTERM); err != nil {
				t.Fatalf("serve after SIGTERM: %v\n%s", err, second.logs.String())
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
	e, first, c, _ := servedKeptSandbox(t, ctx)
	image := dockertest.ImageID(t, dockertest.Client(t))
	for range 2 {
		if _, err := c.CreateSandbox(ctx, host.SandboxSpec{Image: image, Policy: smallPolicy(), Lifetime: spec.Kept}); err != nil {
			t.Fatalf("create: %v", err)
		}
	}
	_ = c.Close()
	if err := first.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("serve after SIGTERM: %v", err)
	}

	logs := &lockedBuffer{}
	cmd := exec.Command(e.bin, "serve", "--journal", e.journal)
	cmd.Stdout, cmd.Stderr = logs, logs
	second := &served{subprocess: startSubprocess(t, cmd), logs: logs, sock: first.sock}
	// Right as it starts: commands until one has been answered by the
	// server, and two more.
	answered := 0
	for i := 0; answered < 3; i++ {
		code, out, errOut := e.run(t, "", "sandbox", "ls")
		if code != 0 || strings.Contains(errOut, string(spec.CodeJournalLocked)) || strings.Count(out, "\n") < 3 {
			t.Fatalf("command %d while the server restarts: exit %d\n%s\n%s\nserver:\n%s", i, code, out, errOut, logs.String())
		}
		if answered > 0 || csAnswers(second.sock) {
			answered++
		}
		select {
		case <-second.done:
			t.Fatalf("the server ended: %v\n%s", second.err, logs.String())
		default:
		}
		if ctx.Err() != nil {
			t.Fatal("the server never answered")
		}
	}
	if err := second.stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("serve after SIGTERM: %v\n%s", err, logs.String())
	}
	if _, err := os.Stat(server.MarkerPath(e.journal)); !errors.Is(err, os.ErrNotExist) {
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
