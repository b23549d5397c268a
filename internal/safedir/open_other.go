//go:build !linux

package safedir

import (
	"os"
	"syscall"
)

// openDir opens path as a directory without following a link in its last
// component.
func openDir(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
}
