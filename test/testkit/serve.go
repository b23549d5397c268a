package testkit

import (
	"bytes"
	"context"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/client"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/statedir"
)

// Served is a `stockade serve` subprocess of a CLIEnv's binary on its
// journal, listening beside it.
type Served struct {
	*Subprocess
	Logs *LockedBuffer
	Sock string
}

// Subprocess is a started command whose end is observed once, without a
// race: Wait runs in one goroutine, which records the error in Err and
// closes Done; a cleanup kills the command if the test has not ended it.
type Subprocess struct {
	Cmd  *exec.Cmd
	Done chan struct{}
	Err  error
}

// StartSubprocess starts cmd as a subprocess.
func StartSubprocess(t *testing.T, cmd *exec.Cmd) *Subprocess {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &Subprocess{Cmd: cmd, Done: make(chan struct{})}
	go func() {
		s.Err = cmd.Wait()
		close(s.Done)
	}()
	t.Cleanup(func() {
		select {
		case <-s.Done:
		default:
			_ = cmd.Process.Kill()
			<-s.Done
		}
	})
	return s
}

// Serve starts `stockade serve` on e's journal, with flags; a cleanup kills
// it if the test has not ended it. It returns once the socket answers.
func (e *CLIEnv) Serve(t *testing.T, ctx context.Context, flags ...string) *Served {
	t.Helper()
	s := &Served{Logs: &LockedBuffer{}, Sock: statedir.Socket(e.Journal)}
	cmd := exec.Command(e.Bin, append([]string{"serve", "--journal", e.Journal}, flags...)...)
	cmd.Stdout, cmd.Stderr = s.Logs, s.Logs
	s.Subprocess = StartSubprocess(t, cmd)
	_ = DialServer(t, ctx, s.Sock, s.Subprocess, s.Logs).Close() // only a probe that the server answers
	return s
}

// Stop sends sig to the server and returns how it ended.
func (s *Served) Stop(t *testing.T, sig syscall.Signal) error {
	t.Helper()
	if err := s.Cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done:
		return s.Err
	case <-time.After(time.Minute):
		t.Fatalf("serve did not end within a minute of %v\n%s", sig, s.Logs.String())
		return nil
	}
}

// RunIn runs sh -c cmd attached in sb and returns both streams and the
// result.
func RunIn(ctx context.Context, sb host.Sandbox, cmd string) (stdout, stderr string, res spec.Result, err error) {
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", cmd}})
	if err != nil {
		return "", "", spec.Result{}, err
	}
	errc := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(p.Stderr()); errc <- b }()
	out, _ := io.ReadAll(p.Stdout())
	errb := <-errc
	res, err = p.Wait(ctx)
	return string(out), string(errb), res, err
}

// Dial is a client of the server, closed when the test ends.
func (s *Served) Dial(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.Dial(s.Sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Close()
	})
	return c
}

// ServedKeptSandbox starts `stockade serve` on a fresh journal (its owner
// cleaned up when t ends), dials it and creates a kept sandbox through it.
// The client is closed when t ends (closing it earlier is fine).
func ServedKeptSandbox(t *testing.T, ctx context.Context) (*CLIEnv, *Served, *client.Client, host.Sandbox) {
	t.Helper()
	e := NewCLI(t) // its owner cleanup is registered first
	image := dockertest.ImageID(t, dockertest.Client(t))
	first := e.Serve(t, ctx)
	c := first.Dial(t)
	sb, err := c.CreateSandbox(ctx, spec.Sandbox{Image: image, Policy: SmallPolicy(), Lifetime: spec.Kept})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return e, first, c, sb
}

// Stats asks the server for its stats line (SIGUSR1) and returns its
// fields (goroutines, heap_alloc, heap_inuse, heap_objects, fds, gc).
func (s *Served) Stats(t *testing.T) map[string]int64 {
	t.Helper()
	before := strings.Count(s.Logs.String(), "stockade: stats ")
	if err := s.Cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(s.Logs.String(), "stockade: stats ") == before {
		if time.Now().After(deadline) {
			t.Fatalf("no stats line 30 s after SIGUSR1:\n%s", s.Logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	logs := s.Logs.String()
	line := logs[strings.LastIndex(logs, "stockade: stats "):]
	line, _, _ = strings.Cut(line, "\n")
	out := map[string]int64{}
	for _, kv := range strings.Fields(strings.TrimPrefix(line, "stockade: stats ")) {
		k, v, ok := strings.Cut(kv, "=")
		n, err := strconv.ParseInt(v, 10, 64)
		if !ok || err != nil {
			t.Fatalf("stats line %q: field %q", line, kv)
		}
		out[k] = n
	}
	return out
}

// LockedBuffer collects a subprocess's output for the test to read while
// it runs.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p, under the lock.
func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// DialServer waits for the server's socket to answer, failing at once if
// the server exits first.
func DialServer(t *testing.T, ctx context.Context, sock string, sub *Subprocess, logs *LockedBuffer) *client.Client {
	t.Helper()
	for {
		c, err := client.Dial(sock)
		if err == nil {
			return c
		}
		select {
		case <-sub.Done:
			t.Fatalf("serve exited before answering: %v\n%s", sub.Err, logs.String())
		case <-ctx.Done():
			t.Fatalf("serve did not answer on %s: %v\n%s", sock, err, logs.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
