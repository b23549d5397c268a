package warden

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stockade/stockade/warden/wire"
)

// defaultPath is searched when the merged environment has no PATH (Docker's
// default for a container).
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// spawnError is a spawn that failed before the child ran, as a shell would
// report it: 127 not found, 126 found but not runnable.
type spawnError struct {
	code int
	text string
}

func (e *spawnError) Error() string { return e.text }

func spawnFailed(name string, err error) *spawnError {
	code := 126
	if errors.Is(err, unix.ENOENT) {
		code = 127
	}
	return &spawnError{code: code, text: fmt.Sprintf("%s: %v", name, err)}
}

// mergeEnv is base with each NAME=value of extra replacing base's entry of
// that name, or appended (later entries win).
func mergeEnv(base, extra []string) []string {
	env := append([]string(nil), base...)
	at := make(map[string]int, len(env))
	for i, e := range env {
		k, _, _ := strings.Cut(e, "=")
		at[k] = i
	}
	for _, e := range extra {
		k, _, _ := strings.Cut(e, "=")
		if i, ok := at[k]; ok {
			env[i] = e
			continue
		}
		at[k] = len(env)
		env = append(env, e)
	}
	return env
}

func getenv(env []string, name string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, _ := strings.Cut(env[i], "="); k == name {
			return v, true
		}
	}
	return "", false
}

// lookPath resolves a name without a slash against PATH as a shell does: the
// first executable regular file wins; a match that is not executable makes
// the failure 126 rather than 127. Relative PATH entries are taken from the
// child's directory, where the child will run.
func lookPath(name string, env []string, dir string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path, ok := getenv(env, "PATH")
	if !ok {
		path = defaultPath
	}
	var denied error
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		cand := filepath.Join(d, name)
		if !filepath.IsAbs(cand) {
			cand = filepath.Join(dir, cand)
		}
		fi, err := os.Stat(cand)
		if err != nil || fi.IsDir() {
			continue
		}
		if fi.Mode()&0o111 == 0 || unix.Access(cand, unix.X_OK) != nil {
			denied = unix.EACCES
			continue
		}
		return cand, nil
	}
	if denied != nil {
		return "", spawnFailed(name, denied)
	}
	return "", &spawnError{code: 127, text: name + ": not found on PATH"}
}

// start forks and execs sp's child. The caller holds s.forkMu for reading
// (not s.mu); other spawns may run meanwhile.
func (s *state) start(ch uint32, sp *wire.Spawn) (*proc, error) {
	env := mergeEnv(s.env, sp.Env)
	dir := sp.Dir
	if dir == "" {
		dir = s.cwd
	} else if err := s.sys.dir(dir); err != nil {
		return nil, err
	}
	path, err := s.sys.resolve(sp.Argv[0], env, dir)
	if err != nil {
		return nil, err
	}
	p := &proc{ch: ch, id: sp.ID, tty: sp.TTY, sending: true, spawned: time.Now()}
	// toClose are the child's ends, closed in the warden once forked (a
	// pipe or pty whose child end the warden kept open would never end).
	// The close errors of these pipe and pty fds, ours and valid, carry
	// nothing to act on; they are not checked here or in keep's closes.
	var toClose []func()
	var keep []*os.File // the warden's ends, closed if the spawn fails
	fail := func(err error) (*proc, error) {
		for _, c := range toClose {
			c()
		}
		for _, f := range keep {
			_ = f.Close()
		}
		return nil, err
	}
	attr := &syscall.ProcAttr{Dir: dir, Env: env, Sys: &syscall.SysProcAttr{}}
	if sp.TTY {
		master, slave, err := openPTY(sp.Rows, sp.Cols)
		if err != nil {
			return fail(&spawnError{code: 126, text: "terminal: " + err.Error()})
		}
		keep = append(keep, master)
		toClose = append(toClose, func() { _ = unix.Close(slave) })
		attr.Files = []uintptr{uintptr(slave), uintptr(slave), uintptr(slave)}
		// A session of its own with the pts as controlling terminal (fd 0
		// in the child); setsid also makes it its group's leader.
		attr.Sys.Setsid = true
		attr.Sys.Setctty = true
		attr.Sys.Ctty = 0
		p.master = master
		p.outs = []*os.File{master}
		if sp.Stdin {
			p.stdin = master
		}
	} else {
		outR, outW, err := os.Pipe()
		if err != nil {
			return fail(&spawnError{code: 126, text: err.Error()})
		}
		keep = append(keep, outR)
		toClose = append(toClose, func() { _ = outW.Close() })
		errR, errW, err := os.Pipe()
		if err != nil {
			return fail(&spawnError{code: 126, text: err.Error()})
		}
		keep = append(keep, errR)
		toClose = append(toClose, func() { _ = errW.Close() })
		var in *os.File
		if sp.Stdin {
			inR, inW, err := os.Pipe()
			if err != nil {
				return fail(&spawnError{code: 126, text: err.Error()})
			}
			keep = append(keep, inW)
			toClose = append(toClose, func() { _ = inR.Close() })
			in, p.stdin = inR, inW
		} else if s.devNull != nil {
			in = s.devNull
		} else {
			in, err = os.Open(os.DevNull)
			if err != nil {
				return fail(&spawnError{code: 126, text: err.Error()})
			}
			toClose = append(toClose, func() { _ = in.Close() })
		}
		// Fd puts the child's ends in blocking mode, as a child expects.
		attr.Files = []uintptr{in.Fd(), outW.Fd(), errW.Fd()}
		attr.Sys.Setpgid = true
		p.outs = []*os.File{outR, errR}
	}
	pid, track, err := s.sys.fork(path, sp, attr)
	if err != nil {
		var se *spawnError
		if errors.As(err, &se) {
			return fail(se)
		}
		return fail(spawnFailed(sp.Argv[0], err))
	}
	for _, c := range toClose {
		c()
	}
	p.pid, p.track = pid, track
	s.sys.started(pid)
	return p, nil
}

// register makes a started p known and starts its goroutines. The caller
// holds s.mu.
func (s *state) register(p *proc) {
	p.window = sync.NewCond(&s.mu)
	p.inWake = sync.NewCond(&s.mu)
	s.procs[p.ch] = p
	s.byPID[p.pid] = p
	p.open = len(p.outs)
	for i, f := range p.outs {
		go s.pump(p, f, byte(i+1))
	}
	if p.stdin != nil {
		go s.feed(p)
	}
}

// bufPool holds read buffers, taken only once a pipe is readable, so a
// thousand idle children hold no buffer each.
var bufPool = sync.Pool{New: func() any { b := make([]byte, wire.MaxData); return &b }}

// pump reads one of p's output streams into p's buffer, but only while p's
// window (and the total cap) has room: a full window stops reading this
// pipe, the pipe fills, and the child (only this child) blocks. The space is
// measured and the read done under s.mu once the pipe is readable, so a
// stream waiting for data holds no share of the window from the other.
func (s *state) pump(p *proc, f *os.File, stream byte) {
	rc, err := f.SyscallConn()
	if err != nil {
		logf("process %s: stream %d: %v", p.id, stream, err)
	}
	for err == nil {
		s.mu.Lock()
		room := s.waitSpace(p)
		s.mu.Unlock()
		if room == 0 {
			break
		}
		var rerr error
		err = rc.Read(func(fd uintptr) bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			n := s.room(p)
			if n == 0 {
				// The other stream took the room: wait for it again.
				if p.forgotten {
					rerr = os.ErrClosed
				}
				return true
			}
			// A stream whose last read filled its buffer is read
			// straight into p's output ring (s.mu is held), one copy
			// fewer; any other through a pooled buffer, so that a child
			// that writes a little now and then does not make its ring
			// grow to the read size.
			direct := p.fullReads[stream-1]
			var buf []byte
			if direct {
				buf = p.tail(int(n), s.window)
			} else {
				bp := bufPool.Get().(*[]byte)
				defer bufPool.Put(bp)
				buf = (*bp)[:n]
			}
			for {
				m, e := unix.Read(int(fd), buf)
				switch {
				case e == unix.EINTR:
					continue
				case e == unix.EAGAIN:
					return false
				case e != nil:
					rerr = e
				case m == 0:
					rerr = errEOF
				default:
					p.fullReads[stream-1] = m == len(buf)
					if direct {
						s.total += p.commit(stream, m)
					}
					for b := buf[:m]; !direct && len(b) > 0; {
						k := copy(p.tail(len(b), s.window), b)
						s.total += p.commit(stream, k)
						b = b[k:]
					}
					s.kick(p)
				}
				return true
			}
		})
		if err == nil {
			// EIO from a pty master is its end: every slave fd closed.
			err = rerr
		}
	}
	if !errors.Is(err, errEOF) && !errors.Is(err, unix.EIO) && !errors.Is(err, os.ErrClosed) {
		logf("process %s: reading stream %d: %v", p.id, stream, err)
	}
	_ = f.Close() // a read end: nothing to lose

	s.mu.Lock()
	p.open--
	s.maybeEnded(p)
	s.mu.Unlock()
}

var errEOF = errors.New("end of stream")

// waitSpace waits until p may read more and returns how much (0: p was
// forgotten). The caller holds s.mu.
func (s *state) waitSpace(p *proc) int64 {
	for {
		if p.forgotten {
			return 0
		}
		if int64(p.read-p.acked) >= s.window {
			p.window.Wait()
			continue
		}
		if s.total >= s.capTotal {
			s.space.Wait()
			continue
		}
		return s.room(p)
	}
}

// room is how much p may read now. The caller holds s.mu.
func (s *state) room(p *proc) int64 {
	if p.forgotten {
		return 0
	}
	return max(0, min(s.window-int64(p.read-p.acked), s.capTotal-s.total, int64(wire.MaxData)))
}

// feed writes what the runtime sent for p's stdin to the child and counts it
// written for InAck. A child that stopped reading (EPIPE, or EIO on a pty)
// gets nothing more: its data is dropped but still acknowledged, so the link
// never wedges on it.
func (s *state) feed(p *proc) {
	s.mu.Lock()
	for {
		for len(p.in) == 0 && !p.closeIn && !p.forgotten {
			p.inWake.Wait()
		}
		if p.forgotten {
			break
		}
		if len(p.in) == 0 {
			// closeIn with everything written (for a TTY the master
			// stays: it is also the output).
			if !p.tty {
				s.mu.Unlock()
				// The child sees EOF; a close error of our pipe end
				// carries nothing to act on.
				_ = p.stdin.Close()
				return
			}
			break
		}
		data := p.in
		p.in = nil
		broken := p.inBroken
		s.mu.Unlock()
		if !broken {
			if _, err := p.stdin.Write(data); err != nil {
				s.mu.Lock()
				if !p.inBroken && !p.forgotten && !errors.Is(err, unix.EPIPE) && !errors.Is(err, unix.EIO) && !errors.Is(err, os.ErrClosed) {
					logf("process %s: writing stdin: %v", p.id, err)
				}
				p.inBroken = true
				s.mu.Unlock()
			}
		}
		s.mu.Lock()
		p.inWritten += uint64(len(data))
		s.kick(p)
	}
	s.mu.Unlock()
}
