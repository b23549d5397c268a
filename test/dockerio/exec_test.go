package dockerio

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

func TestDockerioExecExitCodes(t *testing.T) {
	e := testkit.NewDio(t)
	sb := e.Sandbox(t, nil)
	for script, want := range map[string]int{"true": 0, "exit 3": 3, "exit 255": 255, "kill -9 $$": 137} {
		if r := e.Exec(t, sb, nil, "/bin/sh", "-c", script); r.Code != want {
			t.Errorf("%q: exit %d, want %d", script, r.Code, want)
		}
	}
	// A command that cannot be started: exit 127 with text, typed by the
	// helper.
	r := e.Exec(t, sb, nil, "no-such-command")
	if err := dockerio.ExecFailure(r.Code, r.Stderr); !spec.IsCode(err, spec.CodeExecFailed) {
		t.Errorf("missing command: exit %d, stderr %q, ExecFailure %v", r.Code, r.Stderr, err)
	}
	r = e.Exec(t, sb, nil, "/workspace")
	if err := dockerio.ExecFailure(r.Code, r.Stderr); r.Code != 126 || !spec.IsCode(err, spec.CodeExecFailed) {
		t.Errorf("directory as command: exit %d, stderr %q, ExecFailure %v", r.Code, r.Stderr, err)
	}
	if err := dockerio.ExecFailure(1, []byte("not found")); err != nil {
		t.Errorf("exit 1 is no start failure: %v", err)
	}
	// Docker itself fails to start the exec (no such working directory):
	// the text arrives before the wrapper ran; AttachExec says exec_failed.
	ctx := context.Background()
	req := dockerio.ExecRequest{ProcessID: testkit.NewID(), Spec: spec.Process{Argv: []string{"true"}, Dir: "/no/such/dir", Stdout: spec.Pipe, Stderr: spec.Pipe}}
	id, err := e.Adapter.CreateExec(ctx, sb, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Adapter.AttachExec(ctx, sb, id, req); !spec.IsCode(err, spec.CodeExecFailed) {
		t.Errorf("bad working directory: %v, want exec_failed", err)
	} else {
		t.Logf("docker start failure: %v", err)
	}
	// Unknown exec: Known false, no error.
	if st, err := e.Adapter.InspectExec(ctx, strings.Repeat("0", 64)); err != nil || st.Known {
		t.Errorf("unknown exec: %+v, %v", st, err)
	}
}

// TestDockerioExecRunningTrap: while the process runs Docker reports
// ExitCode 0; InspectExec says Running and leaves ExitCode unset.
func TestDockerioExecRunningTrap(t *testing.T) {
	e := testkit.NewDio(t)
	sb := e.Sandbox(t, nil)
	ctx := context.Background()
	req := dockerio.ExecRequest{ProcessID: testkit.NewID(), Spec: spec.Process{Argv: []string{"sh", "-c", "read x; exit 7"}, Stdin: true, Stdout: spec.Pipe, Stderr: spec.Pipe}}
	id, err := e.Adapter.CreateExec(ctx, sb, req)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := e.Adapter.InspectExec(ctx, id); err != nil || !st.Known || st.Running {
		t.Fatalf("created, not started: %+v %v", st, err)
	}
	att, err := e.Adapter.AttachExec(ctx, sb, id, req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = att.Close() }()
	if g, err := e.Adapter.ReadGroup(ctx, sb, req.ProcessID); err != nil || g != att.Group() {
		t.Fatalf("ReadGroup %d, %v; attach said %d", g, err, att.Group())
	}
	st, err := e.Adapter.InspectExec(ctx, id)
	if err != nil || !st.Running || st.ExitCode != 0 {
		t.Fatalf("running: %+v %v", st, err)
	}
	if err := e.Adapter.SignalGroup(ctx, sb, att.Group(), 0); err != nil {
		t.Fatalf("probe of a live group: %v", err)
	}
	_, _ = att.Stdin().Write([]byte("go\n"))
	_ = att.CloseStdin()
	for {
		if _, _, err := att.Next(); err != nil {
			break
		}
	}
	st, err = dockerio.WaitExec(ctx, e.Adapter, id)
	if err != nil || st.Running || st.ExitCode != 7 {
		t.Fatalf("ended: %+v %v", st, err)
	}
	if err := e.Adapter.SignalGroup(ctx, sb, att.Group(), 0); !spec.IsCode(err, spec.CodeNotFound) {
		t.Fatalf("probe of a dead group: %v", err)
	}
}

func TestDockerioExecStdinRoundTrip(t *testing.T) {
	e := testkit.NewDio(t)
	sb := e.Sandbox(t, nil)
	in := make([]byte, 4<<20+123)
	rand.Read(in)
	r := e.Exec(t, sb, in, "cat")
	if r.Code != 0 || !bytes.Equal(r.Stdout, in) || len(r.Stderr) != 0 {
		t.Fatalf("cat: exit %d, %d bytes out (want %d), stderr %q", r.Code, len(r.Stdout), len(in), r.Stderr)
	}
	// Half-close is what ends the input: wc sees EOF and reports.
	r = e.Exec(t, sb, []byte("a\nb\nc\n"), "wc", "-l")
	if strings.TrimSpace(string(r.Stdout)) != "3" {
		t.Fatalf("wc -l: %q", r.Stdout)
	}
	// Empty stdin, closed at once.
	r = e.Exec(t, sb, []byte{}, "cat")
	if r.Code != 0 || len(r.Stdout) != 0 {
		t.Fatalf("empty: %+v", r)
	}
}

func TestDockerioExecStreamsSeparatedOrdered(t *testing.T) {
	e := testkit.NewDio(t)
	sb := e.Sandbox(t, nil)
	r := e.Exec(t, sb, nil, "/bin/sh", "-c", `i=0; while [ $i -lt 2000 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done`)
	var wantOut, wantErr strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&wantOut, "out%d\n", i)
		fmt.Fprintf(&wantErr, "err%d\n", i)
	}
	if string(r.Stdout) != wantOut.String() || string(r.Stderr) != wantErr.String() {
		t.Fatalf("streams mixed or reordered: %d/%d bytes", len(r.Stdout), len(r.Stderr))
	}
}

func patternSum(n int64) [32]byte {
	h := sha256.New()
	line := []byte(testkit.PatternLine + "\n")
	block := bytes.Repeat(line, (1<<20)/len(line)+1)
	for n > 0 {
		k := min(n, int64(len(block)/len(line)*len(line)))
		h.Write(block[:k])
		n -= k
	}
	var s [32]byte
	copy(s[:], h.Sum(nil))
	return s
}

// drain runs argv and hashes stdout on the fly (nothing buffered).
func drain(tb testing.TB, e *testkit.DioEnv, sb dockerio.Sandbox, argv ...string) (int64, [32]byte, int) {
	tb.Helper()
	ctx := context.Background()
	req := dockerio.ExecRequest{ProcessID: testkit.NewID(), Spec: spec.Process{Argv: argv, Stdout: spec.Pipe, Stderr: spec.Pipe}}
	id, err := e.Adapter.CreateExec(ctx, sb, req)
	if err != nil {
		tb.Fatal(err)
	}
	att, err := e.Adapter.AttachExec(ctx, sb, id, req)
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = att.Close() }()
	h := sha256.New()
	var n int64
	for {
		sid, p, err := att.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			tb.Fatal(err)
		}
		if sid == framing.Stdout {
			n += int64(len(p))
			h.Write(p)
		} else {
			tb.Fatalf("stderr: %q", p)
		}
	}
	st, err := dockerio.WaitExec(ctx, e.Adapter, id)
	if err != nil {
		tb.Fatal(err)
	}
	var s [32]byte
	copy(s[:], h.Sum(nil))
	return n, s, st.ExitCode
}

// TestDockerioExecLargeOutput: 256 MiB of output arrive byte-exact, hashed as
// they arrive.
func TestDockerioExecLargeOutput(t *testing.T) {
	if testing.Short() {
		t.Skip("large output in -short mode")
	}
	e := testkit.NewDio(t)
	sb := e.Sandbox(t, nil)
	const size = 256 << 20
	start := time.Now()
	n, sum, code := drain(t, e, sb, "/bin/sh", "-c", "yes "+testkit.PatternLine+" | head -c "+strconv.Itoa(size))
	t.Logf("%d MiB in %v", n>>20, time.Since(start))
	if code != 0 || n != size || sum != patternSum(size) {
		t.Fatalf("exit %d, %d bytes, sum match %v", code, n, sum == patternSum(size))
	}
}

// TestDockerioExecSignalGroup: a signal reaches every process of the group;
// a descendant that called setsid left the group and survives until the
// sandbox stops (documented in dockerio's doc).
func TestDockerioExecSignalGroup(t *testing.T) {
	e := testkit.NewDio(t)
	sb := e.Sandbox(t, nil)
	ctx := context.Background()
	script := `sleep 1000 & sleep 1000 & setsid sh -c 'echo $$ >/tmp/survivor; exec sleep 1000' & sleep 0.2; echo ready; wait`
	req := dockerio.ExecRequest{ProcessID: testkit.NewID(), Spec: spec.Process{Argv: []string{"/bin/sh", "-c", script}, Stdout: spec.Pipe, Stderr: spec.Pipe}}
	id, err := e.Adapter.CreateExec(ctx, sb, req)
	if err != nil {
		t.Fatal(err)
	}
	att, err := e.Adapter.AttachExec(ctx, sb, id, req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = att.Close() }()
	pgid := att.Group()
	if _, p, err := att.Next(); err != nil || string(p) != "ready\n" {
		t.Fatalf("ready: %q %v", p, err)
	}
	members := e.Sh(t, sb, fmt.Sprintf(`for s in /proc/[0-9]*/stat; do read -r p c st pp g rest <$s 2>/dev/null && [ "$g" = %d ] && echo $p; done | wc -l`, pgid))
	if strings.TrimSpace(members) != "3" {
		t.Fatalf("group %d has %q members, want 3 (sh and two sleeps)", pgid, members)
	}
	if err := e.Adapter.SignalGroup(ctx, sb, pgid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for {
		if _, _, err := att.Next(); err != nil {
			break
		}
	}
	st, err := dockerio.WaitExec(ctx, e.Adapter, id)
	if err != nil || st.ExitCode != 128+int(syscall.SIGTERM) {
		t.Fatalf("after TERM: %+v %v", st, err)
	}
	if err := e.Adapter.SignalGroup(ctx, sb, pgid, 0); !spec.IsCode(err, spec.CodeNotFound) {
		t.Fatalf("group still has members: %v", err)
	}
	if got := e.Sh(t, sb, `kill -0 $(cat /tmp/survivor) && echo alive; kill -9 $(cat /tmp/survivor)`); got != "alive\n" {
		t.Fatalf("setsid descendant: %q", got)
	}
	if err := e.Adapter.SignalGroup(ctx, sb, 1, syscall.SIGKILL); !spec.IsCode(err, spec.CodeInvalidArgument) {
		t.Fatalf("signal to group 1: %v", err)
	}
}

// TestDockerioZombiesReaped: orphans re-parented to PID 1 are reaped by the
// engine's init, so they do not fill the pids limit.
func TestDockerioZombiesReaped(t *testing.T) {
	e := testkit.NewDio(t)
	sb := e.Sandbox(t, nil)
	for range 20 {
		e.Sh(t, sb, "sleep 0.05 & exit 0")
	}
	time.Sleep(300 * time.Millisecond)
	got := e.Sh(t, sb, `n=0; for s in /proc/[0-9]*/stat; do read -r p c st rest <$s 2>/dev/null && [ "$st" = Z ] && n=$((n+1)); done; echo $n`)
	if strings.TrimSpace(got) != "0" {
		t.Fatalf("%s zombies left", strings.TrimSpace(got))
	}
	if err := e.Adapter.VerifySandbox(context.Background(), sb); err != nil {
		t.Fatal(err)
	}
}
