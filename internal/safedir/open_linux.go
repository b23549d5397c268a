package safedir

import (
	"os"

	"golang.org/x/sys/unix"
)

// openDir opens path as a directory without following a link in its last
// component. O_PATH needs no read permission on the directory (a client
// may only search a root server's), and its descriptor serves fstat and
// /proc/self/fd all the same.
func openDir(path string) (*os.File, error) {
	return os.OpenFile(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
}
