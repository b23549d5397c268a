package journal

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.etcd.io/bbolt"

	"github.com/stockade/stockade/spec"
)

// copySource is a writable journal with a daemon id, a live sandbox, a
// terminal process and a runtime event.
func copySource(t *testing.T, c *clock) *Journal {
	t.Helper()
	j := open(t, tempPath(t), Options{Now: c.Now})
	if err := j.BindDaemon(context.Background(), "daemon-1"); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, j, rec(sb("sb1"), "sandbox.reserved", map[string]string{"image": "alpine"}), rec(pr("p1"), "process.reserved", nil))
	mustAppend(t, j, Record{Key: pr("p1"), Type: "process.exited", Terminal: true}, rec(Key{Kind: KindRuntime, ID: "rt"}, "runtime.started", 1))
	return j
}

// contents is everything the read API shows of a journal.
type contents struct {
	Owner, Daemon string
	Live          []LiveEntity
	Streams       map[Key][]Event
	Export        string
}

func contentsOf(t *testing.T, j *Journal) contents {
	t.Helper()
	c := contents{Owner: j.Owner(), Daemon: j.DaemonID(), Live: liveAll(t, j), Streams: map[Key][]Event{}}
	var keys []Key
	if err := j.Streams(func(k Key) error { keys = append(keys, k); return nil }); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		c.Streams[k] = readAll(t, j, k)
	}
	var b bytes.Buffer
	if err := j.Export(&b, nil); err != nil {
		t.Fatal(err)
	}
	c.Export = b.String()
	return c
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// dirNames lists dir, so a test sees any file left behind.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

func copyToFile(t *testing.T, j *Journal, dst string) {
	t.Helper()
	f, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	n, err := j.CopyTo(f)
	if err != nil {
		t.Fatalf("CopyTo: %v", err)
	}
	if fi, err := f.Stat(); err != nil || fi.Size() != n {
		t.Fatalf("CopyTo reported %d bytes, file: %v %v", n, fi, err)
	}
}

func copyFile(t *testing.T, j *Journal, dst string) {
	t.Helper()
	n, err := j.CopyFile(dst)
	if err != nil {
		t.Fatalf("CopyFile: %v", err)
	}
	if fi, err := os.Stat(dst); err != nil || fi.Size() != n {
		t.Fatalf("CopyFile reported %d bytes, file: %v %v", n, fi, err)
	}
}

// copyOfCopy copies j with first, opens that copy read-only and copies it
// with second.
func copyOfCopy(first, second func(*testing.T, *Journal, string)) func(*testing.T, *Journal, string) {
	return func(t *testing.T, j *Journal, dst string) {
		mid := filepath.Join(t.TempDir(), "first.db")
		first(t, j, mid)
		m, err := Open(mid, Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = m.Close() }()
		second(t, m, dst)
	}
}

// Every way of copying a journal yields a file that a writable Open refuses,
// untouched, and that reads like the journal did when it was copied; the
// journal itself stays writable.
func TestCopyIsNeverWritable(t *testing.T) {
	cases := []struct {
		name string
		copy func(t *testing.T, j *Journal, dst string)
	}{
		{"CopyTo", copyToFile},
		{"CopyFile", copyFile},
		{"CopyFile into a new directory", func(t *testing.T, j *Journal, dst string) {
			mid := filepath.Join(t.TempDir(), "new", "dir", "copy.db")
			copyFile(t, j, mid)
			if err := os.Rename(mid, dst); err != nil {
				t.Fatal(err)
			}
		}},
		{"CopyTo of a copy", copyOfCopy(copyFile, copyToFile)},
		{"CopyFile of a copy", copyOfCopy(copyToFile, copyFile)},
		{"Compact of a copy", func(t *testing.T, j *Journal, dst string) {
			mid := filepath.Join(t.TempDir(), "first.db")
			copyFile(t, j, mid)
			if err := Compact(mid, dst); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newClock()
			j := copySource(t, c)
			want := contentsOf(t, j)
			dir := t.TempDir()
			cp := filepath.Join(dir, "copy.db")
			before := c.Now()
			tc.copy(t, j, cp)
			after := c.Now()
			// The journal goes on after the copy; the copy does not see it.
			mustAppend(t, j, rec(sb("sb2"), "sandbox.reserved", nil))
			if _, ok := j.CopyOf(); ok {
				t.Fatal("the journal copied from reports itself a copy")
			}

			orig := readFile(t, cp)
			for _, opts := range []Options{{Owner: j.Owner()}, {}} {
				cj, err := Open(cp, opts)
				if err == nil {
					if err := cj.Close(); err != nil {
						t.Error(err)
					}
					t.Fatalf("writable Open(%+v) of a copy succeeded", opts)
				}
				wantCode(t, err, spec.CodeIdentityMismatch, ErrCopy)
				if !errors.Is(err, spec.ErrIdentityMismatch) {
					t.Fatalf("%v does not match spec.ErrIdentityMismatch", err)
				}
				msg := err.Error()
				for _, s := range []string{cp, j.Path(), "stockade journal restore", "journal.Restore"} {
					if !strings.Contains(msg, s) {
						t.Errorf("error %q does not name %q", msg, s)
					}
				}
			}
			if !bytes.Equal(readFile(t, cp), orig) {
				t.Fatal("a refused Open changed the copy")
			}
			if names := dirNames(t, dir); !slices.Equal(names, []string{"copy.db"}) {
				t.Fatalf("files beside the copy: %q", names)
			}

			cj := open(t, cp, Options{ReadOnly: true, Owner: j.Owner()})
			ci, ok := cj.CopyOf()
			if !ok || ci.Of != j.Path() || !ci.At.After(before) || !ci.At.Before(after) {
				t.Fatalf("CopyOf = %+v %v, want %s between %s and %s", ci, ok, j.Path(), before, after)
			}
			if err := cj.Verify(); err != nil {
				t.Fatal(err)
			}
			if got := contentsOf(t, cj); !reflect.DeepEqual(got, want) {
				t.Fatalf("copy reads\n%+v\nwant\n%+v", got, want)
			}
			if err := cj.Close(); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(readFile(t, cp), orig) {
				t.Fatal("a read-only Open changed the copy")
			}

			// The journal was never marked: it reopens writable.
			path, owner := j.Path(), j.Owner()
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			j2 := open(t, path, Options{Owner: owner})
			if _, ok := j2.CopyOf(); ok {
				t.Fatal("the journal copied from was marked")
			}
			mustAppend(t, j2, rec(sb("sb3"), "sandbox.reserved", nil))
		})
	}
}

// The marker is its presence: a damaged one still refuses a writable Open.
func TestCopyMarkerPresenceIsEnough(t *testing.T) {
	cases := []struct {
		name   string
		edit   func(meta *bbolt.Bucket) error
		wantIn string
	}{
		{"empty path", func(m *bbolt.Bucket) error { return m.Put(metaCopyOf, []byte{}) }, `""`},
		{"bad time", func(m *bbolt.Bucket) error { return m.Put(metaCopiedAt, []byte("yesterday")) }, "unrecorded time"},
		{"no time", func(m *bbolt.Bucket) error { return m.Delete(metaCopiedAt) }, "unrecorded time"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := copySource(t, newClock())
			cp := filepath.Join(t.TempDir(), "copy.db")
			copyFile(t, j, cp)
			if err := editMeta(cp, tc.edit); err != nil {
				t.Fatal(err)
			}
			_, err := Open(cp, Options{})
			wantCode(t, err, spec.CodeIdentityMismatch, ErrCopy)
			if !strings.Contains(err.Error(), tc.wantIn) {
				t.Fatalf("error %q lacks %q", err, tc.wantIn)
			}
			open(t, cp, Options{ReadOnly: true})
		})
	}
}

// CopyFile never overwrites, least of all the journal itself.
func TestCopyFileRefusesExisting(t *testing.T) {
	j := copySource(t, newClock())
	other := filepath.Join(t.TempDir(), "other")
	if err := os.WriteFile(other, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dst := range []string{j.Path(), other} {
		before := readFile(t, dst)
		_, err := j.CopyFile(dst)
		wantCode(t, err, spec.CodeInvalidArgument, fs.ErrExist)
		if !bytes.Equal(readFile(t, dst), before) {
			t.Fatalf("CopyFile changed %s", dst)
		}
	}
	if names := dirNames(t, filepath.Dir(other)); !slices.Equal(names, []string{"other"}) {
		t.Fatalf("files left: %q", names)
	}
	mustAppend(t, j, rec(sb("sb2"), "sandbox.reserved", nil))
	if err := j.Verify(); err != nil {
		t.Fatal(err)
	}
	if _, ok := j.CopyOf(); ok {
		t.Fatal("journal marked")
	}
}

// Restore turns a copy back into a writable journal with the same owner,
// daemon and events, in a new file, leaving the copy as it was.
func TestRestore(t *testing.T) {
	for _, tc := range []struct {
		name string
		copy func(t *testing.T, j *Journal, dst string)
	}{
		{"CopyFile", copyFile},
		{"CopyTo", copyToFile},
		{"copy of a copy", copyOfCopy(copyFile, copyToFile)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := copySource(t, newClock())
			want := contentsOf(t, j)
			cp := filepath.Join(t.TempDir(), "copy.db")
			tc.copy(t, j, cp)
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			cpBytes := readFile(t, cp)

			dir := filepath.Join(t.TempDir(), "restored")
			dst := filepath.Join(dir, "journal.db")
			if err := Restore(cp, dst); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(readFile(t, cp), cpBytes) {
				t.Fatal("Restore changed the copy")
			}
			if names := dirNames(t, dir); !slices.Equal(names, []string{"journal.db"}) {
				t.Fatalf("files beside the restored journal: %q", names)
			}
			r := open(t, dst, Options{Owner: want.Owner})
			if ci, ok := r.CopyOf(); ok {
				t.Fatalf("restored journal still a copy of %+v", ci)
			}
			if err := r.Verify(); err != nil {
				t.Fatal(err)
			}
			if got := contentsOf(t, r); !reflect.DeepEqual(got, want) {
				t.Fatalf("restored journal reads\n%+v\nwant\n%+v", got, want)
			}
			if err := r.BindDaemon(context.Background(), want.Daemon); err != nil {
				t.Fatal(err)
			}
			mustAppend(t, r, rec(sb("sb2"), "sandbox.reserved", nil))

			// The copy is still a copy.
			_, err := Open(cp, Options{})
			wantCode(t, err, spec.CodeIdentityMismatch, ErrCopy)
		})
	}
}

func TestRestoreRefuses(t *testing.T) {
	j := copySource(t, newClock())
	journalPath := j.Path()
	cp := filepath.Join(t.TempDir(), "copy.db")
	copyFile(t, j, cp)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	notJournal := filepath.Join(t.TempDir(), "junk")
	if err := os.WriteFile(notJournal, bytes.Repeat([]byte("x"), 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	existing := filepath.Join(t.TempDir(), "existing")
	if err := os.WriteFile(existing, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name      string
		src, dst  string
		code      spec.Code
		cause     error
		dstBefore []byte // nil: dst must not exist afterwards
	}{
		{"existing destination", cp, existing, spec.CodeInvalidArgument, fs.ErrExist, []byte("keep")},
		{"onto the copy itself", cp, cp, spec.CodeInvalidArgument, fs.ErrExist, readFile(t, cp)},
		{"onto the journal", cp, journalPath, spec.CodeInvalidArgument, fs.ErrExist, readFile(t, journalPath)},
		{"not a copy", journalPath, filepath.Join(t.TempDir(), "a.db"), spec.CodeInvalidArgument, nil, nil},
		{"missing copy", filepath.Join(t.TempDir(), "none.db"), filepath.Join(t.TempDir(), "b.db"), spec.CodeNotFound, fs.ErrNotExist, nil},
		{"not a journal", notJournal, filepath.Join(t.TempDir(), "c.db"), spec.CodeJournal, ErrNotJournal, nil},
		{"empty destination", cp, "", spec.CodeInvalidArgument, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srcBefore, _ := os.ReadFile(tc.src)
			err := Restore(tc.src, tc.dst)
			wantCode(t, err, tc.code, tc.cause)
			if tc.dst == "" {
				return
			}
			got, rerr := os.ReadFile(tc.dst)
			switch {
			case tc.dstBefore == nil && !errors.Is(rerr, fs.ErrNotExist):
				t.Fatalf("destination %s exists after a refused Restore", tc.dst)
			case tc.dstBefore != nil && !bytes.Equal(got, tc.dstBefore):
				t.Fatalf("destination %s changed", tc.dst)
			}
			if after, _ := os.ReadFile(tc.src); !bytes.Equal(after, srcBefore) {
				t.Fatalf("source %s changed", tc.src)
			}
			want := []string{filepath.Base(tc.dst)}
			if tc.dstBefore == nil {
				want = nil
			}
			// cp and journalPath have siblings of their own; elsewhere
			// nothing may be left beside the destination.
			if tc.dst != cp && tc.dst != journalPath {
				if names := dirNames(t, filepath.Dir(tc.dst)); !slices.Equal(names, want) {
					t.Fatalf("files beside %s: %q", tc.dst, names)
				}
			}
		})
	}
	// The journal, never a copy, is still writable.
	open(t, journalPath, Options{})
}

// A writable Open's refusal comes before the owner check, so a copy is
// named as such even when opened with another owner.
func TestCopyRefusedBeforeOwnerCheck(t *testing.T) {
	j := copySource(t, newClock())
	cp := filepath.Join(t.TempDir(), "copy.db")
	copyFile(t, j, cp)
	_, err := Open(cp, Options{Owner: "someone-else"})
	wantCode(t, err, spec.CodeIdentityMismatch, ErrCopy)
}
