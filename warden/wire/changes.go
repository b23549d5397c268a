package wire

import (
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"strings"
	"unicode/utf8"
)

// Bounds of a Changes message.
const (
	// MaxChangeEntries bounds the changes listed; past it they are only
	// counted (Omitted).
	MaxChangeEntries = 1000
	// MaxChangeText bounds one kept text (a file's content before or
	// after); a longer file keeps none.
	MaxChangeText = 64 << 10
	// MaxChangeTextTotal bounds all the text one Changes keeps.
	MaxChangeTextTotal = 1 << 20
	// WorkspaceRoot is the tree changes are tracked under.
	WorkspaceRoot = "/workspace"
)

// Change operations.
const (
	OpCreated  = "created"
	OpModified = "modified"
	OpDeleted  = "deleted"
	OpRenamed  = "renamed"
)

// Kinds of file.
const (
	KindFile    = "file"
	KindDir     = "dir"
	KindSymlink = "symlink"
	KindOther   = "other"
)

// Changes (warden → runtime, process channel, JSON) is what one process
// did under WorkspaceRoot, attributed to it by the writer's identity (each
// process's tree has its own seccomp listener in the warden), not by the
// time window it ran in. The warden sends it just before each Exited, and
// first of all after a Resume of an exited process, so the runtime has it
// whenever it has the exit.
type Changes struct {
	// Untracked, when set, says why nothing was tracked: Entries is empty
	// and the counts are zero.
	Untracked string `json:"untracked,omitempty"`
	// Incomplete, when set, says why the list may miss changes (a write
	// path the tracker does not see was used).
	Incomplete string `json:"incomplete,omitempty"`
	// The totals, listed or not.
	Created  int `json:"created"`
	Modified int `json:"modified"`
	Deleted  int `json:"deleted"`
	Renamed  int `json:"renamed"`
	// Omitted counts the changes past MaxChangeEntries: in the totals,
	// not listed.
	Omitted int      `json:"omitted,omitempty"`
	Entries []Change `json:"entries,omitempty"`
}

// Change is one path's change.
type Change struct {
	Op   string `json:"op"`
	Path string `json:"path"`
	// From is where a renamed path was.
	From string `json:"from,omitempty"`
	// Kind, Size and Mode (permission bits) describe the path after the
	// process (before it, for a deleted one).
	Kind string `json:"kind"`
	Size int64  `json:"size,omitempty"`
	Mode uint32 `json:"mode,omitempty"`
	// SHA256 (hex) is a file's content after the process; empty for a
	// deleted path, a directory, or a file not hashed (Unhashed says why).
	SHA256   string `json:"sha256,omitempty"`
	Unhashed string `json:"unhashed,omitempty"`
	// Before and After are a small text file's content before and after
	// (nil: not kept: not a file, not text, too long, or past the total).
	Before *string `json:"before,omitempty"`
	After  *string `json:"after,omitempty"`
}

// Total is the number of changes, listed or not.
func (m *Changes) Total() int { return m.Created + m.Modified + m.Deleted + m.Renamed }

func (m *Changes) Validate() error {
	if len(m.Untracked) > 4096 || len(m.Incomplete) > 4096 {
		return errors.New("a reason too long")
	}
	if m.Created < 0 || m.Modified < 0 || m.Deleted < 0 || m.Renamed < 0 || m.Omitted < 0 {
		return errors.New("a negative count")
	}
	if len(m.Entries) > MaxChangeEntries {
		return fmt.Errorf("%d entries, more than %d", len(m.Entries), MaxChangeEntries)
	}
	if m.Untracked != "" && (len(m.Entries) > 0 || m.Total() > 0) {
		return errors.New("untracked with changes")
	}
	var counts [4]int
	text := 0
	for i := range m.Entries {
		c := &m.Entries[i]
		if err := c.Validate(); err != nil {
			return fmt.Errorf("entry %d: %w", i, err)
		}
		counts[opIndex(c.Op)]++
		for _, t := range []*string{c.Before, c.After} {
			if t != nil {
				text += len(*t)
			}
		}
	}
	if text > MaxChangeTextTotal {
		return fmt.Errorf("%d bytes of kept text, more than %d", text, MaxChangeTextTotal)
	}
	if counts[0] > m.Created || counts[1] > m.Modified || counts[2] > m.Deleted || counts[3] > m.Renamed {
		return errors.New("more entries of an operation than its count")
	}
	if len(m.Entries)+m.Omitted != m.Total() {
		return fmt.Errorf("%d entries and %d omitted do not add up to %d changes", len(m.Entries), m.Omitted, m.Total())
	}
	return nil
}

func opIndex(op string) int {
	switch op {
	case OpCreated:
		return 0
	case OpModified:
		return 1
	case OpDeleted:
		return 2
	}
	return 3
}

func (c *Change) Validate() error {
	switch c.Op {
	case OpCreated, OpModified, OpDeleted, OpRenamed:
	default:
		return fmt.Errorf("operation %q", c.Op)
	}
	switch c.Kind {
	case KindFile, KindDir, KindSymlink, KindOther:
	default:
		return fmt.Errorf("kind %q", c.Kind)
	}
	if err := CheckWorkspacePath(c.Path); err != nil {
		return err
	}
	if (c.Op == OpRenamed) != (c.From != "") {
		return errors.New("from is for a rename, and a rename has one")
	}
	if c.From != "" {
		if err := CheckWorkspacePath(c.From); err != nil {
			return fmt.Errorf("from: %w", err)
		}
	}
	if c.Size < 0 || c.Mode > 07777 {
		return fmt.Errorf("size %d, mode %o", c.Size, c.Mode)
	}
	if c.SHA256 != "" {
		if b, err := hex.DecodeString(c.SHA256); err != nil || len(b) != 32 || strings.ToLower(c.SHA256) != c.SHA256 {
			return fmt.Errorf("sha256 %q", c.SHA256)
		}
		if c.Op == OpDeleted || c.Kind != KindFile {
			return errors.New("a hash for a path that is not a file after")
		}
	}
	if len(c.Unhashed) > 256 {
		return errors.New("unhashed reason too long")
	}
	for _, t := range []*string{c.Before, c.After} {
		if t != nil && (len(*t) > MaxChangeText || !utf8.ValidString(*t) || strings.IndexByte(*t, 0) >= 0) {
			return errors.New("kept text too long or not text")
		}
	}
	if c.After != nil && c.Op == OpDeleted || c.Before != nil && c.Op == OpCreated {
		return errors.New("text kept for a side that does not exist")
	}
	return nil
}

// CheckWorkspacePath checks p is a clean absolute path under WorkspaceRoot
// (the root itself excluded), without NUL, of at most 4096 bytes.
func CheckWorkspacePath(p string) error {
	if len(p) > 4096 || strings.IndexByte(p, 0) >= 0 || !utf8.ValidString(p) {
		return errors.New("path too long, or with a NUL byte, or not UTF-8")
	}
	if path.Clean(p) != p || !strings.HasPrefix(p, WorkspaceRoot+"/") {
		return fmt.Errorf("path %q is not a clean path under %s", p, WorkspaceRoot)
	}
	return nil
}
