package spec

import (
	"path"
	"strings"
)

// CleanRelPath cleans p, a slash-separated path relative to some root, and
// reports whether it stays below that root: p is not absolute, holds no NUL
// byte, and no component of its cleaned form is "..". Only a component that
// is exactly ".." climbs: "..foo" and "a/..b" are ordinary names. The empty
// path and "." clean to ".", the root itself.
//
// It is the one ".." check stockade has: dataset targets (relative to /),
// archive paths and entries (relative to their directory) all go through it,
// so they cannot disagree about what leaves a directory.
func CleanRelPath(p string) (string, bool) {
	if strings.IndexByte(p, 0) >= 0 || path.IsAbs(p) {
		return "", false
	}
	c := path.Clean(p)
	// Cleaning a relative path leaves ".." components only at its front.
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", false
	}
	return c, true
}
