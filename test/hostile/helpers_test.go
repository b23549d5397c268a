package hostile

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dockerclient "github.com/docker/docker/client"

	"github.com/stockade/stockade/client"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// The hostile-workload suite (issue 13): each attack runs from inside a
// sandbox of a served runtime (`stockade serve` and its Go client) while a
// second sandbox, the bystander, keeps running `echo ok`; every one of
// those must end exited 0 with its output. Part of make test; make hostile
// runs it alone.

// hostileEnv is one `stockade serve` on a fresh journal, a client dialled
// to it, and the bystander: a kept sandbox of its own.
type hostileEnv struct {
	cli       *testkit.CLIEnv
	srv       *testkit.Served
	c         *client.Client
	docker    *dockerclient.Client
	image     string
	owner     string
	bystander host.Sandbox
}

func newHostile(t *testing.T) *hostileEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, srv, c, by := testkit.ServedKeptSandbox(t, ctx)
	docker := dockertest.Client(t)
	st, err := by.State(ctx)
	if err != nil || st.Owner == "" {
		t.Fatalf("the bystander's state: %+v %v", st, err)
	}
	return &hostileEnv{cli: e, srv: srv, c: c, docker: docker, image: dockertest.ImageID(t, docker), owner: st.Owner, bystander: by}
}

// ran is what became of one process: its id, both streams as bytes, its
// result and Wait's error.
type ran struct {
	id             string
	stdout, stderr []byte
	res            spec.Result
	err            error
}

// run starts p in sb, reads its piped streams to their end and waits for
// it. A start that fails is returned as err with no id.
func run(ctx context.Context, sb host.Sandbox, p spec.Process) ran {
	proc, err := sb.Start(ctx, p)
	if err != nil {
		return ran{err: err, res: spec.Result{ExitCode: -1}}
	}
	return finish(ctx, proc)
}

// finish reads a started process's piped streams to their end and waits
// for it.
func finish(ctx context.Context, proc host.Process) ran {
	var r ran
	r.id = proc.ID()
	var wg sync.WaitGroup
	var stderr bytes.Buffer
	if s := proc.Stderr(); s != nil {
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = io.Copy(&stderr, s) }()
	}
	if s := proc.Stdout(); s != nil {
		var out bytes.Buffer
		_, _ = io.Copy(&out, s) // what was read is checked below
		r.stdout = out.Bytes()
	}
	wg.Wait()
	r.stderr = stderr.Bytes()
	r.res, r.err = proc.Wait(ctx)
	return r
}

// shIn runs sh -c script in sb.
func shIn(ctx context.Context, sb host.Sandbox, script string) ran {
	return run(ctx, sb, spec.Process{Argv: []string{"sh", "-c", script}})
}

// attack creates a fresh kept sandbox of pol and runs fn against it while
// the bystander runs `echo ok` again and again (a short pause between
// runs) from when fn starts until it returns (the first run starts with
// fn); every bystander run must end exited 0 with "ok\n". The attacked sandbox is
// removed afterwards (unless fn removed it) and nothing of it may be left
// on the daemon.
func (h *hostileEnv) attack(t *testing.T, pol spec.Policy, fn func(ctx context.Context, sb host.Sandbox)) {
	t.Helper()
	h.attackIn(t, h.image, pol, fn)
}

// attackIn is attack with the attacked sandbox made of image.
func (h *hostileEnv) attackIn(t *testing.T, image string, pol spec.Policy, fn func(ctx context.Context, sb host.Sandbox)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sb, err := h.c.CreateSandbox(ctx, spec.Sandbox{Image: image, Policy: pol, Lifetime: spec.Kept})
	if err != nil {
		t.Fatalf("creating the attacked sandbox: %v", err)
	}
	stop := make(chan struct{})
	runs := make(chan []ran, 1)
	go func() {
		var rs []ran
		for {
			rs = append(rs, run(ctx, h.bystander, spec.Process{Argv: []string{"echo", "ok"}}))
			select {
			case <-stop:
				runs <- rs
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	defer func() {
		close(stop)
		rs := <-runs
		for i, r := range rs {
			if r.err != nil || r.res.ExitCode != 0 || r.res.Reason != string(lifecycle.ReasonExited) || string(r.stdout) != "ok\n" || len(r.stderr) != 0 {
				t.Errorf("bystander run %d of %d during the attack: stdout %q stderr %q result %+v err %v; want exited 0 with \"ok\\n\"", i+1, len(rs), r.stdout, r.stderr, r.res, r.err)
			}
		}
		t.Logf("the bystander ran echo ok %d times during the attack", len(rs))
		if _, err := h.c.Sandbox(ctx, sb.ID()); spec.IsCode(err, spec.CodeNotFound) {
			return // fn removed it
		}
		if err := sb.Remove(ctx); err != nil {
			t.Errorf("removing the attacked sandbox: %v", err)
			return
		}
		testkit.AssertSandboxGone(t, h.docker, h.owner, sb.ID())
	}()
	fn(ctx, sb)
}

// journaledExit returns process id's process.exited event from the
// server's journal.
func (h *hostileEnv) journaledExit(t *testing.T, ctx context.Context, sandbox, id string) lifecycle.ProcessExited {
	t.Helper()
	evs, err := h.c.History(ctx, sandbox)
	if err != nil {
		t.Fatalf("history of %s: %v", sandbox, err)
	}
	var types []string
	for _, ev := range evs {
		if ev.Kind != "process" || ev.ID != id {
			continue
		}
		types = append(types, ev.Type)
		if ev.Type == "process.exited" {
			var x lifecycle.ProcessExited
			if err := json.Unmarshal(ev.Payload, &x); err != nil {
				t.Fatalf("process.exited of %s: %s: %v", id, ev.Payload, err)
			}
			return x
		}
	}
	t.Fatalf("process %s has no process.exited in the journal: %v", id, types)
	return lifecycle.ProcessExited{}
}

// startedPID returns process id's pid inside its sandbox, from its
// journaled start.
func (h *hostileEnv) startedPID(t *testing.T, ctx context.Context, sandbox, id string) int {
	t.Helper()
	evs, err := h.c.History(ctx, sandbox)
	if err != nil {
		t.Fatalf("history of %s: %v", sandbox, err)
	}
	for _, ev := range evs {
		if ev.Kind == "process" && ev.ID == id && ev.Type == "process.started" {
			var s lifecycle.ProcessStarted
			if err := json.Unmarshal(ev.Payload, &s); err != nil {
				t.Fatal(err)
			}
			return s.PID
		}
	}
	t.Fatalf("process %s has no process.started", id)
	return 0
}

// anyCode tells wantEnd not to check the exit code.
const anyCode = math.MinInt

// wantEnd checks that r ended with reason (and, unless code is anyCode,
// that exit code), and that the journal's process.exited says the same as
// the result.
func (h *hostileEnv) wantEnd(t *testing.T, ctx context.Context, sb host.Sandbox, what string, r ran, reason lifecycle.Reason, code int) {
	t.Helper()
	if r.id == "" {
		t.Errorf("%s: the process did not start: %v", what, r.err)
		return
	}
	if r.res.Reason != string(reason) || (code != anyCode && r.res.ExitCode != code) {
		t.Errorf("%s: ended %+v (err %v); want reason %s code %d\nstderr: %s", what, r.res, r.err, reason, code, clip(r.stderr))
	}
	x := h.journaledExit(t, ctx, sb.ID(), r.id)
	journaledCode := -1
	if x.ExitCode != nil {
		journaledCode = *x.ExitCode
	}
	if string(x.Reason) != r.res.Reason || journaledCode != r.res.ExitCode || x.StdoutBytes != r.res.StdoutBytes || x.StderrBytes != r.res.StderrBytes {
		t.Errorf("%s: journaled %+v (code %d), the result says %+v", what, x, journaledCode, r.res)
	}
}

// sandboxTypesOf lists a sandbox's own event types from the server's
// journal.
func (h *hostileEnv) sandboxTypesOf(t *testing.T, ctx context.Context, id string) []string {
	t.Helper()
	evs, err := h.c.History(ctx, id)
	if err != nil {
		t.Fatalf("history of %s: %v", id, err)
	}
	var types []string
	for _, ev := range evs {
		if ev.Kind == "sandbox" {
			types = append(types, ev.Type)
		}
	}
	return types
}

// workload returns the sandbox's workload container id.
func workload(t *testing.T, ctx context.Context, sb host.Sandbox) string {
	t.Helper()
	st, err := sb.State(ctx)
	if err != nil || st.Created == nil || st.Created.Workload == "" {
		t.Fatalf("state of %s: %+v %v", sb.ID(), st, err)
	}
	return st.Created.Workload
}

// clip shortens b for a failure message.
func clip(b []byte) string {
	const max = 2048
	if len(b) > max {
		return string(b[:max]) + "…"
	}
	return string(b)
}

// okOut checks that r ran to exit 0 with stdout want.
func okOut(t *testing.T, what string, r ran, want string) {
	t.Helper()
	if r.err != nil || r.res.ExitCode != 0 || r.res.Reason != string(lifecycle.ReasonExited) || string(r.stdout) != want {
		t.Errorf("%s: stdout %q stderr %q %+v %v; want exited 0 with %q", what, r.stdout, clip(r.stderr), r.res, r.err, want)
	}
}

// probeSource is a tiny static program the suite builds and puts into a
// sandbox's workspace, for the attacks busybox has no applet for: a
// workload may bring any static binary of its own (the workspace is not
// noexec). Each command prints "ok" or the errno's text and exits 0 or 1.
const probeSource = `package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"
)

func main() {
	var err error
	switch os.Args[1] {
	case "relay": // take the warden's socket over and relay to it (never returns)
		err = relay()
	case "ptrace": // PTRACE_ATTACH to a pid (detached again at once)
		runtime.LockOSThread()
		pid, _ := strconv.Atoi(os.Args[2])
		if err = syscall.PtraceAttach(pid); err == nil {
			var ws syscall.WaitStatus
			syscall.Wait4(pid, &ws, syscall.WALL, nil)
			syscall.PtraceDetach(pid)
		}
	case "keyctl": // add_key("user", "stockade", "x", 1, KEY_SPEC_SESSION_KEYRING)
		typ, desc, data := []byte("user\x00"), []byte("stockade\x00"), []byte("x")
		ring := -3
		_, _, e := syscall.Syscall6(syscall.SYS_ADD_KEY, uintptr(unsafe.Pointer(&typ[0])), uintptr(unsafe.Pointer(&desc[0])), uintptr(unsafe.Pointer(&data[0])), 1, uintptr(ring), 0)
		if e != 0 {
			err = e
		}
	case "setuid": // setuid(0)
		_, _, e := syscall.RawSyscall(syscall.SYS_SETUID, 0, 0, 0)
		if e != 0 {
			err = e
		}
	default:
		fmt.Println("unknown probe", os.Args[1])
		os.Exit(2)
	}
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println("ok")
}

// relay renames the warden's socket, listens in its place and copies
// every connection to the real one, logging to /tmp/relay.log each
// connection as it is accepted and each read of bytes from its client as
// it happens (so the log is whole even if the relay is killed).
func relay() error {
	socks, _ := filepath.Glob("/tmp/.stockade-warden-*.sock")
	if len(socks) != 1 {
		return fmt.Errorf("warden sockets: %q", socks)
	}
	real := filepath.Join(filepath.Dir(socks[0]), "real.sock")
	if err := os.Rename(socks[0], real); err != nil {
		return err
	}
	ln, err := net.Listen("unix", socks[0])
	if err != nil {
		return err
	}
	logf := func(format string, args ...any) {
		f, _ := os.OpenFile("/tmp/relay.log", os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		fmt.Fprintf(f, format+"\n", args...)
		f.Close()
	}
	fmt.Println("listening")
	for n := 1; ; n++ {
		in, err := ln.Accept()
		if err != nil {
			return err
		}
		logf("connection %d", n)
		go func(n int) {
			defer in.Close()
			out, err := net.Dial("unix", real)
			if err != nil {
				return
			}
			defer out.Close()
			go io.Copy(in, out)
			buf := make([]byte, 32<<10)
			for {
				k, err := in.Read(buf)
				if k > 0 {
					logf("connection %d: %d bytes from the client", n, k)
					out.Write(buf[:k])
				}
				if err != nil {
					return
				}
			}
		}(n)
	}
}
`

// buildProbe builds probeSource as a static binary and returns its bytes.
func buildProbe(t *testing.T) []byte {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module probe\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(probeSource), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", "probe", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the probe: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "probe"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// putFile puts one file of the given mode at /workspace/work/<name>.
func putFile(t *testing.T, ctx context.Context, sb host.Sandbox, name string, body []byte, mode int64) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(body); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sb.Put(ctx, "work", &buf); err != nil {
		t.Fatalf("put %s: %v", name, err)
	}
}

// udpSink counts the datagrams that reach a UDP port of the host.
type udpSink struct {
	port int
	n    atomic.Int64
}

// listenUDP listens on addr (udp4) until the test ends.
func listenUDP(t *testing.T, addr string) (*udpSink, error) {
	t.Helper()
	c, err := net.ListenPacket("udp4", addr)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		_ = c.Close()
	})
	s := &udpSink{port: c.LocalAddr().(*net.UDPAddr).Port}
	go func() {
		buf := make([]byte, 64<<10)
		for {
			if _, _, err := c.ReadFrom(buf); err != nil {
				return
			}
			s.n.Add(1)
		}
	}()
	return s, nil
}

// has reports whether s holds every one of subs.
func has(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
