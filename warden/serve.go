package warden

import (
	"crypto/hmac"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stockade/stockade/warden/wire"
)

const (
	// authTimeout bounds a reattach handshake (Challenge → Auth).
	authTimeout = 5 * time.Second
	// maxHandshakes bounds handshakes in progress: a workload that opens
	// connections by the thousand costs the warden a few buffers, no more.
	maxHandshakes = 4
)

// serve is `stockade-warden serve`: the first link on stdin/stdout, reattach
// links on a unix socket; it returns only if the first link ends before an
// Init (no secret, no process: nothing can ever use this warden).
func serve(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	capTotal := fs.Int64("buffer-cap", defaultBufferCap, "`bytes` of unacknowledged output held for all processes together")
	root := fs.String("workspace", wire.WorkspaceRoot, "the `directory` whose changes are tracked (tests only)")
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 || *capTotal < 1 || !filepath.IsAbs(*root) {
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	workspaceRoot = filepath.Clean(*root)
	openAnchors()

	// Same uid as the workload: without this the workload could ptrace the
	// warden or open its fds through /proc/<pid>/fd.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		logf("PR_SET_DUMPABLE: %v", err)
	}
	// Two Ps: more cost a streaming child's output ~10% more CPU (idle Ps
	// spin looking for work). A fork holds its P until the child's execve
	// (see maxSpawns): two at once stall the link for that long.
	runtime.GOMAXPROCS(2)
	// SIGPIPE is caught, not ignored: Go then turns a write to a closed
	// stdout into EPIPE instead of dying, and a caught signal is reset to
	// its default in every child at exec (an ignored one would be
	// inherited, and `yes | head` would misbehave inside the sandbox).
	// TERM, INT and HUP are caught and only logged: the warden outlives
	// the runtime's group kills and ends with its container.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, unix.SIGPIPE, unix.SIGTERM, unix.SIGINT, unix.SIGHUP)
	go func() {
		for sig := range sigs {
			if sig != unix.SIGPIPE {
				logf("ignoring %v", sig)
			}
		}
	}()

	s := newState(*capTotal, osProcs{}, os.Getpid())
	go s.reaper()
	s.listen()

	in, out := firstLink()
	// Closing the link's fds ends it; their close errors carry nothing to
	// act on (here and for a reattached link's connection below).
	if err := s.first(in, out, func() { _ = in.Close(); _ = out.Close() }); err != nil {
		logf("no init: %v", err)
		return 1
	}
	// The link is lost: children keep running, the socket takes reattaches.
	select {}
}

// first serves the first link, which must open with Init, until it ends;
// an error says why it had no Init.
func (s *state) first(in io.Reader, out io.Writer, closer func()) error {
	r, w := wire.NewReader(in), wire.NewWriter(out)
	f, err := r.Read()
	var ini wire.Init
	if err == nil && (f.Type != wire.TInit || f.Channel != 0) {
		err = violation("first frame is %v on channel %d, not init", f.Type, f.Channel)
	}
	if err == nil {
		err = wire.Decode(f, &ini)
	}
	if err != nil {
		closer()
		return err
	}
	secret, _ := wire.DecodeHex(ini.Secret, wire.SecretSize)

	l := newLink(s, r, w, closer, true)
	s.mu.Lock()
	if s.stopped || s.secret != nil {
		s.mu.Unlock()
		closer()
		return violation("a second first link")
	}
	s.secret = secret
	if ini.Window > 0 {
		s.window = int64(ini.Window)
	}
	if ini.StdinWindow > 0 {
		s.stdinWindow = int64(ini.StdinWindow)
	}
	s.link = l
	l.queue(wire.THello, 0, s.hello())
	s.mu.Unlock()
	l.serve()
	return nil
}

// firstLink moves stdin and stdout, the first link, to fds of their own in
// Go's poller (a read blocked on a quiet link takes no thread, and Close
// unblocks it) and puts /dev/null on fds 0 and 1, so that no later open
// takes 0 or 1 once the link is closed. (Closing does not end a Docker
// exec's stream: Docker 20.10 keeps it until the exec's process exits, so a
// runtime learns of a link the warden ended by its silence, not an EOF.)
func firstLink() (in, out *os.File) {
	move := func(fd int, name string) *os.File {
		nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			logf("%s: %v", name, err)
			nfd = fd
		} else if null, err := unix.Open(os.DevNull, unix.O_RDWR|unix.O_CLOEXEC, 0); err == nil {
			if err := unix.Dup2(null, fd); err != nil {
				logf("%s: /dev/null in its place: %v", name, err)
			}
			_ = unix.Close(null) // dup'ed (or not): this fd is done either way
		}
		if err := unix.SetNonblock(nfd, true); err != nil {
			logf("%s: %v", name, err)
		}
		return os.NewFile(uintptr(nfd), name)
	}
	return move(0, "stdin"), move(1, "stdout")
}

// hello is the Hello of a link. The caller holds s.mu.
func (s *state) hello() *wire.Hello {
	return &wire.Hello{Version: wire.Version, PID: s.pid, Window: int(s.window), StdinWindow: int(s.stdinWindow), Socket: s.socket}
}

// listen opens the reattach socket, $TMPDIR/.stockade-warden-<pid>.sock,
// mode 0600. Without it the warden still serves its first link (Hello
// reports no socket).
func (s *state) listen() {
	dir := os.Getenv("TMPDIR")
	if dir == "" {
		dir = "/tmp"
	}
	path := filepath.Join(dir, ".stockade-warden-"+strconv.Itoa(os.Getpid())+".sock")
	if len(path) >= 108 {
		logf("socket path %s too long: no reattach", path)
		return
	}
	// A stale socket of an earlier warden with this pid would make bind
	// fail.
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		logf("removing a stale %s: %v", path, err)
	}
	// The umask makes the socket 0600 from its creation (no window where
	// it is wider); no child exists yet to inherit the narrower umask.
	old := unix.Umask(0o177)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	unix.Umask(old)
	if err != nil {
		logf("no reattach: %v", err)
		return
	}
	s.socket = path
	go s.accept(ln)
}

func (s *state) accept(ln *net.UnixListener) {
	slots := make(chan struct{}, maxHandshakes)
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			logf("reattach socket: %v", err)
			time.Sleep(time.Second)
			continue
		}
		select {
		case slots <- struct{}{}:
			go func() {
				l := s.handshake(c)
				<-slots
				if l != nil {
					l.serve()
				}
			}()
		default:
			logf("reattach refused: %d handshakes in progress", maxHandshakes)
			_ = c.Close() // refused; nothing to act on
		}
	}
}

// handshake challenges a connection; one that answers with the MAC of the
// nonce under the Init secret becomes the link (returned, to be served).
// Anything else closes only that connection.
func (s *state) handshake(c net.Conn) *link {
	s.mu.Lock()
	secret, stopped := s.secret, s.stopped
	s.mu.Unlock()
	if stopped {
		_ = c.Close() // refused; nothing to act on
		return nil
	}
	if secret == nil {
		logf("reattach refused: no init yet")
		_ = c.Close() // refused; nothing to act on
		return nil
	}
	nonce := make([]byte, wire.SecretSize)
	rand.Read(nonce)
	// Without the deadline a peer that never answers would hold a
	// handshake slot for good: a connection that cannot have one is
	// refused.
	err := c.SetDeadline(time.Now().Add(authTimeout))
	r, w := wire.NewReader(c), wire.NewWriter(c)
	if err == nil {
		err = w.WriteJSON(wire.TChallenge, 0, &wire.Challenge{Nonce: hex.EncodeToString(nonce)})
	}
	var f wire.Frame
	if err == nil {
		f, err = r.Read()
	}
	if err == nil && (f.Type != wire.TAuth || f.Channel != 0) {
		err = violation("%v frame instead of auth", f.Type)
	}
	var auth wire.Auth
	if err == nil {
		err = wire.Decode(f, &auth)
	}
	var theirs []byte
	if err == nil {
		mac, _ := wire.DecodeHex(auth.MAC, len(wire.MAC(secret, nonce)))
		if !hmac.Equal(mac, wire.MAC(secret, nonce)) {
			err = violation("wrong MAC")
		}
		theirs, _ = wire.DecodeHex(auth.Nonce, wire.SecretSize)
	}
	if err == nil {
		// The link outlives the handshake's deadline; one left set would
		// end it authTimeout from now.
		err = c.SetDeadline(time.Time{})
	}
	if err != nil {
		logf("reattach refused: %v", err)
		_ = c.Close() // refused; nothing to act on
		return nil
	}
	l := newLink(s, r, w, func() { _ = c.Close() }, false)
	s.mu.Lock()
	if !hmac.Equal(secret, s.secret) {
		// A Rekey came during this handshake: its answer was made under
		// the secret the runtime has just replaced.
		s.mu.Unlock()
		logf("reattach refused: the secret changed during its handshake")
		_ = c.Close() // refused; nothing to act on
		return nil
	}
	s.takeOver(l)
	hello := s.hello()
	hello.Proof = hex.EncodeToString(wire.Proof(secret, theirs))
	l.queue(wire.THello, 0, hello)
	s.mu.Unlock()
	logf("reattached")
	return l
}
