package api

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

func TestAPIRunExitCodesAndStreams(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	sb := e.Sandbox(t, spec.OneShot)
	for _, tc := range []struct {
		argv           []string
		code           int
		stdout, stderr string
	}{
		{[]string{"true"}, 0, "", ""},
		{[]string{"sh", "-c", "exit 42"}, 42, "", ""},
		{[]string{"sh", "-c", "echo out1; echo err1 >&2; echo out2; echo err2 >&2"}, 0, "out1\nout2\n", "err1\nerr2\n"},
		{[]string{"id", "-u"}, 0, "65532\n", ""},
		{[]string{"pwd"}, 0, "/workspace/work\n", ""},
	} {
		out, errOut, res, err := testkit.RunOut(t, sb, spec.Process{Argv: tc.argv})
		if err != nil || res.ExitCode != tc.code || out != tc.stdout || errOut != tc.stderr || res.Reason != "exited" {
			t.Errorf("%v: code %d reason %s out %q err %q (%v); want %d %q %q", tc.argv, res.ExitCode, res.Reason, out, errOut, err, tc.code, tc.stdout, tc.stderr)
		}
		if res.StdoutBytes != int64(len(tc.stdout)) || res.StderrBytes != int64(len(tc.stderr)) {
			t.Errorf("%v: byte counts %d/%d", tc.argv, res.StdoutBytes, res.StderrBytes)
		}
	}
	// A command that cannot be started fails Start itself, typed.
	if _, _, _, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"no-such-command"}}); !spec.IsCode(err, spec.CodeExecFailed) {
		t.Errorf("missing command: %v, want exec_failed", err)
	}
	ctx := context.Background()
	if err := sb.Remove(ctx); err != nil {
		t.Fatalf("remove: %v", err)
	}
	// Its history survives in the journal: reserved … removed, and each
	// process reserved … exited.
	h, err := e.RT.History(t.Context(), sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, ev := range h {
		if ev.Kind == "sandbox" {
			types = append(types, ev.Type)
		}
	}
	want := "sandbox.reserved sandbox.created sandbox.started sandbox.warden_started sandbox.stopping sandbox.usage_sampled sandbox.exited sandbox.removing sandbox.removed"
	if got := strings.Join(types, " "); got != want {
		t.Fatalf("sandbox history %q, want %q", got, want)
	}
	if n, err := dockertest.Owned(ctx, e.Docker, e.RT.Owner()); err != nil || n != 0 {
		t.Fatalf("%d resources left after remove (%v)", n, err)
	}
}

func TestAPIStdinRoundTrip(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	sb := e.Sandbox(t, spec.OneShot)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", "wc -c; echo done >&2"}, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_, _ = p.Stdin().Write(bytes.Repeat([]byte("x"), 100000))
		_ = p.Stdin().Close()
	}()
	go func() { _, _ = io.Copy(io.Discard, p.Stderr()) }()
	out, _ := io.ReadAll(p.Stdout())
	res, err := p.Wait(ctx)
	if err != nil || strings.TrimSpace(string(out)) != "100000" || res.ExitCode != 0 {
		t.Fatalf("wc -c gave %q, %+v %v", out, res, err)
	}
}

// TestAPIConcurrentSandboxes: 20 sandboxes × 5 processes at once, every exit
// code and output right, nothing leaked.
func TestAPIConcurrentSandboxes(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	const sandboxes, procs = 20, 5
	var wg sync.WaitGroup
	errs := make(chan error, sandboxes*procs+sandboxes)
	for i := range sandboxes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			sb, err := e.RT.CreateSandbox(ctx, spec.Sandbox{Image: e.Image, Policy: testkit.SmallPolicy(), Lifetime: spec.OneShot})
			if err != nil {
				errs <- fmt.Errorf("sandbox %d: %w", i, err)
				return
			}
			var pw sync.WaitGroup
			for k := range procs {
				pw.Add(1)
				go func() {
					defer pw.Done()
					want := fmt.Sprintf("%d-%d", i, k)
					out, _, res, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"sh", "-c", "echo " + want + "; exit " + fmt.Sprint(k)}})
					if err != nil || res.ExitCode != k || out != want+"\n" {
						errs <- fmt.Errorf("sandbox %d process %d: out %q code %d err %v", i, k, out, res.ExitCode, err) //nolint:errorlint // err is nil when the result is what failed: %w would print %!w(<nil>)
					}
				}()
			}
			pw.Wait()
			if err := sb.Remove(ctx); err != nil {
				errs <- fmt.Errorf("remove %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n, err := dockertest.Owned(context.Background(), e.Docker, e.RT.Owner()); err != nil || n != 0 {
		t.Fatalf("%d resources leaked (%v)", n, err)
	}
}

// TestAPIBackpressure: a consumer that stops reading while the process
// writes 1 GiB blocks the process; the runtime's heap stays bounded.
func TestAPIBackpressure(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	sb := e.Sandbox(t, spec.OneShot)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const total = 1 << 30
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", "head -c 1073741824 /dev/zero; echo written >&2"},
		Stderr: spec.Pipe, OutputQuota: 2 << 30})
	if err != nil {
		t.Fatal(err)
	}
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	stderrDone := make(chan string, 1)
	go func() { b, _ := io.ReadAll(p.Stderr()); stderrDone <- string(b) }()
	// Read a little, then stop reading for a few seconds.
	buf := make([]byte, 1<<20)
	if _, err := io.ReadFull(p.Stdout(), buf); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	select {
	case s := <-stderrDone:
		t.Fatalf("the process finished (%q) while nobody read its output", s)
	default:
	}
	var during runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&during)
	if growth := int64(during.HeapAlloc) - int64(before.HeapAlloc); growth > 32<<20 {
		t.Fatalf("heap grew %d bytes while the consumer paused", growth)
	}
	h := sha256.New()
	n, err := io.Copy(h, p.Stdout())
	if err != nil || n+int64(len(buf)) != total {
		t.Fatalf("read %d bytes (%v), want %d", n+int64(len(buf)), err, total)
	}
	if s := <-stderrDone; s != "written\n" {
		t.Fatalf("stderr %q", s)
	}
	if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 || res.StdoutBytes != total {
		t.Fatalf("result %+v %v", res, err)
	}
}

func TestAPIOutputQuota(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	sb := e.Sandbox(t, spec.OneShot)
	_, _, res, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"sh", "-c", "head -c 10000000 /dev/zero"}, OutputQuota: 1 << 20})
	if !spec.IsCode(err, spec.CodeOutputLimit) || res.Reason != string(lifecycle.ReasonOutputLimit) || res.StdoutBytes > 1<<20 {
		t.Fatalf("got %+v %v, want output_limit within the quota", res, err)
	}
}

func TestAPITimeout(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	sb := e.Sandbox(t, spec.OneShot)
	_, _, res, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"sleep", "60"}, Timeout: 500 * time.Millisecond})
	if !errors.Is(err, spec.ErrTimeout) || res.Reason != "timeout" {
		t.Fatalf("got %+v %v, want timeout", res, err)
	}
}

// TestAPICancelledStream: closing a piped stream unread cancels a process
// tied to its caller (StopWithCaller).
func TestAPICancelledStream(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	sb := e.Sandbox(t, spec.OneShot)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", "while :; do echo y; done"}, Stderr: spec.Discard, StopWithCaller: true})
	if err != nil {
		t.Fatal(err)
	}
	_ = p.Stdout().Close()
	res, err := p.Wait(ctx)
	if !spec.IsCode(err, spec.CodeCancelled) || res.Reason != "cancelled" {
		t.Fatalf("got %+v %v, want cancelled", res, err)
	}
}

// TestAPIDetachedStream: by default, closing a piped stream unread detaches
// from the process: it runs to its own exit, and every byte it wrote is
// counted (and recorded), the ones nobody read included.
func TestAPIDetachedStream(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	sb := e.Sandbox(t, spec.OneShot)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const lines = 20000
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", "i=0; while [ $i -lt 20000 ]; do echo y; i=$((i+1)); done"}, Stderr: spec.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(p.Stdout(), make([]byte, 2)); err != nil {
		t.Fatal(err)
	}
	_ = p.Stdout().Close()
	res, err := p.Wait(ctx)
	if err != nil || res.Reason != "exited" || res.ExitCode != 0 || res.StdoutBytes != 2*lines {
		t.Fatalf("got %+v %v, want exited 0 with %d bytes", res, err, 2*lines)
	}
}

// TestAPIStopEscalates: a process group that ignores TERM is killed after
// the grace period.
func TestAPIStopEscalates(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{StopGrace: time.Second})
	sb := e.Sandbox(t, spec.OneShot)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", "trap '' TERM; sleep 300 & echo ready; wait"}, Stderr: spec.Discard})
	if err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 6)
	if _, err := io.ReadFull(p.Stdout(), line); err != nil || string(line) != "ready\n" {
		t.Fatalf("read %q %v", line, err)
	}
	go func() { _, _ = io.Copy(io.Discard, p.Stdout()) }()
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	res, _ := p.Wait(ctx)
	if res.Reason != "signaled" || res.ExitCode != 137 {
		t.Fatalf("got %+v, want signaled with 137 (KILL after TERM was ignored)", res)
	}
	h, _ := e.RT.History(t.Context(), sb.ID())
	var saw bool
	for _, ev := range h {
		saw = saw || ev.Type == "process.stopping"
	}
	if !saw {
		t.Fatal("no process.stopping intent in the history")
	}
}

func TestAPISignal(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	sb := e.Sandbox(t, spec.OneShot)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", "echo ready; sleep 300"}, Stderr: spec.Discard})
	if err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 6)
	if _, err := io.ReadFull(p.Stdout(), line); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, p.Stdout()) }()
	if err := p.Signal(ctx, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	res, _ := p.Wait(ctx)
	if res.Reason != "signaled" || res.ExitCode != 128+int(syscall.SIGUSR1) {
		t.Fatalf("got %+v, want signaled by USR1", res)
	}
}

// TestAPISandboxStop: stopping a sandbox ends its processes with
// sandbox_stopped, closes admission, and keeps the workspace readable.
func TestAPISandboxStop(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{StopGrace: time.Second})
	sb := e.Sandbox(t, spec.Kept)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, _, _, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"sh", "-c", "echo kept > /workspace/work/file"}}); err != nil {
		t.Fatal(err)
	}
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"sleep", "300"}, Stdout: spec.Discard, Stderr: spec.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	res, _ := p.Wait(ctx)
	if res.Reason != "sandbox_stopped" {
		t.Fatalf("process ended %+v, want sandbox_stopped", res)
	}
	if _, err := sb.Start(ctx, spec.Process{Argv: []string{"true"}}); !spec.IsCode(err, spec.CodeAdmissionClosed) {
		t.Fatalf("start after stop: %v, want admission_closed", err)
	}
	st, err := sb.State(ctx)
	if err != nil || st.Phase != lifecycle.PhaseExited {
		t.Fatalf("state %s %v, want exited", st.Phase, err)
	}
	rc, _, err := sb.Get(ctx, "work/file", false)
	if err != nil {
		t.Fatalf("get from an exited sandbox: %v", err)
	}
	defer func() { _ = rc.Close() }()
	tr := tar.NewReader(rc)
	if _, err := tr.Next(); err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(tr); string(b) != "kept\n" {
		t.Fatalf("workspace file %q", b)
	}
}

func TestAPIPutGet(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	sb := e.Sandbox(t, spec.OneShot)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "in.txt", Mode: 0o644, Size: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sb.Put(ctx, "work", &buf); err != nil {
		t.Fatal(err)
	}
	out, _, res, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"sh", "-c", "stat -c '%u:%g' in.txt && cat in.txt > out.txt"}})
	if err != nil || res.ExitCode != 0 || out != "65532:65532\n" {
		t.Fatalf("ownership %q %+v %v", out, res, err)
	}
	rc, live, err := sb.Get(ctx, "work/out.txt", true)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	if live {
		t.Error("a paused copy reported live")
	}
	tr := tar.NewReader(rc)
	hdr, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(tr)
	if string(b) != "hello" || hdr.Uid != 65532 || hdr.Gid != 65532 {
		t.Fatalf("got %q owned %d:%d", b, hdr.Uid, hdr.Gid)
	}
}

// TestAPIJournalLocked: a second runtime on the same journal fails fast with
// a typed error naming the holder.
func TestAPIJournalLocked(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	_, err := stockade.Open(context.Background(), stockade.Options{Journal: e.Journal, LockTimeout: 200 * time.Millisecond})
	if !spec.IsCode(err, spec.CodeJournalLocked) || !strings.Contains(err.Error(), e.Journal) {
		t.Fatalf("second open: %v, want journal_locked naming %s", err, e.Journal)
	}
}

// TestAPIWorkloadDeathNoticed: a workload killed behind a live runtime's back
// is noticed through Docker's die event: the sandbox is journaled exited with
// Docker's code, and admission closes.
func TestAPIWorkloadDeathNoticed(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	sb := e.Sandbox(t, spec.Kept)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"sleep", "300"}, Stdout: spec.Discard, Stderr: spec.Discard})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := sb.State(ctx)
	if err := e.Docker.ContainerKill(ctx, st.Created.Workload, "KILL"); err != nil {
		t.Fatal(err)
	}
	// The process may see its exec die (exit 137) before the die event
	// reaches the sandbox; either way its end is what Docker reported.
	if res, _ := p.Wait(ctx); res.Reason != "sandbox_stopped" && (res.Reason != "exited" || res.ExitCode != 137) {
		t.Fatalf("process ended %+v, want sandbox_stopped or exited 137", res)
	}
	for {
		st, err := sb.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Phase == lifecycle.PhaseExited {
			if st.Exit.ExitCode == nil || *st.Exit.ExitCode != 137 || st.Exit.Reason != lifecycle.ReasonExited {
				t.Fatalf("exit %+v, want exited 137 as Docker reported", st.Exit)
			}
			if _, err := sb.Start(ctx, spec.Process{Argv: []string{"true"}}); !spec.IsCode(err, spec.CodeAdmissionClosed) {
				t.Fatalf("start after the death: %v, want admission_closed", err)
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the death was never recorded: %s", st.Phase)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
