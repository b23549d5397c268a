package recorder

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/spec"
)

// MaxDecisionBytes bounds one decision file. At the bound the file becomes
// the previous one (the one before it is dropped): a sandbox keeps at most
// twice this of egress decisions, the newest.
const MaxDecisionBytes = 4 << 20

// DecisionLog is one sandbox's egress decisions, as JSON lines, in the
// recording directory's egress/ folder: <sandbox>.jsonl and, once that
// filled, <sandbox>.jsonl.1. Appends are not synced one by one (a crash
// loses at most what the proxy still holds in its ring and sends again on
// resume); Close syncs.
type DecisionLog struct {
	mu   sync.Mutex
	path string
	f    *os.File
	size int64
	last uint64
}

func decisionPath(dir, sandbox string) string {
	return filepath.Join(dir, "egress", sandbox+".jsonl")
}

// OpenDecisions opens (making it if needed) a sandbox's decision log and
// reads the sequence of its last decision.
func OpenDecisions(dir, sandbox string) (*DecisionLog, error) {
	if err := plainName("sandbox", sandbox); err != nil {
		return nil, err
	}
	path := decisionPath(dir, sandbox)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, spec.Wrap(spec.CodeJournal, "recorder.egress", err, "making %s", filepath.Dir(path))
	}
	l := &DecisionLog{path: path}
	seen := false
	end, err := readDecisionFile(path, func(d egress.Decision) error { l.last, seen = d.Seq, true; return nil })
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if !seen {
		// A crash between a rotation and the append after it leaves the
		// current file empty (or only torn): the last decision is in .1.
		if _, err := readDecisionFile(path+".1", func(d egress.Decision) error { l.last = d.Seq; return nil }); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, spec.Wrap(spec.CodeJournal, "recorder.egress", err, "opening %s", path)
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close() // nothing written yet; the Stat error is the one to report
		return nil, spec.Wrap(spec.CodeJournal, "recorder.egress", err, "opening %s", path)
	}
	if st.Size() > end {
		// Drop a torn tail, or the next append would join it into a
		// malformed middle line.
		if err := f.Truncate(end); err != nil {
			_ = f.Close() // nothing written yet; the Truncate error is the one to report
			return nil, spec.Wrap(spec.CodeJournal, "recorder.egress", err, "truncating the torn tail of %s at %d", path, end)
		}
	}
	l.f, l.size = f, end
	return l, nil
}

// Last is the sequence of the last decision appended (0: none).
func (l *DecisionLog) Last() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

// Append writes one decision.
func (l *DecisionLog) Append(d egress.Decision) error {
	b, err := json.Marshal(d)
	if err != nil {
		return spec.Wrap(spec.CodeInternal, "recorder.egress", err, "encoding a decision")
	}
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return spec.Errorf(spec.CodeJournal, "recorder.egress", "decision log %s is closed", l.path)
	}
	if l.size+int64(len(b)) > MaxDecisionBytes && l.size > 0 {
		if err := l.rotate(); err != nil {
			return err
		}
	}
	if _, err := l.f.Write(b); err != nil {
		return spec.Wrap(spec.CodeJournal, "recorder.egress", err, "writing %s", l.path)
	}
	l.size += int64(len(b))
	l.last = d.Seq
	return nil
}

func (l *DecisionLog) rotate() error {
	// The file stops being appended to: a failed sync is said, not lost.
	if err := l.f.Sync(); err != nil {
		return spec.Wrap(spec.CodeJournal, "recorder.egress", err, "syncing %s before rotating it", l.path)
	}
	err := l.f.Close()
	l.f = nil
	if err != nil {
		return spec.Wrap(spec.CodeJournal, "recorder.egress", err, "closing %s before rotating it", l.path)
	}
	if err := os.Rename(l.path, l.path+".1"); err != nil {
		return spec.Wrap(spec.CodeJournal, "recorder.egress", err, "rotating %s", l.path)
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return spec.Wrap(spec.CodeJournal, "recorder.egress", err, "opening %s", l.path)
	}
	l.f, l.size = f, 0
	return nil
}

// Close syncs and closes the log; it is safe to call more than once.
func (l *DecisionLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Sync()
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.f = nil
	return err
}

// ReadDecisions calls fn with a sandbox's recorded decisions, oldest
// first. A sandbox with none is no error. A torn last line (a crash
// mid-append: the bytes after the last newline) is skipped; any other
// malformed line is a journal error.
func ReadDecisions(dir, sandbox string, fn func(egress.Decision) error) error {
	if err := plainName("sandbox", sandbox); err != nil {
		return err
	}
	path := decisionPath(dir, sandbox)
	for _, p := range []string{path + ".1", path} {
		if _, err := readDecisionFile(p, fn); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// RemoveDecisions deletes a sandbox's decision files (retention).
func RemoveDecisions(dir, sandbox string) error {
	if err := plainName("sandbox", sandbox); err != nil {
		return err
	}
	path := decisionPath(dir, sandbox)
	for _, p := range []string{path, path + ".1"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return spec.Wrap(spec.CodeJournal, "recorder.egress", err, "removing %s", p)
		}
	}
	return nil
}

// readDecisionFile calls fn with each whole line of a decision file and
// returns the offset just after the last whole line: what follows it,
// without a newline, is the torn tail of a crash and is skipped (Append
// writes a line and its newline in one write, so a line without one was
// cut short even if it parses).
func readDecisionFile(path string, fn func(egress.Decision) error) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	off, line := 0, 0
	for {
		j := bytes.IndexByte(data[off:], '\n')
		if j < 0 {
			return int64(off), nil
		}
		line++
		var d egress.Decision
		if err := json.Unmarshal(data[off:off+j], &d); err != nil {
			return int64(off), spec.Wrap(spec.CodeJournal, "recorder.egress", err, "%s line %d", path, line)
		}
		if err := fn(d); err != nil {
			return int64(off), err
		}
		off += j + 1
	}
}

// DecisionSandboxes lists the sandboxes that have a decision log.
func DecisionSandboxes(dir string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(dir, "egress"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, spec.Wrap(spec.CodeJournal, "recorder.egress", err, "listing %s", filepath.Join(dir, "egress"))
	}
	var ids []string
	for _, e := range ents {
		if id, ok := strings.CutSuffix(e.Name(), ".jsonl"); ok && e.Type().IsRegular() {
			ids = append(ids, id)
		}
	}
	return ids, nil
}
