package warden

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// exchange exchanges a workspace's work directory and a rollback's staging
// directory in one rename (renameat2 RENAME_EXCHANGE): the checkpoint
// appears in place of work whole. It is the rollback's one privileged
// step, and runs as uid 0 without capabilities in a one-off container of
// its own (never in the workload: no uid-0 code runs from the workspace
// volume), from a copy of this binary in that container's own layer,
// while every process of the sandbox is killed or frozen. Before it
// renames anything it checks, through a directory fd opened without
// following links, that the workspace is still what only root could have
// made it: the root root-owned 0755, the warden's directory root-owned
// 0755, its binary root-owned 0111, work and the staging directory real
// directories (not links). It needs to enter neither (they are the
// sandbox user's, and uid 0 here has no capability to): a rename in the
// root-owned workspace needs only its write bit. Exit 0; 1 on a failure;
// 2 on bad arguments; 4 when a check fails (nothing was renamed).
func exchange(workspace, staging string) int {
	if !strings.HasPrefix(workspace, "/") || !plainName(staging) || staging == "work" {
		fmt.Fprintf(os.Stderr, "stockade-warden exchange: a workspace path and a plain name wanted, not %q %q\n", workspace, staging)
		return 2
	}
	ws, err := unix.Open(workspace, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		fmt.Fprintf(os.Stderr, "stockade-warden exchange: opening %s: %v\n", workspace, err)
		return 1
	}
	defer func() { _ = unix.Close(ws) }() // read only
	if err := checkWorkspace(ws, workspace, staging); err != nil {
		fmt.Fprintf(os.Stderr, "stockade-warden exchange: refused: %v\n", err)
		return 4
	}
	if err := unix.Renameat2(ws, "work", ws, staging, unix.RENAME_EXCHANGE); err != nil {
		fmt.Fprintf(os.Stderr, "stockade-warden exchange: exchanging %s/work and %s/%s: %v\n", workspace, workspace, staging, err)
		return 1
	}
	return 0
}

// plainName: one entry's name, no separator, not . or ..
func plainName(n string) bool {
	return n != "" && n != "." && n != ".." && !strings.ContainsAny(n, "/\x00")
}

// checkWorkspace is exchange's readback, all of it relative to ws.
func checkWorkspace(ws int, workspace, staging string) error {
	var st unix.Stat_t
	if err := unix.Fstat(ws, &st); err != nil {
		return fmt.Errorf("%s: %w", workspace, err)
	}
	if err := want(workspace, &st, unix.S_IFDIR, 0, 0o755); err != nil {
		return err
	}
	if err := unix.Fstatat(ws, ".stockade", &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("%s/.stockade: %w", workspace, err)
	}
	if err := want(workspace+"/.stockade", &st, unix.S_IFDIR, 0, 0o755); err != nil {
		return err
	}
	for _, n := range []string{"work", staging} {
		if err := unix.Fstatat(ws, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("%s/%s: %w", workspace, n, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return fmt.Errorf("%s/%s is not a directory (mode %o)", workspace, n, st.Mode)
		}
	}
	if err := unix.Fstatat(ws, ".stockade/stockade-warden", &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("%s/.stockade/stockade-warden: %w", workspace, err)
	}
	if err := want(workspace+"/.stockade/stockade-warden", &st, unix.S_IFREG, 0, 0o111); err != nil {
		return err
	}
	return nil
}

// want checks one entry's kind, owner and permission bits.
func want(name string, st *unix.Stat_t, kind, uid, perm uint32) error {
	if st.Mode&unix.S_IFMT != kind || st.Uid != uid || st.Mode&0o7777 != perm {
		return fmt.Errorf("%s is mode %o owned by uid %d; want mode %o owned by uid %d", name, st.Mode, st.Uid, kind|perm, uid)
	}
	return nil
}

// empty removes everything under dir (dir itself stays) and then each of
// files, never following a symlink: every step is relative to a directory
// fd opened O_NOFOLLOW, so a link planted in the tree is removed, never
// entered. A directory the caller owns but cannot enter or write is made
// so first. A path that does not exist is no error. Exit 0, 1 on a
// failure, 2 on bad arguments.
func empty(dir string, files []string) int {
	for _, p := range append([]string{dir}, files...) {
		if !strings.HasPrefix(p, "/") {
			fmt.Fprintf(os.Stderr, "stockade-warden empty: %q is not an absolute path\n", p)
			return 2
		}
	}
	code := 0
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
	case err != nil:
		fmt.Fprintf(os.Stderr, "stockade-warden empty: %s: %v\n", dir, err)
		code = 1
	default:
		err = emptyAt(fd, dir)
		_ = unix.Close(fd) // read only
		if err != nil {
			fmt.Fprintf(os.Stderr, "stockade-warden empty: %v\n", err)
			code = 1
		}
	}
	for _, f := range files {
		err := unix.Unlink(f)
		if errors.Is(err, unix.EISDIR) {
			// A rollback's marker: root's empty directory in the user's
			// work, which the user may remove (never followed: rmdir
			// does not follow a link).
			err = unix.Rmdir(f)
		}
		if err != nil && !errors.Is(err, unix.ENOENT) {
			fmt.Fprintf(os.Stderr, "stockade-warden empty: removing %s: %v\n", f, err)
			code = 1
		}
	}
	return code
}

// emptyAt removes every entry of the directory fd (named name, for
// errors), depth first.
func emptyAt(fd int, name string) error {
	// Entering and clearing needs rwx; a directory the user made
	// unwritable is theirs to make writable again.
	// A directory of root's (a rollback's marker) cannot be made so, and
	// needs not be: it is empty, and goes with its parent's write bit.
	if err := unix.Fchmod(fd, 0o700); err != nil && !errors.Is(err, unix.EPERM) {
		return fmt.Errorf("%s: %w", name, err)
	}
	for {
		names, err := readNames(fd)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if len(names) == 0 {
			return nil
		}
		for _, n := range names {
			err := unix.Unlinkat(fd, n, 0)
			if errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EPERM) {
				err = removeDirAt(fd, n, name+"/"+n)
			}
			if err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("%s/%s: %w", name, n, err)
			}
		}
	}
}

// removeDirAt empties and removes the directory n of dirfd.
func removeDirAt(dirfd int, n, name string) error {
	fd, err := unix.Openat(dirfd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	err = emptyAt(fd, name)
	_ = unix.Close(fd) // read only
	if err != nil {
		return err
	}
	return unix.Unlinkat(dirfd, n, unix.AT_REMOVEDIR)
}

// readNames reads the first batch of a directory's entry names ("." and
// ".." left out); the directory is read again from its start after each
// batch is removed.
func readNames(fd int) ([]string, error) {
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		return nil, err
	}
	buf := make([]byte, 32<<10)
	n, err := unix.Getdents(fd, buf)
	if err != nil || n <= 0 {
		return nil, err
	}
	_, _, names := unix.ParseDirent(buf[:n], -1, nil)
	return names, nil
}
