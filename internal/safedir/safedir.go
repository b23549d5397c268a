// Package safedir opens a directory the runtime keeps its journal or its
// socket in, and refuses it unless it is the runtime's own: owned by the
// process's effective uid (a client's rule accepts root's too) and closed
// to other users' writes, as ssh and containerd insist of theirs. Another
// user who owns the directory, or may write in it, can move what is there
// aside and put their own in its place: a socket an impostor listens on, a
// journal that says what did not happen, a link where a file is written.
//
// The check is made on the opened directory (fstat of a descriptor opened
// with O_DIRECTORY|O_NOFOLLOW), not on a path that could be swapped between
// the check and the use, and Join names a file through that descriptor
// (/proc/self/fd/N/name on Linux): what is then bound, made or opened there
// lands in the directory that was checked, whatever happens to its path.
// Its parents may be links (XDG_RUNTIME_DIR often is); the directory itself
// may not, since a link names a directory its maker chose.
//
// Every refusal is a *spec.Error, code invalid_argument, that names the
// directory, its owner or mode, the expected one and what to do; its cause
// (ErrForeign, ErrWritable, ErrSymlink) says which.
package safedir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"github.com/stockade/stockade/spec"
)

var (
	// ErrForeign is the cause when the directory is owned by a uid the
	// rule does not accept.
	ErrForeign = errors.New("directory owned by another user")
	// ErrWritable is the cause when the directory grants group or others a
	// permission the rule denies.
	ErrWritable = errors.New("directory open to other users")
	// ErrSymlink is the cause when the directory's own path is a link.
	ErrSymlink = errors.New("directory is a symbolic link")
)

// Rule says what a directory must be, and how a refusal reads.
type Rule struct {
	// Op prefixes the error, e.g. "server" or "journal.open".
	Op string
	// What names the directory in messages, e.g. "socket directory".
	What string
	// Self names this process in messages, e.g. "this server".
	Self string
	// Deny holds the permission bits group and others must not have:
	// 0o077 (no access) or 0o022 (no write).
	Deny fs.FileMode
	// Root accepts a directory owned by root as well (a client talking to
	// a server that runs as root).
	Root bool
	// Risk says what the directory's owner could do, e.g. "its owner could
	// move the socket aside and listen in its place".
	Risk string
	// Else is the remedy besides chown/chmod, e.g. "or choose another
	// socket path (--socket or $STOCKADE_SOCKET)".
	Else string
}

// Dir is a directory opened and checked. Keep it open while names Join
// returns are used, and close it after.
type Dir struct {
	f    *os.File
	path string
	via  string // the descriptor's path in /proc, or path where there is none
}

// Open opens the directory at path and checks it against r. A path that
// cannot be opened (missing, not a directory, not searchable) returns the
// *fs.PathError as it is, for the caller to judge.
func Open(path string, r Rule) (*Dir, error) {
	f, err := openDir(path)
	if err != nil {
		if fi, lerr := os.Lstat(path); lerr == nil && fi.Mode().Type() == fs.ModeSymlink {
			to, _ := os.Readlink(path) // named when it can be
			return nil, spec.Wrap(spec.CodeInvalidArgument, r.Op, ErrSymlink,
				"%s %s is a symbolic link (to %s): name the directory itself %s", r.What, path, to, r.Else)
		}
		return nil, err
	}
	d := &Dir{f: f, path: path, via: path}
	if err := d.check(r); err != nil {
		_ = f.Close() // refused: err is the one reported
		return nil, err
	}
	d.via = viaProc(f, path)
	return d, nil
}

func (d *Dir) check(r Rule) error {
	fi, err := d.f.Stat()
	if err != nil {
		return err
	}
	self := uint32(os.Geteuid())
	if uid, ok := ownerOf(fi); ok && uid != self && (!r.Root || uid != 0) {
		want := fmt.Sprintf("uid %d that %s runs as", self, r.Self)
		if r.Root && self != 0 {
			want += " nor root (uid 0)"
		}
		return spec.Wrap(spec.CodeInvalidArgument, r.Op, ErrForeign,
			"%s %s is owned by uid %d, not by %s: %s; chown it (chown %d %s) %s",
			r.What, d.path, uid, want, r.Risk, self, d.path, r.Else)
	}
	if perm := fi.Mode().Perm(); perm&r.Deny != 0 {
		shown := uint32(perm)
		if fi.Mode()&fs.ModeSticky != 0 {
			shown |= 0o1000
		}
		return spec.Wrap(spec.CodeInvalidArgument, r.Op, ErrWritable,
			"%s %s is mode %04o: group and others must have no %s access; chmod it (chmod %s %s) %s",
			r.What, d.path, shown, denied(r.Deny), chmodArg(r.Deny), d.path, r.Else)
	}
	return nil
}

// Path is the directory's path as Open was given it.
func (d *Dir) Path() string { return d.path }

// Join names name in the checked directory through its descriptor where
// the system can (Linux's /proc/self/fd), else by the directory's path.
func (d *Dir) Join(name string) string { return d.via + "/" + name }

// Anchored reports whether Join names files through the descriptor.
func (d *Dir) Anchored() bool { return d.via != d.path }

// Close closes the directory: names Join returned no longer resolve.
func (d *Dir) Close() error { return d.f.Close() }

// ownerOf is the directory's owner, where the system says.
func ownerOf(fi fs.FileInfo) (uint32, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Uid, true
}

// viaProc is the descriptor's name in /proc/self/fd when that names this
// very directory, else path.
func viaProc(f *os.File, path string) string {
	via := fmt.Sprintf("/proc/self/fd/%d", f.Fd())
	at, err := os.Stat(via)
	if err != nil {
		return path
	}
	fi, err := f.Stat()
	if err != nil || !os.SameFile(at, fi) {
		return path
	}
	return via
}

// denied says which access deny takes away: "write" for 0o022, "read,
// write or search" for 0o077.
func denied(deny fs.FileMode) string {
	var kinds []string
	for _, k := range []struct {
		bit  fs.FileMode
		name string
	}{{0o044, "read"}, {0o022, "write"}, {0o011, "search"}} {
		if deny&k.bit != 0 {
			kinds = append(kinds, k.name)
		}
	}
	switch len(kinds) {
	case 0:
		return "such"
	case 1:
		return kinds[0]
	}
	return strings.Join(kinds[:len(kinds)-1], ", ") + " or " + kinds[len(kinds)-1]
}

// chmodArg is chmod's symbolic mode that takes deny away from group and
// others: go-w, go-rwx.
func chmodArg(deny fs.FileMode) string {
	var b strings.Builder
	b.WriteString("go-")
	for _, k := range []struct {
		bit fs.FileMode
		c   byte
	}{{0o044, 'r'}, {0o022, 'w'}, {0o011, 'x'}} {
		if deny&k.bit != 0 {
			b.WriteByte(k.c)
		}
	}
	return b.String()
}
