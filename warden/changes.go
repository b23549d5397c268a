package warden

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/stockade/stockade/warden/wire"
)

// Bounds of one process's tracking.
const (
	// maxTrackedBytes bounds what the warden holds for the paths one
	// process tree touched (each path's bytes and entryCost, a renamed
	// pair's bytes too): a bound on bytes, not paths, since a path can be
	// 4 KiB. Past it touches are counted and the Changes marked
	// Incomplete.
	maxTrackedBytes = 32 << 20
	// entryCost is what one remembered path costs beside its bytes (the
	// map's entry, the touch).
	entryCost = 128
	// maxHashed bounds the bytes hashed for one Changes; past it a file is
	// listed Unhashed.
	maxHashed = 256 << 20
	// maxPreImages bounds the before-texts kept for one process (only
	// MaxChangeTextTotal of them can be sent, but which ones is known only
	// at the end, sorted by path).
	maxPreImages = 8 << 20
	// maxRenames bounds the renames one process's report follows.
	maxRenames = 10_000
)

// workspaceRoot is the tree whose changes are tracked: wire.WorkspaceRoot,
// or `serve -workspace DIR` so that the tests, which run the warden on the
// host, can track a temporary directory. A flag, not an environment
// variable: a Docker exec inherits the image's environment, and an image
// must not move what is tracked. Its .stockade directory (the warden's own
// binary) is never tracked. Set once, before any spawn.
var workspaceRoot = wire.WorkspaceRoot

// tracked says whether p (absolute, clean) is a path whose changes count:
// under the workspace root, not the root itself, not its .stockade.
func tracked(p string) bool {
	r := workspaceRoot
	if !strings.HasPrefix(p, r+"/") {
		return false
	}
	rest := p[len(r)+1:]
	return rest != ".stockade" && !strings.HasPrefix(rest, ".stockade/")
}

// wirePath is p as the runtime knows it: under wire.WorkspaceRoot (the
// tests' root is mapped there).
func wirePath(p string) string {
	return wire.WorkspaceRoot + p[len(workspaceRoot):]
}

// opMask is what the syscalls a process made on a path could do to it: a
// path is reported changed only in a way one of them could have changed
// it (a failing rmdir of an absent path while a neighbour creates it is
// no creation of this process).
type opMask uint8

const (
	opCreate opMask = 1 << iota // can make it exist (or replace it)
	opDelete                    // can make it not exist (or replace it)
	opWrite                     // can change its content
	opMode                      // can change its mode
)

// fileState is what an lstat says of a path, enough to tell a change: the
// ctime too, which a write always moves and no caller can set back (an
// mtime can be, with utimensat).
type fileState struct {
	exists bool
	kind   string
	size   int64
	mode   uint32
	mtime  int64
	ctime  int64
	ino    uint64
	dev    uint64
	nlink  uint64
}

func lstatState(p string) fileState {
	st, _ := lstatChecked(p)
	return st
}

// lstatChecked is lstatState, and the error when the lstat failed other
// than by the path's absence (ENOENT, ENOTDIR): the state is then unknown.
func lstatChecked(p string) (fileState, error) {
	var sys unix.Stat_t
	if err := lstatAt(p, &sys); err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			err = nil
		}
		return fileState{}, err
	}
	st := fileState{exists: true, size: sys.Size, mode: sys.Mode & 0o7777, mtime: sys.Mtim.Nano(), ctime: sys.Ctim.Nano(), ino: sys.Ino, dev: sys.Dev, nlink: uint64(sys.Nlink)} //nolint:unconvert // Nlink's type differs between architectures
	switch sys.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		st.kind = wire.KindFile
	case unix.S_IFDIR:
		st.kind = wire.KindDir
		st.size = 0
	case unix.S_IFLNK:
		st.kind = wire.KindSymlink
	default:
		st.kind = wire.KindOther
		st.size = 0
	}
	return st, nil
}

// changed says whether a path that existed before and exists now (pre,
// now) was changed in a way ops could change it: replaced (another inode
// or kind), its content written (size, mtime or ctime moved: a
// directory's are its entries', which are reported for themselves), or
// its mode.
func changed(pre, now fileState, ops opMask) bool {
	replaced := pre.kind != now.kind || pre.ino != now.ino || pre.dev != now.dev
	switch {
	case replaced:
		return ops&(opCreate|opDelete) != 0
	case ops&opWrite != 0 && now.kind != wire.KindDir && (pre.size != now.size || pre.mtime != now.mtime || pre.ctime != now.ctime):
		return true
	default:
		return ops&opMode != 0 && pre.mode != now.mode
	}
}

// rewritten says whether a small text file kept before and unchanged by
// its stat has other content now: a rewrite at the same size within one
// tick of a coarse clock, its mtime put back, moves no stat field.
func rewritten(p string, tc *touch, now fileState) bool {
	if tc.before == nil || tc.ops&opWrite == 0 || now.kind != wire.KindFile || now.size != tc.pre.size {
		return false
	}
	after := readText(p)
	return after == nil || *after != *tc.before
}

// touch is one path a process tree touched: its state before the first
// touch, what the calls on it could do, and its content then if it was a
// small text file.
type touch struct {
	pre    fileState
	ops    opMask
	seq    uint64 // when it was first touched (renames move what came before them)
	before *string
}

// renameEvent is a rename a process asked for. It took effect if, at the
// end, to is the inode from was when asked.
type renameEvent struct {
	from, to string
	ino, dev uint64
	dir      bool
	seq      uint64
}

// tracker collects what one process tree touched under the workspace: the
// seccomp listener's server records each mutating path syscall, while the
// syscall is still blocked, so that the state before it is known; changes
// compares that with the state at the end.
type tracker struct {
	mu         sync.Mutex
	paths      map[string]*touch
	renames    []renameEvent
	dirRenames []int // the directories' renames, indexes into renames
	bytes      int   // held for paths and renames (maxTrackedBytes)
	dropped    int   // touches past maxTrackedBytes
	preText    int
	incomplete string
	untracked  string
	reported   bool // changes ran: nothing more is recorded
	held       int  // what it held when the report was made
	// reportedFlag is reported, read without mu by the serving thread.
	reportedFlag atomic.Bool
	// seq numbers the first touches and the renames, in order.
	seq uint64
	// served is closed when the listener's server returns (no task uses
	// the filter any more); nil for a tracker that serves none.
	served chan struct{}
}

// isReported says whether the report is made (nothing more is recorded).
func (t *tracker) isReported() bool { return t.reportedFlag.Load() }

func newTracker() *tracker { return &tracker{paths: make(map[string]*touch)} }

// untrackedTracker is the tracker of a process that runs without one.
func untrackedTracker(why string) *tracker { return &tracker{untracked: why} }

// markIncomplete records the first reason the list may miss changes.
func (t *tracker) markIncomplete(why string) {
	t.mu.Lock()
	if t.incomplete == "" {
		t.incomplete = why
	}
	t.mu.Unlock()
}

// record notes p (absolute, clean; the caller checked tracked) as touched
// by a call that can do ops to it: on the first touch its state (pre, if
// the caller has it) and, for a small text file, its content. Called
// while the syscall that touches it is blocked.
func (t *tracker) record(p string, ops opMask, pre *fileState) {
	t.mu.Lock()
	if t.reported {
		t.mu.Unlock()
		return
	}
	if tc, seen := t.paths[p]; seen {
		if !t.movedAway(p, tc) {
			tc.ops |= ops
			t.mu.Unlock()
			return
		}
		// The file first touched here went with a directory renamed
		// since: this is another one, touched for the first time.
	}
	if t.bytes+len(p)+entryCost > maxTrackedBytes {
		t.dropped++
		if t.incomplete == "" {
			t.incomplete = "more paths touched than the warden tracks per process"
		}
		t.mu.Unlock()
		return
	}
	if pre == nil && ops&^opCreate == 0 && t.createdDir(p) {
		// Under a directory this process made: nothing was there before
		// it began (no lstat; a creating call follows no final link).
		pre = &fileState{}
	}
	t.mu.Unlock()
	tc := &touch{ops: ops}
	if pre != nil {
		tc.pre = *pre
	} else {
		st, err := lstatChecked(p)
		if err != nil {
			t.markIncomplete("a path whose state before the warden could not read: " + truncReason(err.Error()))
			return
		}
		tc.pre = st
	}
	if tc.pre.kind == wire.KindFile && tc.pre.nlink > 1 && ops&(opWrite|opMode) != 0 {
		// Its other names change with it, and they are not listed.
		t.markIncomplete("a file with other hard links was written: its other names are not listed")
	}
	if !tc.pre.exists && ops&opCreate == 0 {
		// Nothing there, and nothing these calls can make: no change of
		// this process can show here (a failing rmdir, an unlink of
		// nothing, an open without O_CREAT).
		return
	}
	// Only an existing small file is read (a new file has no before).
	if tc.pre.exists && tc.pre.kind == wire.KindFile && tc.pre.size <= wire.MaxChangeText {
		t.mu.Lock()
		room := t.preText+int(tc.pre.size) <= maxPreImages
		t.mu.Unlock()
		if room {
			tc.before = readText(p)
		}
	}
	t.mu.Lock()
	if t.reported {
		// The report was made meanwhile.
	} else if old, seen := t.paths[p]; !seen || t.movedAway(p, old) {
		t.seq++
		tc.seq = t.seq
		t.paths[p] = tc
		t.bytes += len(p) + entryCost
		if tc.before != nil {
			t.preText += len(*tc.before)
		}
	} else {
		old.ops |= ops
	}
	t.mu.Unlock()
}

// movedAway says whether tc, p's touch, went with a directory renamed
// after it was first touched (the rename stands: its target is the inode
// it moved); if so it is moved there now, and p is free for the file that
// is there now. The caller holds t.mu.
func (t *tracker) movedAway(p string, tc *touch) bool {
	for i := len(t.dirRenames) - 1; i >= 0; i-- {
		r := t.renames[t.dirRenames[i]]
		if r.seq < tc.seq {
			break
		}
		if !strings.HasPrefix(p, r.from+"/") {
			continue
		}
		if now := lstatState(r.to); !now.exists || now.ino != r.ino || now.dev != r.dev {
			continue
		}
		t.moveTouch(p, r.to+p[len(r.from):], tc)
		return true
	}
	return false
}

// createdDir says whether p's directory is one this process tree made
// (absent before, touched by a creating call). The caller holds t.mu.
func (t *tracker) createdDir(p string) bool {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return false
	}
	// Made by creating calls only (mkdir): not one renamed into place,
	// whose content came with it.
	d, ok := t.paths[p[:i]]
	return ok && !d.pre.exists && d.ops == opCreate
}

// recordRename notes a rename asked for (both paths are recorded as
// touched by the caller first).
func (t *tracker) recordRename(from, to string) {
	st := lstatState(from)
	if !st.exists {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.reported {
		return
	}
	cost := len(from) + len(to) + entryCost
	if len(t.renames) >= maxRenames || t.bytes+cost > maxTrackedBytes {
		// A rename loop must not grow the warden without bound (nor the
		// report's pass over it at exit).
		t.incomplete = fmt.Sprintf("more than %d renames or %d bytes of paths: the later renames are not followed", maxRenames, maxTrackedBytes)
		return
	}
	t.bytes += cost
	t.seq++
	if st.kind == wire.KindDir {
		t.dirRenames = append(t.dirRenames, len(t.renames))
	}
	t.renames = append(t.renames, renameEvent{from: from, to: to, ino: st.ino, dev: st.dev, dir: st.kind == wire.KindDir, seq: t.seq})
}

// readText is a regular file's content if it is at most MaxChangeText bytes
// of UTF-8 text without NUL, else nil. It never follows a symlink and never
// blocks on a FIFO.
func readText(p string) *string {
	f, err := openFile(p)
	if err != nil {
		return nil
	}
	defer func() { _ = f.Close() }() // read-only
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Size() > wire.MaxChangeText {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(f, wire.MaxChangeText+1))
	if err != nil || len(b) > wire.MaxChangeText {
		return nil
	}
	return textOf(b)
}

func textOf(b []byte) *string {
	if !utf8.Valid(b) || strings.IndexByte(string(b), 0) >= 0 {
		return nil
	}
	s := string(b)
	return &s
}

// openFile opens p to read, from its anchor, never following a final
// symlink and never blocking on a FIFO.
func openFile(p string) (*os.File, error) {
	fd, err := openAt(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	// A directory on the way may have become a symlink since the path
	// was resolved: what was opened must still be the workspace's (its
	// device), never a file of /proc (the warden's own environ).
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || workspaceDev != 0 && st.Dev != workspaceDev {
		_ = unix.Close(fd) // read-only
		return nil, &os.PathError{Op: "open", Path: p, Err: unix.EXDEV}
	}
	return os.NewFile(uintptr(fd), p), nil //nolint:gosec // G115: an fd
}

// pending is a change found at the end, before its hash and text.
type pending struct {
	c    wire.Change
	real string // the path on this host (wirePath maps it)
	from *touch
}

// changes compares every touched path with its state now and makes the
// Changes message: totals over all, the first MaxChangeEntries by path
// listed, hashed (within maxHashed) and with their texts (within
// MaxChangeTextTotal). Renames are applied first, in order: one that took
// effect (to is now the inode from was) makes to "renamed" from where its
// chain began, if that path existed before and is gone now; a directory's
// rename moves what was touched under it to its new place, compared there
// with its state before (the directory itself is one renamed entry; what
// it held and no one touched is not listed).
func (t *tracker) changes() *wire.Changes {
	t.waitServed()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.untracked != "" {
		return &wire.Changes{Untracked: t.untracked}
	}
	if t.reported {
		return &wire.Changes{Incomplete: "reported already"}
	}
	defer t.release()
	all := t.compare(t.origins())
	sort.Slice(all, func(i, j int) bool { return all[i].c.Path < all[j].c.Path })
	m := &wire.Changes{Incomplete: t.incomplete}
	for _, pc := range all {
		switch pc.c.Op {
		case wire.OpCreated:
			m.Created++
		case wire.OpModified:
			m.Modified++
		case wire.OpDeleted:
			m.Deleted++
		case wire.OpRenamed:
			m.Renamed++
		}
	}
	if len(all) > wire.MaxChangeEntries {
		m.Omitted = len(all) - wire.MaxChangeEntries
		all = all[:wire.MaxChangeEntries]
	}
	m.Entries = entries(all)
	return m
}

// servedWait bounds how long the report waits for the process's last
// descendants to let go of the filter once the process itself is reaped.
const servedWait = 250 * time.Millisecond

// waitServed waits, within servedWait, until no task uses the filter any
// more; a process that left descendants running past it is reported
// incomplete (what they do later is not heard).
func (t *tracker) waitServed() {
	if t.served == nil {
		return
	}
	select {
	case <-t.served:
	case <-time.After(servedWait):
		t.markIncomplete("processes it started still ran when it ended: their later changes are not listed")
	}
}

// release drops what the tracker held once its report is made: a
// descendant still writing is heard no more. The caller holds t.mu.
func (t *tracker) release() {
	t.held = t.bytes + t.preText
	t.reported = true
	t.reportedFlag.Store(true)
	t.paths, t.renames, t.dirRenames, t.bytes, t.preText = nil, nil, nil, 0, 0
}

// heavy says whether the tracker held enough that its memory should go
// back to the system once its report is sent.
func (t *tracker) heavy() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.held >= 1<<20
}

// freeing is set while a scheduled giveBack runs.
var freeing atomic.Bool

// giveBack returns the warden's free memory to the system, in the
// background, once at a time: what a heavy process's tracking and report
// took goes back now, not at the runtime's next scavenge (an unpack of
// 11k files left 16 MB behind).
func giveBack() {
	if freeing.CompareAndSwap(false, true) {
		go func() {
			debug.FreeOSMemory()
			freeing.Store(false)
		}()
	}
}

// origins follows the renames that still stand (the inode is still at
// their target) and returns, for each target, the path its content came
// from; a directory's rename carries the paths touched under it. The
// caller holds t.mu.
func (t *tracker) origins() map[string]string {
	origin := make(map[string]string) // to → the path its content came from
	stands := t.standing()
	// A directory's rename is a pass over every path: renames × paths
	// is bounded, past it the moves are not followed (and said so).
	work := 0
	const maxWork = 20_000_000
	for i, r := range t.renames {
		if !stands[i] {
			continue
		}
		src := r.from
		if o, ok := origin[r.from]; ok {
			src = o
			delete(origin, r.from)
		}
		origin[r.to] = src
		if r.dir {
			if work += len(t.paths); work > maxWork {
				if t.incomplete == "" {
					t.incomplete = "too many directory renames over too many paths: the later ones are not followed"
				}
				continue
			}
			prefix := r.from + "/"
			for p, tc := range t.paths {
				// A path first touched after the rename is another file
				// at that path, not one the directory took with it.
				if strings.HasPrefix(p, prefix) && tc.seq < r.seq {
					t.moveTouch(p, r.to+"/"+p[len(prefix):], tc)
				}
			}
		}
	}
	return origin
}

// standing says, for each rename, whether it took effect and still
// stands: its target holds the inode it moved, now or when a later rename
// of the same inode moved it on (d→e→g stands all along when g holds it).
// The caller holds t.mu.
func (t *tracker) standing() []bool {
	type moved struct {
		from     string
		ino, dev uint64
	}
	stands := make([]bool, len(t.renames))
	onward := make(map[moved]bool) // the next rename of an inode from a path: stands?
	for i := len(t.renames) - 1; i >= 0; i-- {
		r := t.renames[i]
		st, ok := onward[moved{r.to, r.ino, r.dev}]
		if !ok {
			now, err := lstatChecked(r.to)
			if err != nil && t.incomplete == "" {
				t.incomplete = "a renamed path the warden could not read at the end: " + truncReason(err.Error())
			}
			st = now.exists && now.ino == r.ino && now.dev == r.dev
		}
		stands[i] = st
		onward[moved{r.from, r.ino, r.dev}] = st
	}
	return stands
}

// moveTouch moves the touch tc of path p to np, where a directory's rename
// took it; where np has a touch already, the older one is kept (its state
// before is the path's) with the calls of both. The caller holds t.mu.
func (t *tracker) moveTouch(p, np string, tc *touch) {
	if old, ok := t.paths[np]; ok && old != tc {
		if old.seq < tc.seq {
			old.ops |= tc.ops
			delete(t.paths, p)
			return
		}
		tc.ops |= old.ops
	}
	t.paths[np] = tc
	delete(t.paths, p)
}

// compare compares each touched path's state before with its state now:
// a rename whose source is gone and target is there, then every other
// path created, deleted or modified. The caller holds t.mu.
func (t *tracker) compare(origin map[string]string) []pending {
	var all []pending
	consumed := make(map[string]bool)
	for to, from := range origin {
		src, ok := t.paths[from]
		if !ok || !src.pre.exists || from == to || !tracked(to) {
			continue
		}
		if lstatState(from).exists {
			continue
		}
		now := lstatState(to)
		if !now.exists {
			continue
		}
		consumed[from], consumed[to] = true, true
		all = append(all, pending{c: change(wire.OpRenamed, to, now), real: to, from: src})
		all[len(all)-1].c.From = wirePath(from)
	}
	for p, tc := range t.paths {
		if consumed[p] {
			continue
		}
		now, err := lstatChecked(p)
		if err != nil {
			// Its state at the end is unknown (a directory on its way
			// made unreadable): not "absent".
			if t.incomplete == "" {
				t.incomplete = "a touched path the warden could not read at the end: " + truncReason(err.Error())
			}
			continue
		}
		switch {
		case !tc.pre.exists && now.exists && tc.ops&opCreate != 0:
			all = append(all, pending{c: change(wire.OpCreated, p, now), real: p})
		case tc.pre.exists && !now.exists && tc.ops&opDelete != 0:
			pc := pending{c: change(wire.OpDeleted, p, tc.pre), real: p, from: tc}
			pc.c.SHA256 = ""
			all = append(all, pc)
		case tc.pre.exists && now.exists && (changed(tc.pre, now, tc.ops) || rewritten(p, tc, now)):
			all = append(all, pending{c: change(wire.OpModified, p, now), real: p, from: tc})
		}
	}
	return all
}

// entries are the report's entries of all: each file hashed (within the
// hashing budget) and its texts before and after kept (within the text
// budget), in order.
func entries(all []pending) []wire.Change {
	hashed, text := int64(0), 0
	out := make([]wire.Change, 0, len(all))
	for _, pc := range all {
		c := pc.c
		var after *string
		if c.Op != wire.OpDeleted && c.Kind == wire.KindFile {
			var n int64
			c.SHA256, after, n, c.Unhashed = hashFile(pc.real, maxHashed-hashed)
			hashed += n
		}
		var before *string
		if pc.from != nil && c.Op != wire.OpCreated {
			before = pc.from.before
		}
		for _, kept := range []struct {
			dst **string
			t   *string
		}{{&c.Before, before}, {&c.After, after}} {
			if kept.t != nil && text+len(*kept.t) <= wire.MaxChangeTextTotal {
				*kept.dst = kept.t
				text += len(*kept.t)
			}
		}
		out = append(out, c)
	}
	return out
}

func change(op, p string, st fileState) wire.Change {
	return wire.Change{Op: op, Path: wirePath(p), Kind: st.kind, Size: st.size, Mode: st.mode}
}

// hashFile hashes a regular file (not following a symlink), reading at most
// budget bytes: its hex SHA256, its text if small, the bytes read, and why
// it is not hashed when it is not.
func hashFile(p string, budget int64) (sum string, text *string, n int64, unhashed string) {
	f, err := openFile(p)
	if err != nil {
		return "", nil, 0, truncReason("not readable: " + err.Error())
	}
	defer func() { _ = f.Close() }() // read-only
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return "", nil, 0, "not a regular file when hashed"
	}
	if fi.Size() > budget {
		return "", nil, 0, "past the bytes hashed for one process"
	}
	h := sha256.New()
	var small *sliceWriter
	r := io.LimitReader(f, budget+1)
	if fi.Size() <= wire.MaxChangeText {
		small = &sliceWriter{b: make([]byte, 0, fi.Size())}
		r = io.TeeReader(r, small)
	}
	n, err = io.Copy(h, r)
	if err != nil {
		return "", nil, n, truncReason("read: " + err.Error())
	}
	if n > budget {
		return "", nil, n, "past the bytes hashed for one process"
	}
	if small != nil && !small.over {
		text = textOf(small.b)
	}
	return hex.EncodeToString(h.Sum(nil)), text, n, ""
}

// sliceWriter keeps what is written up to MaxChangeText bytes; past it,
// over (the file grew since its stat: no text is kept).
type sliceWriter struct {
	b    []byte
	over bool
}

func (w *sliceWriter) Write(p []byte) (int, error) {
	if !w.over && len(w.b)+len(p) <= wire.MaxChangeText {
		w.b = append(w.b, p...)
	} else {
		w.over, w.b = true, nil
	}
	return len(p), nil
}

func truncReason(s string) string {
	if len(s) > 200 {
		return s[:200]
	}
	return s
}

// encodeChanges is c as a frame's payload, always within one frame: JSON
// without HTML escapes (a path or a text of '<' would take six bytes a
// byte), and, past the budget, first without the kept texts, then with
// the last entries moved to Omitted, and at worst the counts alone — so a
// process's report can never make a frame the link cannot carry.
func encodeChanges(c *wire.Changes) ([]byte, error) {
	const budget = wire.MaxPayload - 64<<10
	enc := func(m *wire.Changes) ([]byte, error) {
		var b bytes.Buffer
		e := json.NewEncoder(&b)
		e.SetEscapeHTML(false)
		if err := e.Encode(m); err != nil {
			return nil, err
		}
		return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
	}
	b, err := enc(c)
	if err != nil || len(b) <= budget {
		return b, err
	}
	m := *c
	m.Entries = append([]wire.Change(nil), c.Entries...)
	for i := range m.Entries {
		m.Entries[i].Before, m.Entries[i].After = nil, nil
	}
	cut := "the report was cut to fit the link's frame"
	if m.Incomplete == "" {
		m.Incomplete = cut
	}
	for len(m.Entries) > 0 {
		if b, err = enc(&m); err != nil || len(b) <= budget {
			return b, err
		}
		n := len(m.Entries) / 2
		m.Omitted += len(m.Entries) - n
		m.Entries = m.Entries[:n]
	}
	return enc(&m)
}
