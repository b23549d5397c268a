package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/warden/wire"
)

// wardenBin is the binary under test, built once by TestMain exactly as it
// ships (static, no cgo). STOCKADE_WARDEN_TEST_RACE=1 builds it with the race
// detector instead (that needs cgo), to check the warden's own goroutines.
var wardenBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "stockade-warden-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	wardenBin = filepath.Join(dir, "stockade-warden")
	args := []string{"build", "-trimpath", "-ldflags=-s -w", "-o", wardenBin, "."}
	env := append(os.Environ(), "CGO_ENABLED=0")
	if os.Getenv("STOCKADE_WARDEN_TEST_RACE") == "1" {
		args = []string{"build", "-race", "-o", wardenBin, "."}
		env = append(os.Environ(), "CGO_ENABLED=1")
	}
	cmd := exec.Command("go", args...)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the warden: %v\n%s", err, out)
		os.Exit(1)
	}
	// Readable by the unprivileged uid TestUnprivileged runs it as.
	if err := os.Chmod(dir, 0o755); err != nil {

		fmt.Fprintf(os.Stderr, "building the warden: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// waitLimit only fails a hung test; no test asserts on time.
const waitLimit = 60 * time.Second

// syncBuffer is a bytes.Buffer safe for a writer goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// sub is a subprocess (a warden, or an attach bridge) with its pipes.
type sub struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.ReadCloser
	stderr *syncBuffer
}

func startSub(t testing.TB, env []string, args ...string) *sub {
	t.Helper()
	return startSubAs(t, env, nil, args...)
}

func startSubAs(t testing.TB, env []string, cred *syscall.Credential, args ...string) *sub {
	t.Helper()
	cmd := exec.Command(wardenBin, args...)
	cmd.Env = env
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		cmd.Dir = "/"
	}
	s := &sub{cmd: cmd, stderr: &syncBuffer{}}
	cmd.Stderr = s.stderr
	var err error
	if s.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if s.stdout, err = cmd.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return s
}

// wardenProc is a running warden and what the test knows of it.
type wardenProc struct {
	*sub
	t      testing.TB
	secret []byte
	env    []string
}

// startWarden runs `stockade-warden serve` with TMPDIR in a fresh temporary
// directory and, at the test's end, kills the warden and every process
// group it started.
func startWarden(t testing.TB, args ...string) *wardenProc {
	t.Helper()
	return startWardenAs(t, nil, args...)
}

// startWardenAs is startWarden with the warden running under cred (nil: the
// test's own).
func startWardenAs(t testing.TB, cred *syscall.Credential, args ...string) *wardenProc {
	t.Helper()
	// Not t.TempDir: a subtest's long name would make the socket's path
	// longer than a unix socket allows.
	tmp, err := os.MkdirTemp("", "sw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	if cred != nil {
		if err := os.Chown(tmp, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	env := append(os.Environ(), "TMPDIR="+tmp)
	w := &wardenProc{sub: startSubAs(t, env, cred, append([]string{"serve"}, args...)...), t: t, env: env}
	w.secret = bytes.Repeat([]byte{0x5a}, wire.SecretSize)
	t.Cleanup(func() {
		pid := w.cmd.Process.Pid
		for _, c := range childrenOf(pid) {
			_ = syscall.Kill(-c, syscall.SIGKILL)
		}
		_ = w.cmd.Process.Kill()
		_ = w.cmd.Wait()
		if t.Failed() {
			t.Logf("warden stderr:\n%s", w.stderr.String())
		}
	})
	return w
}

// childrenOf lists the pids whose parent is pid.
func childrenOf(pid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 2 && f[1] == strconv.Itoa(pid) {
			out = append(out, c)
		}
	}
	return out
}

// link starts the protocol on the warden's stdin/stdout and sends Init.
func (w *wardenProc) link(ini wire.Init) *conn {
	w.t.Helper()
	ini.Secret = hex.EncodeToString(w.secret)
	c := newConn(w.t, w.stdout, w.stdin)
	if err := c.w.WriteJSON(wire.TInit, 0, &ini); err != nil {
		w.t.Fatal(err)
	}
	c.first = c.waitHello()
	return c
}

// attach runs `stockade-warden attach SOCKET` and answers its challenge with
// the MAC under secret. It returns the link (after Hello when the secret is
// right; refused links end, which the caller checks with waitEnd).
func (w *wardenProc) attach(socket string, secret []byte) *conn {
	w.t.Helper()
	b := startSub(w.t, w.env, "attach", socket)
	w.t.Cleanup(func() {
		_ = b.stdin.Close()
		_ = b.cmd.Process.Kill()
		_ = b.cmd.Wait()
	})
	c := newConn(w.t, b.stdout, b.stdin)
	ch := c.waitControl(wire.TChallenge)
	var chal wire.Challenge
	if err := json.Unmarshal(ch, &chal); err != nil {
		w.t.Fatal(err)
	}
	nonce, err := wire.DecodeHex(chal.Nonce, wire.SecretSize)
	if err != nil {
		w.t.Fatal(err)
	}
	mac := hex.EncodeToString(wire.MAC(secret, nonce))
	c.nonce = bytes.Repeat([]byte{0x5a}, wire.SecretSize)
	if err := c.w.WriteJSON(wire.TAuth, 0, &wire.Auth{MAC: mac, Nonce: hex.EncodeToString(c.nonce)}); err != nil {
		w.t.Fatal(err)
	}
	return c
}

// chanState is what one process channel has received.
type chanState struct {
	started   *wire.Started
	startedAt time.Time // when started was read
	failed    *wire.SpawnFailed
	exited    *wire.Exited
	reaped    *wire.Reaped
	changes   *wire.Changes
	reapedAt  time.Time // when reaped was read
	exitedAt  time.Time // when exited was read
	// frames are the types received, in order.
	frames []wire.Type
	// base is the offset of out[0] (0, or the Resume offset).
	base     uint64
	out      []byte
	streams  [3][]byte
	inAck    uint64
	noAck    bool
	outFrame int
}

func (s *chanState) received() uint64 { return s.base + uint64(len(s.out)) }

// conn is the test's side of a link: a reader goroutine records every
// frame (and acks output unless told not to); tests wait on conditions.
type conn struct {
	t   testing.TB
	r   *wire.Reader
	w   *wire.Writer
	raw io.WriteCloser

	mu      sync.Mutex
	changed chan struct{}
	chans   map[uint32]*chanState
	control map[wire.Type][][]byte
	ended   error
	first   wire.Hello // the Hello of a warden's first link
	nonce   []byte     // the Auth's nonce, on a reattach
}

func newConn(t testing.TB, from io.Reader, to io.WriteCloser) *conn {
	c := &conn{t: t, r: wire.NewReader(from), w: wire.NewWriter(to), raw: to,
		changed: make(chan struct{}), chans: make(map[uint32]*chanState), control: make(map[wire.Type][][]byte)}
	go c.read()
	return c
}

func (c *conn) ch(n uint32) *chanState {
	s := c.chans[n]
	if s == nil {
		s = &chanState{}
		c.chans[n] = s
	}
	return s
}

func (c *conn) read() {
	for {
		f, err := c.r.Read()
		c.mu.Lock()
		if err != nil {
			c.ended = err
			close(c.changed)
			c.mu.Unlock()
			return
		}
		p := append([]byte(nil), f.Payload...)
		var ack uint64
		doAck := false
		if f.Channel == 0 {
			c.control[f.Type] = append(c.control[f.Type], p)
		} else {
			s := c.ch(f.Channel)
			s.frames = append(s.frames, f.Type)
			switch f.Type {
			case wire.TChanges:
				s.changes = new(wire.Changes)
				// Decode checks it as the runtime does.
				if err := wire.Decode(f, s.changes); err != nil {
					c.t.Errorf("%v frame on channel %d: %v", f.Type, f.Channel, err)
				}
			case wire.TStarted:
				s.started = new(wire.Started)
				s.startedAt = time.Now()
				if err := json.Unmarshal(p, s.started); err != nil {
					c.t.Errorf("%v frame on channel %d: %v", f.Type, f.Channel, err)
				}
			case wire.TSpawnFailed:
				s.failed = new(wire.SpawnFailed)
				if err := json.Unmarshal(p, s.failed); err != nil {
					c.t.Errorf("%v frame on channel %d: %v", f.Type, f.Channel, err)
				}
			case wire.TExited:
				s.exited = new(wire.Exited)
				s.exitedAt = time.Now()
				if err := json.Unmarshal(p, s.exited); err != nil {
					c.t.Errorf("%v frame on channel %d: %v", f.Type, f.Channel, err)
				}
				if s.reaped == nil {
					c.t.Errorf("exited before reaped on channel %d", f.Channel)
				}
				if n := len(s.frames); n < 2 || s.frames[n-2] != wire.TChanges {
					c.t.Errorf("exited on channel %d not right after changes: %v", f.Channel, s.frames)
				}
			case wire.TReaped:
				s.reaped = new(wire.Reaped)
				s.reapedAt = time.Now()
				if err := json.Unmarshal(p, s.reaped); err != nil {
					c.t.Errorf("%v frame on channel %d: %v", f.Type, f.Channel, err)
				}
			case wire.TInAck:
				s.inAck = wire.Offset(f)
			case wire.TOut:
				s.out = append(s.out, p[1:]...)
				s.streams[p[0]] = append(s.streams[p[0]], p[1:]...)
				s.outFrame++
				if !s.noAck {
					ack, doAck = s.received(), true
				}
			default:
				c.t.Errorf("unexpected %v frame on channel %d", f.Type, f.Channel)
			}
		}
		close(c.changed)
		c.changed = make(chan struct{})
		c.mu.Unlock()
		if doAck {
			// A runtime gone shows in the next read, which ends this loop.
			_ = c.w.WriteOffset(wire.TAck, f.Channel, ack)
		}
	}
}

// waitFor waits until cond (called with c.mu held) holds. A cond that
// fails its test (t.Fatal ends its goroutine) releases the lock on the way
// out, so the failure is reported instead of every later test waiting on
// the lock until the binary's timeout.
func (c *conn) waitFor(what string, cond func() bool) {
	c.t.Helper()
	limit := time.After(waitLimit)
	for {
		ok, ch, ended := c.check(cond)
		if ok {
			return
		}
		if ended != nil {
			c.t.Fatalf("waiting for %s: the link ended: %v", what, ended)
		}
		select {
		case <-ch:
		case <-limit:
			c.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// check calls cond with c.mu held, and returns what waitFor needs.
func (c *conn) check(cond func() bool) (ok bool, changed chan struct{}, ended error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return cond(), c.changed, c.ended
}

// waitEnd waits until the warden ends the link (EOF or an error).
func (c *conn) waitEnd() {
	c.t.Helper()
	limit := time.After(waitLimit)
	for {
		c.mu.Lock()
		ch, ended := c.changed, c.ended
		c.mu.Unlock()
		if ended != nil {
			return
		}
		select {
		case <-ch:
		case <-limit:
			c.t.Fatal("timed out waiting for the link to end")
		}
	}
}

func (c *conn) waitControl(t wire.Type) []byte {
	c.t.Helper()
	var p []byte
	c.waitFor(t.String(), func() bool {
		if q := c.control[t]; len(q) > 0 {
			p, c.control[t] = q[0], q[1:]
			return true
		}
		return false
	})
	return p
}

func (c *conn) waitHello() wire.Hello {
	c.t.Helper()
	var h wire.Hello
	if err := json.Unmarshal(c.waitControl(wire.THello), &h); err != nil {
		c.t.Fatal(err)
	}
	if h.Version != wire.Version || h.PID <= 0 || h.Window <= 0 || h.StdinWindow <= 0 {
		c.t.Fatalf("hello %+v", h)
	}
	return h
}

func (c *conn) list() wire.Table {
	c.t.Helper()
	if err := c.w.Write(wire.TList, 0); err != nil {
		c.t.Fatal(err)
	}
	var tb wire.Table
	if err := json.Unmarshal(c.waitControl(wire.TTable), &tb); err != nil {
		c.t.Fatal(err)
	}
	return tb
}

func entryOf(tb wire.Table, ch uint32) *wire.Entry {
	for i := range tb.Processes {
		if tb.Processes[i].Channel == ch {
			return &tb.Processes[i]
		}
	}
	return nil
}

func (c *conn) spawn(ch uint32, sp wire.Spawn) {
	c.t.Helper()
	if sp.ID == "" {
		sp.ID = fmt.Sprintf("p%d", ch)
	}
	if err := c.w.WriteJSON(wire.TSpawn, ch, &sp); err != nil {
		c.t.Fatal(err)
	}
}

// setNoAck stops (or resumes) the automatic Ack of ch's output.
func (c *conn) setNoAck(ch uint32, v bool) {
	c.mu.Lock()
	c.ch(ch).noAck = v
	c.mu.Unlock()
}

func (c *conn) waitStarted(ch uint32) wire.Started {
	c.t.Helper()
	var st wire.Started
	c.waitFor(fmt.Sprintf("started on %d", ch), func() bool {
		s := c.ch(ch)
		if s.failed != nil {
			c.t.Fatalf("channel %d: spawn failed: %+v", ch, *s.failed)
		}
		if s.started != nil {
			st = *s.started
			return true
		}
		return false
	})
	return st
}

// waitExited waits for Exited and for every output byte up to its total,
// and returns both.
func (c *conn) waitExited(ch uint32) (wire.Exited, *chanState) {
	c.t.Helper()
	var x wire.Exited
	var st chanState
	c.waitFor(fmt.Sprintf("exit on %d", ch), func() bool {
		s := c.ch(ch)
		if s.exited != nil && s.received() >= s.exited.Output {
			x, st = *s.exited, *s
			return true
		}
		return false
	})
	if st.received() != x.Output {
		c.t.Fatalf("channel %d: received %d bytes, exited says %d", ch, st.received(), x.Output)
	}
	return x, &st
}
