//go:build linux

package checkpoint

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncFS flushes the filesystem holding dir (syncfs(2)).
func syncFS(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = unix.Syncfs(int(f.Fd()))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
