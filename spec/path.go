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

// ReservedDir is the runtime's own directory in the workspace (relative to
// it: the warden's binary lives there). No caller's path may name it or
// anything under it.
const ReservedDir = ".stockade"

// Reserved reports whether a clean workspace-relative path (WorkspaceRel's)
// is ReservedDir or under it.
func Reserved(rel string) bool {
	rel = strings.TrimPrefix(rel, "./")
	return rel == ReservedDir || strings.HasPrefix(rel, ReservedDir+"/")
}

// WorkspaceRel is a workspace path as a clean path relative to /workspace
// ("." for /workspace itself). A workspace path is either relative to
// /workspace ("work/out.txt") or absolute under it
// ("/workspace/work/out.txt"), the form working directories take: one rule
// for Put, Get, cp and every file call. Anything else, or a path that
// would leave /workspace, is invalid_argument.
func WorkspaceRel(p string) (string, error) {
	rel := p
	if strings.HasPrefix(p, "/") {
		c := path.Clean(p)
		switch {
		case c == WorkspaceDir:
			return ".", nil
		case strings.HasPrefix(c, WorkspaceDir+"/"):
			rel = strings.TrimPrefix(c, WorkspaceDir+"/")
		default:
			return "", Errorf(CodeInvalidArgument, "workspace", "path %q is outside %s: give it relative to %s, or absolute under it", p, WorkspaceDir, WorkspaceDir)
		}
	}
	c, ok := CleanRelPath(rel)
	if !ok {
		return "", Errorf(CodeInvalidArgument, "workspace", "path %q is not a path under %s (relative to it, or absolute) that stays within it", p, WorkspaceDir)
	}
	return c, nil
}

// WorkspacePath is a workspace path (see WorkspaceRel) made absolute.
func WorkspacePath(p string) (string, error) {
	c, err := WorkspaceRel(p)
	if err != nil {
		return "", err
	}
	if c == "." {
		return WorkspaceDir, nil
	}
	return WorkspaceDir + "/" + c, nil
}
