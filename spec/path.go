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

// WorkspaceDir is where a sandbox's workspace volume is mounted.
const WorkspaceDir = "/workspace"

// WorkspacePath turns a path relative to /workspace into an absolute one,
// refusing anything absolute or that would leave it (invalid_argument).
// It is the rule Put, Get and cp apply to a workspace path.
func WorkspacePath(p string) (string, error) {
	c, ok := CleanRelPath(p)
	if !ok {
		return "", Errorf(CodeInvalidArgument, "workspace", "path %q is not a path relative to %s that stays within it", p, WorkspaceDir)
	}
	if c == "." {
		return WorkspaceDir, nil
	}
	return WorkspaceDir + "/" + c, nil
}
