package main

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// swap is `stockade-warden swap A B`: the runtime's rollback exchanges two
// entries of the workspace atomically (renameat2 RENAME_EXCHANGE), so that
// no observer sees neither. Exit 0, or 1 with the error on stderr.
func swap(a, b string) int {
	if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
		fmt.Fprintf(os.Stderr, "stockade-warden swap: %s and %s: %v\n", a, b, err)
		return 1
	}
	return 0
}

// empty is `stockade-warden empty DIR [FILE...]`: everything under DIR is
// removed (DIR stays), then each FILE that exists. No symlink is ever
// followed: DIR and every directory under it are opened O_NOFOLLOW and
// walked by fd, so a symlink planted in the tree is removed, never
// entered. A directory its owner made unwritable or unreadable is made
// u+rwx first (which works for the sandbox user's own). Exit 0, or 1 with
// the first error on stderr.
func empty(dir string, files []string) int {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == nil {
		err = emptyFD(fd, dir)
	} else {
		err = fmt.Errorf("%s: %w", dir, err)
	}
	for _, f := range files {
		if err != nil {
			break
		}
		err = removeAt(unix.AT_FDCWD, f, f)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "stockade-warden empty: %v\n", err)
		return 1
	}
	return 0
}

// emptyFD removes everything in the directory open at fd (and closes fd).
func emptyFD(fd int, name string) error {
	d := os.NewFile(uintptr(fd), name)
	defer func() { _ = d.Close() }() // a directory read: nothing to lose
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if st.Mode&0o700 != 0o700 {
		// Its entries can be neither listed nor removed otherwise.
		if err := unix.Fchmod(fd, st.Mode&0o7777|0o700); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	names, err := d.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	for _, n := range names {
		if err := removeAt(int(d.Fd()), n, name+"/"+n); err != nil {
			return err
		}
	}
	return nil
}

// removeAt removes dirfd/name, a directory with all it holds; a missing
// one is no error.
func removeAt(dirfd int, name, shown string) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return fmt.Errorf("%s: %w", shown, err)
	}
	fd, oerr := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(oerr, unix.EACCES) {
		// Unreadable: made readable through its parent (fchmodat never
		// follows a symlink to a directory: O_NOFOLLOW failed first).
		if cerr := unix.Fchmodat(dirfd, name, 0o700, 0); cerr == nil {
			fd, oerr = unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		}
	}
	if errors.Is(oerr, unix.ENOTDIR) {
		return fmt.Errorf("%s: %w", shown, err) // not a directory: unlink's error
	}
	if oerr != nil {
		return fmt.Errorf("%s: %w", shown, oerr)
	}
	if err := emptyFD(fd, shown); err != nil {
		return err
	}
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("%s: %w", shown, err)
	}
	return nil
}
