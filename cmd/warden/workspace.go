package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// swap exchanges two paths in one rename (renameat2 RENAME_EXCHANGE): the
// runtime's rollback makes a checkpoint appear in place of /workspace/work
// whole. It runs as uid 0 without capabilities: the two paths are entries
// of the root-owned /workspace, which the sandbox's user cannot rename.
// Exit 0, 1 on a failure, 2 on bad arguments.
func swap(a, b string) int {
	if !strings.HasPrefix(a, "/") || !strings.HasPrefix(b, "/") {
		fmt.Fprintf(os.Stderr, "stockade-warden swap: two absolute paths wanted, not %q and %q\n", a, b)
		return 2
	}
	if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
		fmt.Fprintf(os.Stderr, "stockade-warden swap: exchanging %s and %s: %v\n", a, b, err)
		return 1
	}
	return 0
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
		if err := unix.Unlink(f); err != nil && !errors.Is(err, unix.ENOENT) {
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
	if err := unix.Fchmod(fd, 0o700); err != nil {
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
