package server

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/stockade/stockade/internal/safedir"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/statedir"
)

// SocketEnv names the environment variable that overrides the socket path.
const SocketEnv = statedir.SocketEnv

// MaxSocketPath is the longest unix socket path the kernel takes: sun_path
// holds 108 bytes with the terminating NUL.
const MaxSocketPath = 107

// SocketPath is the socket beside a journal: journal.db → journal.sock in
// the same directory ($STOCKADE_SOCKET, when set, wins; journal "" means
// the default journal). It is "" only when there is no default journal
// (no $STOCKADE_JOURNAL and no home): statedir.ServedSocket says why.
func SocketPath(journal string) string {
	p, err := statedir.ServedSocket(journal)
	if err != nil {
		return ""
	}
	return p
}

// socketDir is what a socket's directory must be: the server's own (owned
// by its effective uid) and closed to everyone else. Its owner could move
// the socket aside and listen in its place; anyone who may enter it could
// reach the socket (which PeerAllowed would still refuse).
var socketDir = safedir.Rule{
	Op:   "server",
	What: "socket directory",
	Self: "this server",
	Deny: 0o077,
	Risk: "its owner could move the socket aside and listen in its place, and get every request (a sandbox's environment, files) meant for this server",
	Else: "or choose another socket path (--socket or $" + SocketEnv + ")",
}

// Listen listens on the unix socket at path: it checks the path's length,
// makes its directory (0700) if missing, opens it and refuses one that
// another uid owns (see socketDir) or that group or others can enter,
// removes a stale socket file (one nobody answers on; any other file is
// left alone and refused), binds, and makes the socket 0600. The socket is
// removed, bound and chmodded through the directory it opened and checked,
// never a path that could be swapped after the check: the listener keeps
// that directory open, and Close removes the socket from it.
// Call it after the journal lock is taken, so the socket file it removes is
// one this journal's earlier server left. Accepted connections are checked
// with PeerAllowed.
func Listen(path string, log *slog.Logger) (net.Listener, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := CheckSocketPath(path); err != nil {
		return nil, err
	}
	dir, name := filepath.Dir(path), filepath.Base(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, spec.Wrap(spec.CodeInvalidArgument, "server", err, "making the socket directory %s", dir)
	}
	d, err := safedir.Open(dir, socketDir)
	if err != nil {
		if spec.CodeOf(err) != "" {
			return nil, err
		}
		return nil, spec.Wrap(spec.CodeInvalidArgument, "server", err, "socket directory %s", dir)
	}
	lis, err := listenIn(d, name, path)
	if err != nil {
		_ = d.Close() // err is the one reported
		return nil, err
	}
	return &peerListener{Listener: lis, uid: uint32(os.Getuid()), log: log, dir: d, addr: &net.UnixAddr{Name: path, Net: "unix"}}, nil
}

// listenIn binds name in d: through d's descriptor when the name fits a
// socket address that way, else (a name near the length limit) by path.
func listenIn(d *safedir.Dir, name, path string) (net.Listener, error) {
	at := d.Join(name)
	if len(at) > MaxSocketPath {
		at = path
	}
	if err := removeStale(at, path); err != nil {
		return nil, err
	}
	lis, err := net.Listen("unix", at)
	if err != nil {
		return nil, spec.Wrap(spec.CodeEngine, "server", err, "listening on %s", path)
	}
	if err := os.Chmod(at, 0o600); err != nil {
		_ = lis.Close() // the Chmod error is the one reported
		return nil, spec.Wrap(spec.CodeInternal, "server", err, "making socket %s 0600", path)
	}
	return lis, nil
}

// removeStale removes the socket file at (path, as the user named it) when
// nobody answers on it. A socket that answers is another server's (a
// --socket shared with another journal); a file that is not a socket is
// not ours to remove.
func removeStale(at, path string) error {
	st, err := os.Lstat(at)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return spec.Wrap(spec.CodeInvalidArgument, "server", err, "socket path %s", path)
	}
	if st.Mode().Type() != fs.ModeSocket {
		return spec.Errorf(spec.CodeConflict, "server", "%s exists and is not a socket: refusing to replace it", path)
	}
	if c, err := net.DialTimeout("unix", at, time.Second); err == nil {
		_ = c.Close() // only asked whether it answers
		return spec.Errorf(spec.CodeConflict, "server", "another server answers on %s", path)
	}
	if err := os.Remove(at); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return spec.Wrap(spec.CodeInternal, "server", err, "removing stale socket %s", path)
	}
	return nil
}

// CheckSocketPath refuses a path the kernel cannot bind: longer than
// MaxSocketPath bytes, or empty. It touches nothing, so a command line can be
// judged before the journal is opened.
func CheckSocketPath(path string) error {
	switch {
	case path == "":
		return spec.Errorf(spec.CodeInvalidArgument, "server", "the socket path is empty")
	case len(path) > MaxSocketPath:
		return spec.Errorf(spec.CodeInvalidArgument, "server", "socket path %s is %d bytes, over the unix socket limit of %d: choose a shorter one (--socket or $%s)", path, len(path), MaxSocketPath, SocketEnv)
	}
	return nil
}

// PeerAllowed reports whether a peer with uid may talk to a server running
// as self: the same user, or root.
func PeerAllowed(peer, self uint32) bool { return peer == self || peer == 0 }

// peerListener closes every accepted connection whose peer is not allowed,
// before gRPC reads a byte of it.
type peerListener struct {
	net.Listener
	uid  uint32
	log  *slog.Logger
	dir  *safedir.Dir  // the socket's directory, open while the socket is bound
	addr *net.UnixAddr // the socket as the user named it

	closeOnce sync.Once
	closeErr  error
}

// Addr is the socket's path as the user named it (the listener may have
// bound it through its directory's descriptor).
func (l *peerListener) Addr() net.Addr { return l.addr }

// Close closes the socket, which removes its file through the directory
// still open, then the directory.
func (l *peerListener) Close() error {
	l.closeOnce.Do(func() {
		l.closeErr = errors.Join(l.Listener.Close(), l.dir.Close())
	})
	return l.closeErr
}

func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		uid, err := peerUID(c)
		if err == nil && PeerAllowed(uid, l.uid) {
			return c, nil
		}
		if err == nil {
			err = fmt.Errorf("peer uid %d is neither %d nor root", uid, l.uid)
		}
		l.log.Warn("refused a connection", "err", err)
		_ = c.Close() // refused: nothing was read or written on it
	}
}
