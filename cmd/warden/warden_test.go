package main

import (
	"bytes"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/warden/wire"
)

// The warden must run in any image without libc: its dependencies are the
// standard library, x/sys, the warden library and the wire format, and the binary has no
// ELF interpreter.
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		switch {
		case dep == "github.com/stockade/stockade/cmd/warden",
			dep == "github.com/stockade/stockade/warden",
			dep == "github.com/stockade/stockade/warden/wire",
			strings.HasPrefix(dep, "golang.org/x/sys/"):
		default:
			t.Errorf("dependency %s is outside std, golang.org/x/sys and the warden protocol", dep)
		}
	}
	if os.Getenv("STOCKADE_WARDEN_TEST_RACE") == "1" {
		return
	}
	f, err := elf.Open(wardenBin)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the warden binary needs a dynamic loader")
		}
	}
}

func TestSubcommands(t *testing.T) {
	out, err := exec.Command(wardenBin, "version").Output()
	if err != nil || string(out) != wire.Version+"\n" {
		t.Errorf("version: %q, %v", out, err)
	}
	for _, args := range [][]string{{"bogus"}, {"attach"}, {"version", "x"}, {"serve", "extra"}} {
		cmd := exec.Command(wardenBin, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if ok := errors.As(err, &ee); !ok || ee.ExitCode() != 2 || !strings.Contains(stderr.String(), "usage") {
			t.Errorf("%v: %v, stderr %q; want exit 2 with usage", args, err, stderr.String())
		}
	}
}

func TestSpawnExitCodes(t *testing.T) {
	dir := t.TempDir()
	noexec := filepath.Join(dir, "noexec")
	if err := os.WriteFile(noexec, []byte("#!/bin/sh\necho hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Missing on any machine: the test's own directory holds nothing by
	// that name (a fixed path like /nonexistent may exist where a HOME
	// or a tool made it).
	missing := filepath.Join(dir, "missing")
	w := startWarden(t)
	c := w.link(wire.Init{})
	cases := []struct {
		name   string
		spawn  wire.Spawn
		failed int // SpawnFailed code, or 0
		code   int
		signal int
	}{
		{name: "exit 0", spawn: wire.Spawn{Argv: []string{"sh", "-c", "exit 0"}}},
		{name: "exit 1", spawn: wire.Spawn{Argv: []string{"sh", "-c", "exit 1"}}, code: 1},
		{name: "true on PATH", spawn: wire.Spawn{Argv: []string{"true"}}},
		{name: "not on PATH", spawn: wire.Spawn{Argv: []string{"no-such-program-stockade"}}, failed: 127},
		{name: "no such file", spawn: wire.Spawn{Argv: []string{filepath.Join(missing, "program")}}, failed: 127},
		{name: "not executable", spawn: wire.Spawn{Argv: []string{noexec}}, failed: 126},
		{name: "not executable on PATH", spawn: wire.Spawn{Argv: []string{"noexec"}, Env: []string{"PATH=" + dir}}, failed: 126},
		{name: "a directory", spawn: wire.Spawn{Argv: []string{dir}}, failed: 126},
		{name: "missing working directory", spawn: wire.Spawn{Argv: []string{"true"}, Dir: missing}, failed: 126},
		{name: "killed", spawn: wire.Spawn{Argv: []string{"sh", "-c", "kill -9 $$"}}, code: -1, signal: 9},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ch := uint32(i + 1)
			c.t = t
			c.spawn(ch, tc.spawn)
			if tc.failed != 0 {
				var f wire.SpawnFailed
				c.waitFor("spawn result", func() bool {
					s := c.ch(ch)
					if s.started != nil {
						t.Fatalf("started %+v, want spawn failed %d", *s.started, tc.failed)
					}
					if s.failed != nil {
						f = *s.failed
						return true
					}
					return false
				})
				if f.Code != tc.failed || f.Error == "" {
					t.Errorf("spawn failed %+v, want code %d with a text", f, tc.failed)
				}
				return
			}
			st := c.waitStarted(ch)
			if st.PID <= 0 || st.PGID != st.PID {
				t.Errorf("started %+v", st)
			}
			x, _ := c.waitExited(ch)
			if x.Code != tc.code || x.Signal != tc.signal {
				t.Errorf("exited %+v, want code %d signal %d", x, tc.code, tc.signal)
			}
		})
	}
}

func TestOutputStreams(t *testing.T) {
	w := startWarden(t)
	c := w.link(wire.Init{})
	dir := t.TempDir()
	c.spawn(1, wire.Spawn{Argv: []string{"sh", "-c", "printf out1; printf err1 >&2; printf out2"}})
	c.spawn(2, wire.Spawn{Argv: []string{"sh", "-c", `printf "%s %s " "$FOO" "$HOME"; pwd`}, Env: []string{"FOO=bar", "HOME=/nowhere"}, Dir: dir})
	c.waitStarted(1)
	x, s := c.waitExited(1)
	if x.Code != 0 || x.Output != 12 || len(s.out) != 12 {
		t.Errorf("exited %+v with %d bytes", x, len(s.out))
	}
	if string(s.streams[1]) != "out1out2" || string(s.streams[2]) != "err1" {
		t.Errorf("stdout %q, stderr %q", s.streams[1], s.streams[2])
	}
	if x.OOMKills < -1 {
		t.Errorf("oom kills %d", x.OOMKills)
	}
	_, s = c.waitExited(2)
	if want := "bar /nowhere " + dir + "\n"; string(s.out) != want {
		t.Errorf("environment and directory: %q, want %q", s.out, want)
	}
}

func TestStdin(t *testing.T) {
	const stdinWindow = 16 << 10
	const total = 200_000
	w := startWarden(t)
	c := w.link(wire.Init{StdinWindow: stdinWindow})
	c.spawn(1, wire.Spawn{Argv: []string{"wc", "-c"}, Stdin: true})
	c.waitStarted(1)
	data := bytes.Repeat([]byte("0123456789abcdef"), total/16)
	sent := 0
	for sent < total {
		// Never more than the window beyond the last InAck.
		var room int
		c.waitFor("stdin window", func() bool {
			room = stdinWindow - (sent - int(c.ch(1).inAck))
			return room > 0
		})
		n := min(room, 5000, total-sent)
		if err := c.w.Write(wire.TIn, 1, data[sent:sent+n]); err != nil {
			t.Fatal(err)
		}
		sent += n
	}
	if err := c.w.Write(wire.TCloseIn, 1); err != nil {
		t.Fatal(err)
	}
	x, s := c.waitExited(1)
	if x.Code != 0 || strings.TrimSpace(string(s.out)) != strconv.Itoa(total) {
		t.Errorf("exited %+v, wc says %q, want %d", x, s.out, total)
	}
	c.waitFor("final in ack", func() bool { return c.ch(1).inAck == total })
}

// A child that stopped reading its stdin (it exited) must not wedge the link:
// the data is dropped and still acknowledged.
func TestStdinToExitedChild(t *testing.T) {
	w := startWarden(t)
	c := w.link(wire.Init{})
	c.spawn(1, wire.Spawn{Argv: []string{"true"}, Stdin: true})
	c.waitStarted(1)
	c.waitExited(1)
	for i := 0; i < 8; i++ {
		if err := c.w.Write(wire.TIn, 1, bytes.Repeat([]byte("x"), 4000)); err != nil {
			t.Fatal(err)
		}
	}
	c.waitFor("in ack of dropped stdin", func() bool { return c.ch(1).inAck == 32000 })
	if err := c.w.Write(wire.TForget, 1); err != nil {
		t.Fatal(err)
	}
	if tb := c.list(); len(tb.Processes) != 0 {
		t.Errorf("table after forget: %+v", tb)
	}
}

// One process whose output is never acknowledged fills its window and stops
// there; it blocks no other process.
func TestBackpressurePerProcess(t *testing.T) {
	w := startWarden(t)
	c := w.link(wire.Init{})
	c.setNoAck(1, true)
	c.spawn(1, wire.Spawn{Argv: []string{"head", "-c", "16777216", "/dev/zero"}})
	c.waitStarted(1)
	window := uint64(wire.DefaultWindow)
	c.waitFor("a full window", func() bool { return c.ch(1).received() == window })
	for ch := uint32(2); ch <= 11; ch++ {
		c.spawn(ch, wire.Spawn{Argv: []string{"sh", "-c", fmt.Sprintf("echo out%d; echo err%d >&2", ch, ch)}})
	}
	for ch := uint32(2); ch <= 11; ch++ {
		x, s := c.waitExited(ch)
		if x.Code != 0 || string(s.streams[1]) != fmt.Sprintf("out%d\n", ch) || string(s.streams[2]) != fmt.Sprintf("err%d\n", ch) {
			t.Errorf("channel %d: %+v, %q/%q", ch, x, s.streams[1], s.streams[2])
		}
		if err := c.w.Write(wire.TForget, ch); err != nil {
			t.Fatal(err)
		}
	}
	tb := c.list()
	if len(tb.Processes) != 1 {
		t.Fatalf("table %+v, want only the blocked process", tb)
	}
	e := tb.Processes[0]
	if e.Channel != 1 || !e.Running || e.Exit != nil || e.Acked != 0 || e.Output-e.Acked > window || e.Output < window/2 {
		t.Errorf("blocked process %+v, want running with a window (%d) of output held", e, window)
	}
	if got := c.ch(1).received(); got != window {
		t.Errorf("received %d, want the window %d", got, window)
	}
	// Forget of a running process would be a violation; kill it: its
	// Reaped comes although its window is full (nobody acked), so a
	// runtime whose consumer stopped reading can still learn the end.
	if err := c.w.WriteSignal(1, 9); err != nil {
		t.Fatal(err)
	}
	c.waitFor("reaped with a full window", func() bool { return c.ch(1).reaped != nil })
	if r := c.ch(1).reaped; r.Signal != 9 || c.ch(1).exited != nil {
		t.Errorf("reaped %+v (exited %v), want signal 9 and no exited yet", r, c.ch(1).exited)
	}
	if err := c.w.WriteOffset(wire.TAck, 1, window); err != nil {
		t.Fatal(err)
	}
	c.setNoAck(1, false)
	x, _ := c.waitExited(1)
	if x.Signal != 9 && x.Code != 0 {
		t.Errorf("exited %+v", x)
	}
}

// The total cap bounds what all processes together hold.
func TestBufferCap(t *testing.T) {
	const capTotal = 300_000
	w := startWarden(t, "-buffer-cap", strconv.Itoa(capTotal))
	c := w.link(wire.Init{})
	for ch := uint32(1); ch <= 3; ch++ {
		c.setNoAck(ch, true)
		c.spawn(ch, wire.Spawn{Argv: []string{"head", "-c", "16777216", "/dev/zero"}})
		c.waitStarted(ch)
	}
	c.waitFor("the cap reached", func() bool {
		var n uint64
		for ch := uint32(1); ch <= 3; ch++ {
			n += c.ch(ch).received()
		}
		return n >= capTotal-1024
	})
	var held uint64
	for _, e := range c.list().Processes {
		held += e.Output - e.Acked
	}
	if held > capTotal {
		t.Errorf("%d bytes held, more than the cap %d", held, capTotal)
	}
}

func TestTTY(t *testing.T) {
	w := startWarden(t)
	c := w.link(wire.Init{})
	c.spawn(1, wire.Spawn{Argv: []string{"sh", "-c", "stty size; read x; stty size; tty >/dev/null && echo tty"}, TTY: true, Stdin: true, Rows: 30, Cols: 100})
	c.waitStarted(1)
	c.waitFor("the first size", func() bool { return bytes.Contains(c.ch(1).out, []byte("30 100")) })
	if err := c.w.WriteResize(1, 40, 120); err != nil {
		t.Fatal(err)
	}
	if err := c.w.Write(wire.TIn, 1, []byte("\n")); err != nil {
		t.Fatal(err)
	}
	x, s := c.waitExited(1)
	if x.Code != 0 || !bytes.Contains(s.out, []byte("40 120")) || !bytes.Contains(s.out, []byte("tty")) {
		t.Errorf("exited %+v, output %q", x, s.out)
	}
	if len(s.streams[2]) != 0 {
		t.Errorf("a terminal has one stream, got stderr %q", s.streams[2])
	}
}

// A signal goes to the process's group: its children die with it.
func TestSignalGroup(t *testing.T) {
	w := startWarden(t)
	c := w.link(wire.Init{})
	c.spawn(1, wire.Spawn{Argv: []string{"sh", "-c", "sleep 1000 & echo $!; wait"}})
	st := c.waitStarted(1)
	var pid int
	c.waitFor("the grandchild's pid", func() bool {
		out := c.ch(1).out
		if i := bytes.IndexByte(out, '\n'); i > 0 {
			pid, _ = strconv.Atoi(string(out[:i]))
			return true
		}
		return false
	})
	if err := c.w.WriteSignal(1, int(syscall.SIGTERM)); err != nil {
		t.Fatal(err)
	}
	// Exited needs the pipes' end: the grandchild holds them until it dies.
	x, _ := c.waitExited(1)
	if x.Code != -1 || x.Signal != int(syscall.SIGTERM) {
		t.Errorf("exited %+v, want signal 15", x)
	}
	// The grandchild closed its pipes while exiting; it may not be a
	// zombie yet.
	testutil.Eventually(t, fmt.Sprintf("the grandchild %d to die of the group signal", pid), func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		return f[0] == "Z" || f[2] != strconv.Itoa(st.PGID)
	})
}

// A hundred waiting children (two output pumps and a stdin feeder each) cost
// goroutines, not threads: every fd goes through the poller and one loop
// reaps them all.
func TestThreadsStayFew(t *testing.T) {
	w := startWarden(t)
	c := w.link(wire.Init{})
	for ch := uint32(1); ch <= 100; ch++ {
		c.spawn(ch, wire.Spawn{Argv: []string{"cat"}, Stdin: true})
	}
	for ch := uint32(1); ch <= 100; ch++ {
		c.waitStarted(ch)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", w.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			if n, _ := strconv.Atoi(strings.TrimSpace(v)); n > 16 {
				t.Errorf("%d threads for 100 waiting children", n)
			}
		}
	}
	for ch := uint32(1); ch <= 100; ch++ {
		if err := c.w.Write(wire.TIn, ch, []byte("bye\n")); err != nil {
			t.Fatal(err)
		}
		if err := c.w.Write(wire.TCloseIn, ch); err != nil {
			t.Fatal(err)
		}
	}
	for ch := uint32(1); ch <= 100; ch++ {
		if x, s := c.waitExited(ch); x.Code != 0 || string(s.out) != "bye\n" {
			t.Errorf("channel %d: %+v %q", ch, x, s.out)
		}
	}
}

func TestHundredProcesses(t *testing.T) {
	w := startWarden(t)
	c := w.link(wire.Init{})
	for ch := uint32(1); ch <= 100; ch++ {
		c.spawn(ch, wire.Spawn{Argv: []string{"echo", strconv.Itoa(int(ch))}})
	}
	for ch := uint32(1); ch <= 100; ch++ {
		x, s := c.waitExited(ch)
		if x.Code != 0 || string(s.out) != fmt.Sprintf("%d\n", ch) {
			t.Errorf("channel %d: %+v %q", ch, x, s.out)
		}
		if err := c.w.Write(wire.TForget, ch); err != nil {
			t.Fatal(err)
		}
	}
	if tb := c.list(); len(tb.Processes) != 0 {
		t.Errorf("table after forgetting all: %d entries", len(tb.Processes))
	}
}

// The warden outlives the signals a runtime's group kills or a workload may
// send it, and a child does not inherit an ignored SIGPIPE.
func TestSignalsToTheWarden(t *testing.T) {
	w := startWarden(t)
	c := w.link(wire.Init{})
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGPIPE} {
		if err := w.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
	}
	c.spawn(1, wire.Spawn{Argv: []string{"grep", "SigIgn", "/proc/self/status"}})
	_, s := c.waitExited(1)
	f := strings.Fields(string(s.out))
	if len(f) != 2 {
		t.Fatalf("status %q", s.out)
	}
	mask, err := strconv.ParseUint(f[1], 16, 64)
	if err != nil || mask&(1<<(syscall.SIGPIPE-1)) != 0 {
		t.Errorf("child's ignored signals %q: SIGPIPE must not be inherited ignored", f[1])
	}
	if tb := c.list(); len(tb.Processes) != 1 {
		t.Errorf("table %+v", tb)
	}
}

// seqOutput is what `seq 1 n` prints.
func seqOutput(n int) []byte {
	var b bytes.Buffer
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.Bytes()
}

// Link loss keeps children running with their output held; a reattach
// through `stockade-warden attach` with the right MAC resumes every byte
// once, in order, from the runtime's offset.
func TestReattach(t *testing.T) {
	const window = 64 << 10
	const lines = 100_000
	want := seqOutput(lines)
	w := startWarden(t)
	c := w.link(wire.Init{Window: window})
	hello := c.first
	if fi, err := os.Stat(hello.Socket); err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %q: %v, %v; want a socket of mode 0600", hello.Socket, fi.Mode(), err)
	}
	c.setNoAck(1, true)
	c.spawn(1, wire.Spawn{Argv: []string{"sh", "-c", fmt.Sprintf("seq 1 %d; exec sleep 1000", lines)}})
	c.waitStarted(1)
	c.waitFor("a full window", func() bool { return c.ch(1).received() == window })
	const acked = 10_000
	if err := c.w.WriteOffset(wire.TAck, 1, acked); err != nil {
		t.Fatal(err)
	}
	c.waitFor("the window after the ack", func() bool { return c.ch(1).received() == acked+window })
	c.mu.Lock()
	before := append([]byte(nil), c.ch(1).out...)
	c.mu.Unlock()
	if !bytes.Equal(before, want[:len(before)]) {
		t.Fatal("output before the loss differs from seq's")
	}

	// The runtime goes away: the warden's stdin ends.
	_ = w.stdin.Close()
	c.waitEnd()

	// A wrong MAC is refused, and changes nothing.
	bad := w.attach(hello.Socket, bytes.Repeat([]byte{1}, wire.SecretSize))
	bad.waitEnd()
	if len(bad.control[wire.THello]) != 0 {
		t.Fatal("hello after a wrong MAC")
	}

	r := w.attach(hello.Socket, w.secret)
	h := r.waitHello()
	if h.Socket != hello.Socket || h.PID != hello.PID || h.Window != window {
		t.Errorf("reattach hello %+v, first %+v", h, hello)
	}
	// The warden proves it holds the secret, answering the runtime's nonce.
	if want := hex.EncodeToString(wire.Proof(w.secret, r.nonce)); h.Proof != want {
		t.Errorf("reattach hello's proof %q, want %q", h.Proof, want)
	}
	if hello.Proof != "" {
		t.Errorf("the first link's hello carries a proof %q; nothing asked for one", hello.Proof)
	}
	e := entryOf(r.list(), 1)
	if e == nil || !e.Running || e.Acked != acked || e.Output < acked+window || e.Output > acked+window {
		t.Fatalf("entry after reattach %+v, want running, acked %d, output %d", e, acked, acked+window)
	}
	// Nothing is sent before the Resume.
	resume := uint64(acked + 5000)
	r.mu.Lock()
	if n := len(r.ch(1).out); n != 0 {
		t.Errorf("%d bytes before the resume", n)
	}
	r.ch(1).base = resume
	r.mu.Unlock()
	if err := r.w.WriteOffset(wire.TResume, 1, resume); err != nil {
		t.Fatal(err)
	}
	r.waitFor("all of seq's output", func() bool { return r.ch(1).received() == uint64(len(want)) })
	r.mu.Lock()
	got := append([]byte(nil), r.ch(1).out...)
	r.mu.Unlock()
	if !bytes.Equal(got, want[resume:]) {
		t.Errorf("resumed output (%d bytes) differs from seq's from %d", len(got), resume)
	}

	// A spawn on the reattached link works as usual.
	r.spawn(2, wire.Spawn{Argv: []string{"echo", "again"}})
	if x, s := r.waitExited(2); x.Code != 0 || string(s.out) != "again\n" {
		t.Errorf("spawn after reattach: %+v %q", x, s.out)
	}
	if err := r.w.WriteSignal(1, 9); err != nil {
		t.Fatal(err)
	}
	if x, _ := r.waitExited(1); x.Signal != 9 || x.Output != uint64(len(want)) {
		t.Errorf("exited %+v, want signal 9 after %d bytes", x, len(want))
	}

	// A second reattach replaces the current link.
	r2 := w.attach(hello.Socket, w.secret)
	r2.waitHello()
	r.waitEnd()
	tb := r2.list()
	if e := entryOf(tb, 1); e == nil || e.Running || e.Exit == nil || e.Exit.Signal != 9 {
		t.Errorf("entry 1 after the second reattach: %+v", e)
	}
	if e := entryOf(tb, 2); e == nil || e.Exit == nil || e.Exit.Code != 0 {
		t.Errorf("entry 2 after the second reattach: %+v", e)
	}
}

// violationFrame encodes one frame as the runtime would send it.
func violationFrame(typ wire.Type, ch uint32, payload []byte) []byte {
	var b bytes.Buffer
	_ = wire.NewWriter(&b).Write(typ, ch, payload) // a bytes.Buffer: never fails
	return b.Bytes()
}

func violationOffset(typ wire.Type, ch uint32, off uint64) []byte {
	var b bytes.Buffer
	_ = wire.NewWriter(&b).WriteOffset(typ, ch, off) // a bytes.Buffer: never fails
	return b.Bytes()
}

// startViolationScene starts a warden with a stdin echo on channel 1 (it
// has said "up") and a sleeper on channel 3.
func startViolationScene(t *testing.T) (*wardenProc, *conn) {
	w := startWarden(t)
	c := w.link(wire.Init{StdinWindow: 1024})
	c.spawn(1, wire.Spawn{Argv: []string{"sh", "-c", "echo up; exec cat"}, Stdin: true})
	c.spawn(3, wire.Spawn{Argv: []string{"sleep", "1000"}})
	c.waitStarted(1)
	c.waitStarted(3)
	c.waitFor("output", func() bool { return c.ch(1).received() == 3 })
	return w, c
}

// A runtime that breaks the stream itself (its framing, the control
// channel) loses its link, nothing else: the children keep running and a
// reattach works.
func TestViolationEndsOnlyTheLink(t *testing.T) {
	cases := []struct {
		name  string
		bytes []byte
	}{
		{"garbage", []byte("this is not a frame at all, not even close")},
		{"unknown type", violationFrame(99, 0, nil)},
		{"oversized header", []byte{byte(wire.TSpawn), 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff}},
		{"second init", violationFrame(wire.TInit, 0, []byte(`{"secret":"`+hex.EncodeToString(make([]byte, 32))+`"}`))},
		{"a process frame on the control channel", violationFrame(wire.TSpawn, 0, []byte(`{"id":"x","argv":["true"]}`))},
		{"cut inside a frame", []byte{byte(wire.TList), 0, 0, 0, 0, 0, 0, 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, c := startViolationScene(t)
			if _, err := w.stdin.Write(tc.bytes); err != nil {
				t.Fatal(err)
			}
			if tc.name == "cut inside a frame" {
				_ = w.stdin.Close()
			}
			c.waitEnd()

			r := w.attach(c.first.Socket, w.secret)
			r.waitHello()
			tb := r.list()
			if e := entryOf(tb, 1); e == nil || !e.Running || e.Output != 3 {
				t.Errorf("process 1 after the violation: %+v", e)
			}
			if e := entryOf(tb, 3); e == nil || !e.Running {
				t.Errorf("process 3 after the violation: %+v", e)
			}
			r.mu.Lock()
			r.ch(1).base = 3
			r.mu.Unlock()
			if err := r.w.WriteOffset(wire.TResume, 1, 3); err != nil {
				t.Fatal(err)
			}
			if err := r.w.Write(wire.TIn, 1, []byte("still here\n")); err != nil {
				t.Fatal(err)
			}
			r.waitFor("the echo", func() bool { return string(r.ch(1).out) == "still here\n" })
		})
	}
}

// A request about one process that the warden cannot apply is refused
// alone (issue 19, defect 2): the link, that process and its neighbours
// go on. A bad stdin frame closes that process's stdin (bytes of it are
// missing); a malformed spawn on a free channel is answered SpawnFailed.
func TestViolationOfOneChannelIsRefused(t *testing.T) {
	cases := []struct {
		name  string
		bytes []byte
		// stdinClosed: process 1's stdin is closed by the refusal.
		stdinClosed bool
		// failed: channel 2 gets SpawnFailed.
		failed bool
	}{
		{name: "unknown type on a process channel", bytes: violationFrame(99, 1, nil)},
		{name: "control frame on a process channel", bytes: violationFrame(wire.TList, 1, nil)},
		{name: "a warden's frame", bytes: violationFrame(wire.TOut, 1, []byte{1, 'x'})},
		{name: "ack of the wrong size", bytes: violationFrame(wire.TAck, 1, []byte{1})},
		{name: "spawn without id", bytes: violationFrame(wire.TSpawn, 2, []byte(`{"argv":["true"]}`)), failed: true},
		{name: "spawn that is not JSON", bytes: violationFrame(wire.TSpawn, 2, []byte(`{{`)), failed: true},
		{name: "spawn on a busy channel", bytes: violationFrame(wire.TSpawn, 1, []byte(`{"id":"x","argv":["true"]}`))},
		{name: "ack beyond what was sent", bytes: violationOffset(wire.TAck, 1, 1<<40)},
		{name: "resume beyond what was read", bytes: violationOffset(wire.TResume, 1, 1<<40)},
		{name: "ack of no process", bytes: violationOffset(wire.TAck, 7, 0)},
		{name: "resume of no process", bytes: violationOffset(wire.TResume, 7, 0)},
		{name: "forget of no process", bytes: violationFrame(wire.TForget, 7, nil)},
		{name: "signal 0", bytes: violationFrame(wire.TSignal, 1, []byte{0, 0, 0, 0})},
		{name: "signal 65", bytes: violationFrame(wire.TSignal, 1, []byte{0, 0, 0, 65})},
		{name: "stdin beyond the window", bytes: violationFrame(wire.TIn, 1, bytes.Repeat([]byte("x"), 2000)), stdinClosed: true},
		{name: "stdin to a process without", bytes: violationFrame(wire.TIn, 3, []byte("x"))},
		{name: "close_in to a process without", bytes: violationFrame(wire.TCloseIn, 3, nil)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, c := startViolationScene(t)
			if _, err := w.stdin.Write(tc.bytes); err != nil {
				t.Fatal(err)
			}
			// Frames are applied in order: this spawn's answer comes
			// after the bad frame was dealt with, on the same link.
			c.spawn(5, wire.Spawn{Argv: []string{"echo", "next"}})
			if x, s := c.waitExited(5); x.Code != 0 || string(s.out) != "next\n" {
				t.Errorf("a spawn after the refused frame: %+v %q", x, s.out)
			}
			if tc.failed {
				c.waitFor("spawn_failed on 2", func() bool { return c.ch(2).failed != nil })
				if f := c.ch(2).failed; f.Code != 126 {
					t.Errorf("spawn_failed %+v, want 126", *f)
				}
			}
			if tc.stdinClosed {
				if x, s := c.waitExited(1); x.Code != 0 || string(s.out) != "up\n" {
					t.Errorf("process 1 after its stdin was refused: %+v %q", x, s.out)
				}
			} else {
				if err := c.w.Write(wire.TIn, 1, []byte("still here\n")); err != nil {
					t.Fatal(err)
				}
				c.waitFor("the echo", func() bool { return string(c.ch(1).out) == "up\nstill here\n" })
			}
			tb := c.list()
			if e := entryOf(tb, 3); e == nil || !e.Running {
				t.Errorf("process 3 after the refused frame: %+v", e)
			}
			c.mu.Lock()
			ended := c.ended
			c.mu.Unlock()
			if ended != nil {
				t.Fatalf("the link ended: %v", ended)
			}
		})
	}
}

// The warden runs as the sandbox's unprivileged user: it spawns, opens a
// terminal, listens for reattaches and is not dumpable (the workload, same
// uid, cannot ptrace it or read its fds).
func TestUnprivileged(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the warden as another uid")
	}
	const uid = 65534
	w := startWardenAs(t, &syscall.Credential{Uid: uid, Gid: uid})
	c := w.link(wire.Init{})
	if c.first.Socket == "" {
		t.Error("no reattach socket")
	}
	c.spawn(1, wire.Spawn{Argv: []string{"id", "-u"}})
	c.spawn(2, wire.Spawn{Argv: []string{"sh", "-c", "tty >/dev/null && stty size"}, TTY: true, Rows: 24, Cols: 80})
	c.spawn(3, wire.Spawn{Argv: []string{"cat", fmt.Sprintf("/proc/%d/environ", w.cmd.Process.Pid)}})
	if x, s := c.waitExited(1); x.Code != 0 || strings.TrimSpace(string(s.out)) != strconv.Itoa(uid) {
		t.Errorf("id -u: %+v %q", x, s.out)
	}
	if x, s := c.waitExited(2); x.Code != 0 || !bytes.Contains(s.out, []byte("24 80")) {
		t.Errorf("terminal: %+v %q", x, s.out)
	}
	if x, s := c.waitExited(3); x.Code == 0 {
		t.Errorf("a child of the same uid read the warden's /proc environ: %+v %q", x, s.out)
	}
}

// TestKillSubcommand: `stockade-warden kill SIG PGID` signals a group (the
// runtime's way when no warden answers), 3 for a group with no member, 2
// for bad arguments.
func TestKillSubcommand(t *testing.T) {
	sleep := exec.Command("sleep", "60")
	sleep.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := strconv.Itoa(sleep.Process.Pid)
	code := func(args ...string) int {
		err := exec.Command(wardenBin, append([]string{"kill"}, args...)...).Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	}
	if c := code("0", pgid); c != 0 {
		t.Fatalf("probe of a live group: exit %d", c)
	}
	if c := code("9", pgid); c != 0 {
		t.Fatalf("kill: exit %d", c)
	}
	if err := sleep.Wait(); err == nil || sleep.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the group's sleep after kill 9: %v", err)
	}
	if c := code("0", pgid); c != 3 {
		t.Fatalf("probe of a gone group: exit %d, want 3", c)
	}
	for _, bad := range [][]string{{"9", "1"}, {"99", pgid}, {"x", pgid}, {"9"}} {
		if c := code(bad...); c != 2 {
			t.Errorf("kill %v: exit %d, want 2", bad, c)
		}
	}
}

// TestAttachRefusesAnImpostor: a program that renamed the warden's socket
// and listens in its place, relaying every byte to the real warden, would
// sit in the middle of an authenticated link. The bridge sees that the
// listener is not the process named in the socket's name and connects
// nothing; the warden, reached directly, still takes the runtime back.
func TestAttachRefusesAnImpostor(t *testing.T) {
	w := startWarden(t)
	c := w.link(wire.Init{})
	sock := c.first.Socket
	_ = w.stdin.Close() // the runtime goes away
	c.waitEnd()

	real := sock + ".real"
	if err := os.Rename(sock, real); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	relayed := make(chan struct{}, 1)
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			relayed <- struct{}{}
			out, err := net.Dial("unix", real)
			if err != nil {
				_ = in.Close()
				continue
			}
			// The impostor's relay: its errors are the connections' ends.
			go func() { _, _ = io.Copy(out, in); _ = out.Close() }()
			go func() { _, _ = io.Copy(in, out); _ = in.Close() }()
		}
	}()

	b := startSub(t, w.env, "attach", sock)
	got, _ := io.ReadAll(b.stdout)
	err = b.cmd.Wait()
	if len(got) != 0 || err == nil || !strings.Contains(b.stderr.String(), "not the warden") {
		t.Fatalf("the bridge to an impostor: %d bytes through, %v, stderr %q; want nothing through, exit 1 naming the impostor", len(got), err, b.stderr.String())
	}
	select {
	case <-relayed: // the impostor was reached, and given nothing
	case <-time.After(waitLimit):
		t.Fatal("the impostor was never connected to: the test did not test")
	}

	// Put back, the real socket takes the runtime again.
	if err := os.Rename(real, sock); err != nil {
		t.Fatal(err)
	}
	r := w.attach(sock, w.secret)
	if h := r.waitHello(); h.PID != c.first.PID {
		t.Fatalf("reattach hello %+v", h)
	}
}

// TestRekey: a Rekey on the live link replaces the secret: Rekeyed comes
// back, a reattach with the old secret is refused and one with the new
// secret is accepted (and proves the new secret). A malformed Rekey ends
// its link and changes nothing.
func TestRekey(t *testing.T) {
	w := startWarden(t)
	c := w.link(wire.Init{})
	socket := c.first.Socket
	c.spawn(1, wire.Spawn{Argv: []string{"sleep", "1000"}})
	c.waitStarted(1)

	old := w.secret
	w.secret = bytes.Repeat([]byte{0xa5}, wire.SecretSize)
	if err := c.w.WriteJSON(wire.TRekey, 0, &wire.Rekey{Secret: hex.EncodeToString(w.secret)}); err != nil {
		t.Fatal(err)
	}
	if p := c.waitControl(wire.TRekeyed); len(p) != 0 {
		t.Fatalf("rekeyed with a payload %q", p)
	}

	bad := w.attach(socket, old)
	bad.waitEnd()
	if len(bad.control[wire.THello]) != 0 {
		t.Fatal("hello to a reattach with the old secret")
	}
	r := w.attach(socket, w.secret)
	h := r.waitHello()
	if want := hex.EncodeToString(wire.Proof(w.secret, r.nonce)); h.Proof != want {
		t.Errorf("reattach hello's proof %q, want %q (under the new secret)", h.Proof, want)
	}
	c.waitEnd()
	if e := entryOf(r.list(), 1); e == nil || !e.Running {
		t.Fatalf("entry 1 after the reattach: %+v", e)
	}

	// A Rekey the warden cannot decode ends the link; the secret stays.
	if err := r.w.Write(wire.TRekey, 0, []byte(`{"secret":"abcd"}`)); err != nil {
		t.Fatal(err)
	}
	r.waitEnd()
	if len(r.control[wire.TRekeyed]) != 0 {
		t.Fatal("rekeyed to a malformed rekey")
	}
	r2 := w.attach(socket, w.secret)
	r2.waitHello()
}
