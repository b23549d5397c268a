//go:build !linux

package checkpoint

import (
	"io/fs"
	"os"
	"path/filepath"
)

// syncFS syncs every file and directory under dir (no syncfs(2) here).
func syncFS(dir string) error {
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	})
}
