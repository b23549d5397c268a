package recorder

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/stockade/stockade/spec"
)

// Beside a process's output recording the store keeps two side files: the
// text of the small files it changed (before and after, for a unified
// diff) and the stdin its caller sent it (for a re-run). Both are written
// before the process's exit is journaled and never change after.

// MaxStdin bounds the stdin recorded per process; past it the recording
// says it was cut.
const MaxStdin = 16 << 20

// ChangeText is one changed file's kept text: nil Before or After means
// that side was not kept (the file did not exist, was not text, or was
// too long).
type ChangeText struct {
	Path   string  `json:"path"`
	Before *string `json:"before,omitempty"`
	After  *string `json:"after,omitempty"`
}

func changesName(dir, id string) string { return filepath.Join(dir, id+".changes") }
func stdinName(dir, id string) string   { return filepath.Join(dir, id+".stdin") }
func stdinCutName(dir, id string) string {
	return filepath.Join(dir, id+".stdin.cut")
}

// WriteChanges keeps process id's changed files' text, synced, replacing
// any kept before (a re-adopted process reports its changes once more).
func (s *Store) WriteChanges(id string, texts []ChangeText) error {
	if err := validID(id); err != nil {
		return err
	}
	b, err := json.Marshal(texts)
	if err != nil {
		return spec.Wrap(spec.CodeInternal, "recorder", err, "encoding the changes of %s", id)
	}
	name := changesName(s.dir, id)
	tmp := name + ".tmp"
	if err := writeSynced(tmp, b); err != nil {
		return spec.Wrap(spec.CodeJournal, "recorder", err, "writing the changes of %s", id)
	}
	if err := os.Rename(tmp, name); err != nil {
		return spec.Wrap(spec.CodeJournal, "recorder", err, "writing the changes of %s", id)
	}
	return nil
}

func writeSynced(name string, b []byte) error {
	f, err := os.OpenFile(name, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		_ = f.Close() // the write's error is the one to report
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// ReadChanges returns the text kept for process id's changes; none (and
// no error) when nothing was kept. dir is Dir of the journal.
func ReadChanges(dir, id string) ([]ChangeText, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(changesName(dir, id))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, spec.Wrap(spec.CodeJournal, "recorder", err, "reading the changes of %s", id)
	}
	return decodeChanges(b)
}

// decodeChanges decodes a changes file: untrusted bytes (a file on disk).
func decodeChanges(b []byte) ([]ChangeText, error) {
	var texts []ChangeText
	if err := json.Unmarshal(b, &texts); err != nil {
		return nil, spec.Wrap(spec.CodeJournal, "recorder", err, "decoding a changes file")
	}
	for _, t := range texts {
		if t.Path == "" || len(t.Path) > 4096 {
			return nil, spec.Errorf(spec.CodeJournal, "recorder", "a changes file names a path of %d bytes", len(t.Path))
		}
	}
	return texts, nil
}

// StdinRecording records what a caller wrote to a process's stdin, up to
// MaxStdin. Safe for concurrent use; Write never fails the caller's write:
// a failed or cut recording is marked cut.
type StdinRecording struct {
	mu   sync.Mutex
	f    *os.File
	dir  string
	id   string
	n    int64
	cut  bool
	done bool
}

// RecordStdin starts process id's stdin recording (empty, replacing any).
func (s *Store) RecordStdin(id string) (*StdinRecording, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	_ = os.Remove(stdinCutName(s.dir, id)) // a fresh recording: no cut marker from before
	f, err := os.OpenFile(stdinName(s.dir, id), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, spec.Wrap(spec.CodeJournal, "recorder", err, "recording the stdin of %s", id)
	}
	return &StdinRecording{f: f, dir: s.dir, id: id}, nil
}

// Write records b (what the caller handed the process's stdin).
func (r *StdinRecording) Write(b []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done || r.cut {
		return
	}
	if r.n+int64(len(b)) > MaxStdin {
		b = b[:MaxStdin-r.n]
		r.cut = true
	}
	n, err := r.f.Write(b)
	r.n += int64(n)
	if err != nil {
		r.cut = true
	}
}

// Close syncs the recording; a cut one gets its marker.
func (r *StdinRecording) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return nil
	}
	r.done = true
	err := r.f.Sync()
	if cerr := r.f.Close(); err == nil {
		err = cerr
	}
	if r.cut {
		if merr := writeSynced(stdinCutName(r.dir, r.id), nil); err == nil {
			err = merr
		}
	}
	if err != nil {
		return spec.Wrap(spec.CodeJournal, "recorder", err, "recording the stdin of %s", r.id)
	}
	return nil
}

// ReadStdin returns the stdin recorded for process id and whether it is
// whole (not cut at MaxStdin or by a failed write). A process with no
// stdin recording is not_found.
func ReadStdin(dir, id string) (data []byte, whole bool, err error) {
	if err := validID(id); err != nil {
		return nil, false, err
	}
	f, err := os.Open(stdinName(dir, id))
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, spec.Errorf(spec.CodeNotFound, "recorder", "process %s has no stdin recording", id)
	}
	if err != nil {
		return nil, false, spec.Wrap(spec.CodeJournal, "recorder", err, "reading the stdin of %s", id)
	}
	defer func() { _ = f.Close() }() // read only
	data, err = io.ReadAll(io.LimitReader(f, MaxStdin+1))
	if err != nil {
		return nil, false, spec.Wrap(spec.CodeJournal, "recorder", err, "reading the stdin of %s", id)
	}
	_, cerr := os.Stat(stdinCutName(dir, id))
	return data, errors.Is(cerr, os.ErrNotExist) && len(data) <= MaxStdin, nil
}

// removeSide deletes process id's side files.
func removeSide(dir, id string) error {
	for _, name := range []string{changesName(dir, id), stdinName(dir, id), stdinCutName(dir, id)} {
		if err := os.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}
