package server

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stockade/stockade/spec"
)

// SocketEnv names the environment variable that overrides the socket path.
const SocketEnv = "STOCKADE_SOCKET"

// MaxSocketPath is the longest unix socket path the kernel takes: sun_path
// holds 108 bytes with the terminating NUL.
const MaxSocketPath = 107

// SocketPath is the socket beside a journal: journal.db → journal.sock in
// the same directory ($STOCKADE_SOCKET, when set, wins).
func SocketPath(journal string) string {
	if env := os.Getenv(SocketEnv); env != "" {
		return env
	}
	return strings.TrimSuffix(journal, filepath.Ext(journal)) + ".sock"
}

// Listen listens on the unix socket at path: it checks the path's length,
// makes its directory (0700) if missing and refuses one that group or
// others can enter, removes a stale socket file (one nobody answers on; any
// other file is left alone and refused), binds, and makes the socket 0600.
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
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, spec.Wrap(spec.CodeInvalidArgument, "server", err, "making the socket directory %s", dir)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return nil, spec.Wrap(spec.CodeInvalidArgument, "server", err, "socket directory %s", dir)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "server", "socket directory %s is mode %04o: it must be 0700 (no access for group or others)", dir, st.Mode().Perm())
	}
	if err := removeStale(path); err != nil {
		return nil, err
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, spec.Wrap(spec.CodeEngine, "server", err, "listening on %s", path)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = lis.Close() // the Chmod error is the one reported
		return nil, spec.Wrap(spec.CodeInternal, "server", err, "making socket %s 0600", path)
	}
	return &peerListener{Listener: lis, uid: uint32(os.Getuid()), log: log}, nil
}

// removeStale removes a socket file nobody answers on. A socket that
// answers is another server's (a --socket shared with another journal);
// a file that is not a socket is not ours to remove.
func removeStale(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return spec.Wrap(spec.CodeInvalidArgument, "server", err, "socket path %s", path)
	}
	if st.Mode().Type() != fs.ModeSocket {
		return spec.Errorf(spec.CodeConflict, "server", "%s exists and is not a socket: refusing to replace it", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		_ = c.Close() // only asked whether it answers
		return spec.Errorf(spec.CodeConflict, "server", "another server answers on %s", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
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
	uid uint32
	log *slog.Logger
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
