package checkpoint

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockade/stockade/spec"
)

// zeros reads as an endless run of zero bytes (a sparse file's content).
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// bigTar is a tree whose one file "work/big" claims size bytes of zeros,
// generated as it is read: nothing of it is held in memory.
func bigTar(t testing.TB, size int64) io.Reader {
	t.Helper()
	var head bytes.Buffer
	tw := tar.NewWriter(&head)
	for _, h := range []*tar.Header{
		{Name: "work/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "work/big", Typeflag: tar.TypeReg, Mode: 0o644, Size: size},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	pad := (512 - size%512) % 512
	return io.MultiReader(&head, io.LimitReader(zeros{}, size), bytes.NewReader(make([]byte, pad+1024)))
}

// tmpWatch reads a capture's stream and, every MiB of it, measures what
// the store's tmp/ and blobs/ hold: the most they held is what the
// capture wrote to the store's disk.
type tmpWatch struct {
	r       io.Reader
	dir     string
	read    int64
	next    int64
	mu      sync.Mutex
	maxDisk int64
}

func (w *tmpWatch) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	w.read += int64(n)
	if w.read >= w.next {
		w.next = w.read + 1<<20
		w.sample()
	}
	return n, err
}

func (w *tmpWatch) sample() {
	var total int64
	_ = filepath.WalkDir(w.dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				total += info.Size()
			}
		}
		return nil
	})
	w.mu.Lock()
	w.maxDisk = max(w.maxDisk, total)
	w.mu.Unlock()
}

// TestCaptureSparseFile (issue 30, defect 6): a file far past the store's
// bound (a sparse file: no blocks in the sandbox, gigabytes in a tar) is
// refused resource_exhausted before the store's disk holds more than the
// bound, and before the stream is read past it (the workload is frozen
// while it is read). One that fits the bound but not what is left of it
// is refused the same way, and content the store has already is not
// written again (a checkpoint of an unchanged tree fits a full store).
func TestCaptureSparseFile(t *testing.T) {
	const limit = 8 << 20
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		size int64
		used int64 // bytes of another blob stored first
	}{
		{"far past the bound", 256 << 20, 0},
		{"past what is left", 6 << 20, 4 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t, limit)
			if tc.used > 0 {
				if _, err := s.Capture(ctx, bigTarOf(t, tc.used, 'a'), Meta{Sandbox: "other"}); err != nil {
					t.Fatal(err)
				}
			}
			w := &tmpWatch{r: bigTar(t, tc.size), dir: s.dir}
			_, err := s.Capture(ctx, w, Meta{Sandbox: "sb"})
			w.sample()
			if !spec.IsCode(err, spec.CodeResourceExhausted) {
				t.Fatalf("a file of %d bytes against a bound of %d: %v, want resource_exhausted", tc.size, limit, err)
			}
			if w.maxDisk > limit+64<<10 {
				t.Fatalf("the store's disk held %d bytes during the capture, past its bound of %d", w.maxDisk, limit)
			}
			if w.read > limit+2<<20 {
				t.Fatalf("the capture read %d bytes of the stream before refusing it (bound %d)", w.read, limit)
			}
			if used, _ := blobUsage(t, s); used != tc.used {
				t.Fatalf("after the refusal the store holds %d bytes, want %d", used, tc.used)
			}
		})
	}
	// Content already stored costs nothing: the same 6 MiB file in a store
	// holding it (6 of 8 MiB used) is captured again.
	s := openStore(t, limit)
	if _, err := s.Capture(ctx, bigTarOf(t, 6<<20, 'b'), Meta{Sandbox: "sb", Created: time.Unix(1, 0)}); err != nil {
		t.Fatal(err)
	}
	w := &tmpWatch{r: bigTarOf(t, 6<<20, 'b'), dir: s.dir}
	if _, err := s.Capture(ctx, w, Meta{Sandbox: "sb", Created: time.Unix(2, 0)}); err != nil {
		t.Fatalf("an unchanged tree in a store that holds its content: %v", err)
	}
	if w.maxDisk > limit+64<<10 {
		t.Fatalf("the store's disk held %d bytes, past its bound of %d", w.maxDisk, limit)
	}
}

// bigTarOf is a tree of one file of size bytes of b.
func bigTarOf(t testing.TB, size int64, b byte) io.Reader {
	t.Helper()
	return bytes.NewReader(tarOf(t, "work", ent{name: "work/f", typ: tar.TypeReg, mode: 0o644, body: strings.Repeat(string(b), int(size))}))
}

// TestCaptureConcurrentBound: captures at once share one bound; together
// they never put more than it on the store's disk.
func TestCaptureConcurrentBound(t *testing.T) {
	const limit = 8 << 20
	s := openStore(t, limit)
	var wg sync.WaitGroup
	watches := make([]*tmpWatch, 4)
	errs := make([]error, 4)
	for i := range watches {
		watches[i] = &tmpWatch{r: bigTarOf(t, 3<<20, byte('c'+i)), dir: s.dir}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.Capture(context.Background(), watches[i], Meta{Sandbox: "sb", Created: time.Unix(int64(i), 0)})
		}()
	}
	wg.Wait()
	ok := 0
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
		case !spec.IsCode(err, spec.CodeResourceExhausted):
			t.Fatalf("capture %d: %v", i, err)
		}
		if watches[i].maxDisk > limit+64<<10 {
			t.Fatalf("the store's disk held %d bytes, past its bound of %d", watches[i].maxDisk, limit)
		}
	}
	if ok != 2 {
		t.Fatalf("%d captures of 3 MiB fit a bound of 8 MiB, want 2", ok)
	}
	if used, _, _ := s.Usage(); used > limit {
		t.Fatalf("the store holds %d bytes, past its bound", used)
	}
}

// linksTar is a tree of n symlinks with targets of size bytes, generated
// as it is read.
func linksTar(n, size int) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := tw.WriteHeader(&tar.Header{Name: "work/", Typeflag: tar.TypeDir, Mode: 0o755})
		target := strings.Repeat("t", size)
		for i := 0; i < n && err == nil; i++ {
			err = tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("work/l%06d", i), Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777})
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	return pr
}

// TestManifestCounted (issue 30, defect 7): a manifest is counted against
// the store's bound: a tree of links alone (no file content) past it is
// refused resource_exhausted, and nothing is kept.
func TestManifestCounted(t *testing.T) {
	s := openStore(t, 1<<20)
	m, err := s.Capture(context.Background(), linksTar(400, 4000), Meta{Sandbox: "sb"})
	if !spec.IsCode(err, spec.CodeResourceExhausted) || !strings.Contains(err.Error(), "manifest") {
		used, _, _ := s.Usage()
		info, _ := os.Stat(s.manifestPath(m.ID))
		var size int64
		if info != nil {
			size = info.Size()
		}
		t.Fatalf("a manifest past the store's bound of 1 MiB: %v (a manifest of %d bytes kept; the store counts %d bytes used), want resource_exhausted naming the manifest", err, size, used)
	}
	if ents, _ := os.ReadDir(filepath.Join(s.dir, "manifests")); len(ents) != 0 {
		t.Fatalf("kept %d manifests", len(ents))
	}
}

// TestManifestCap (issue 30, defect 7): a manifest is capped when it is
// written, not only when it is read back: a tree whose manifest would pass
// MaxManifest is refused while it is read, in bounded memory.
func TestManifestCap(t *testing.T) {
	s := openStore(t, 0)
	n := MaxManifest/4000 + 1000
	m, err := s.Capture(context.Background(), linksTar(n, 4000), Meta{Sandbox: "sb"})
	if !spec.IsCode(err, spec.CodeResourceExhausted) || !strings.Contains(err.Error(), "manifest") {
		info, _ := os.Stat(s.manifestPath(m.ID))
		var size int64
		if info != nil {
			size = info.Size()
		}
		t.Fatalf("%d links of 4000 bytes: %v (a manifest of %d bytes kept, cap %d), want resource_exhausted naming the manifest", n, err, size, MaxManifest)
	}
}

// TestBadManifestIsolated (issue 30, defect 7): one manifest that cannot be
// read (corrupt, or past MaxManifest) does not take the store down: Open,
// List, Capture, Get and Restore of the others work, its blobs are not
// collected under it, Get of it fails naming it and what to do, Verify
// reports it, and Remove takes it away.
func TestBadManifestIsolated(t *testing.T) {
	s := openStore(t, 0)
	ctx := context.Background()
	good, err := s.Capture(ctx, bytes.NewReader(tarOf(t, "work", tree...)), Meta{Sandbox: "sb", Created: time.Unix(1, 0)})
	if err != nil {
		t.Fatal(err)
	}
	const corrupt, huge = "ck-00000000000000000001", "ck-00000000000000000002"
	if err := os.WriteFile(s.manifestPath(corrupt), []byte(`{"id":"ck-00000000000000000001","entries":[`), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(s.manifestPath(huge))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"id":"ck-00000000000000000002","sandbox":"sb","files":1,"entries":[{"path":".","type":"dir","mode":493,"mtime":"2024-01-01T00:00:00Z"}]}`); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(MaxManifest + 1); err != nil { // sparse: no blocks
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := Open(s.dir, 0)
	if err != nil {
		t.Fatalf("a store with one bad manifest does not open: %v", err)
	}
	list, err := again.List()
	if err != nil || len(list) != 1 || list[0].ID != good.ID {
		t.Fatalf("list beside bad manifests: %+v %v", list, err)
	}
	if digest(t, restored(t, again, good.ID, "work")) != digest(t, tarOf(t, "work", tree...)) {
		t.Fatal("the good checkpoint changed")
	}
	if _, err := again.Capture(ctx, bytes.NewReader(tarOf(t, "work", ent{name: "work/x", typ: tar.TypeReg, body: "x"})), Meta{Sandbox: "sb2", Created: time.Unix(2, 0)}); err != nil {
		t.Fatalf("a capture beside bad manifests: %v", err)
	}
	for _, id := range []string{corrupt, huge} {
		if _, err := again.Get(id); !spec.IsCode(err, spec.CodeJournal) || !strings.Contains(err.Error(), id) || !strings.Contains(err.Error(), "remove") {
			t.Fatalf("get of bad manifest %s: %v, want a journal error naming it and saying to remove it", id, err)
		}
	}
	if err := again.Verify(); err == nil || !strings.Contains(err.Error(), corrupt) || !strings.Contains(err.Error(), huge) {
		t.Fatalf("verify: %v", err)
	}
	for _, id := range []string{corrupt, huge} {
		if err := again.Remove(id); err != nil {
			t.Fatalf("remove of bad manifest %s: %v", id, err)
		}
	}
	if err := again.Verify(); err != nil {
		t.Fatal(err)
	}
	if list, err := again.List(); err != nil || len(list) != 2 {
		t.Fatalf("list after the removes: %+v %v", list, err)
	}
}

// hostileNames is a tree whose names and link targets are bytes, not
// text: a non-UTF-8 file and directory name, an absolute link (every
// Python venv has one), a link leaving the tree, a link whose target is
// not UTF-8, a hardlink to a non-UTF-8 name.
var hostileNames = []ent{
	{name: "work/n\xff\xfe.txt", typ: tar.TypeReg, mode: 0o644, body: "latin-1 name\n"},
	{name: "work/d\xe9/", typ: tar.TypeDir, mode: 0o755},
	{name: "work/d\xe9/f", typ: tar.TypeReg, mode: 0o600, body: "in a latin-1 dir\n"},
	{name: "work/python3", typ: tar.TypeSymlink, mode: 0o777, link: "/usr/bin/python3.11"},
	{name: "work/up", typ: tar.TypeSymlink, mode: 0o777, link: "../outside"},
	{name: "work/raw", typ: tar.TypeSymlink, mode: 0o777, link: "t\xff\x01 \"\\x"},
	{name: "work/h\xff", typ: tar.TypeLink, mode: 0o644, link: "work/n\xff\xfe.txt"},
}

// TestCaptureSkipsUnrestorableLinks: a symlink whose relative target
// climbs out of the workspace by its own ".." is one Docker's extraction
// refuses to make: it is skipped and named (as FIFOs are), so the
// checkpoint restores; one that leaves the tree but stays in the workspace
// is kept.
func TestCaptureSkipsUnrestorableLinks(t *testing.T) {
	s := openStore(t, 0)
	m, err := s.Capture(context.Background(), bytes.NewReader(tarOf(t, "work",
		ent{name: "work/d/", typ: tar.TypeDir, mode: 0o755},
		ent{name: "work/d/up", typ: tar.TypeSymlink, link: "../../../etc/passwd"},
		ent{name: "work/d/in", typ: tar.TypeSymlink, link: "../../x"},
		ent{name: "work/d/abs", typ: tar.TypeSymlink, link: "/etc/passwd"},
	)), Meta{Sandbox: "sb"})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Skipped) != 1 || !strings.Contains(m.Skipped[0], `"d/up"`) || !strings.Contains(m.Skipped[0], "climbing out") || m.Files != 4 {
		t.Fatalf("skipped %q, %d entries", m.Skipped, m.Files)
	}
}

// TestCaptureBytesExact (issue 30, defect 8): names and link targets are
// data, restored byte for byte: what Capture stores from a tree of
// non-UTF-8 names and absolute or escaping links, Restore gives back
// exactly, also after the store is reopened (the manifest read back).
func TestCaptureBytesExact(t *testing.T) {
	s := openStore(t, 0)
	in := tarOf(t, "work", hostileNames...)
	m, err := s.Capture(context.Background(), bytes.NewReader(in), Meta{Sandbox: "sb"})
	if err != nil {
		t.Fatalf("a tree with non-UTF-8 names and absolute links: %v", err)
	}
	again, err := Open(s.dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := restored(t, again, m.ID, "work")
	if digest(t, out) != digest(t, in) {
		t.Fatal("the restored tree differs")
	}
	want := map[string]string{}
	for _, e := range hostileNames {
		want[strings.TrimSuffix(e.name, "/")] = e.link
	}
	tr := tar.NewReader(bytes.NewReader(out))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		if name == "work" {
			continue
		}
		link, ok := want[name]
		if !ok || h.Linkname != link {
			t.Fatalf("restored %q → %q, not in the tree as such", h.Name, h.Linkname)
		}
		delete(want, name)
	}
	if len(want) != 0 {
		t.Fatalf("not restored: %q", want)
	}
}

// TestManifestEncoding: the manifest written one entry at a time is
// json.Marshal's encoding, and its size is what the store counts.
func TestManifestEncoding(t *testing.T) {
	s := openStore(t, 0)
	m, err := s.Capture(context.Background(), bytes.NewReader(tarOf(t, "work", append(append([]ent(nil), tree...), hostileNames[:6]...)...)), Meta{Sandbox: "sb", Env: []string{"A=<&>"}})
	if err != nil {
		t.Fatal(err)
	}
	want, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := encodeManifest(m)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("streamed:\n%s\njson.Marshal:\n%s\n%v", got, want, err)
	}
	onDisk, err := os.ReadFile(s.manifestPath(m.ID))
	if err != nil || !bytes.Equal(onDisk, want) {
		t.Fatalf("on disk: %s %v", onDisk, err)
	}
	blobs, _ := blobUsage(t, s)
	if used, _, _ := s.Usage(); used != blobs+int64(len(onDisk)) {
		t.Fatalf("usage %d, want %d of blobs and %d of manifest", used, blobs, len(onDisk))
	}
	if !bytes.Contains(onDisk, []byte(`"path_b64":`)) || !bytes.Contains(onDisk, []byte(`"link_b64":`)) {
		t.Fatalf("names not UTF-8 are not kept as bytes: %s", onDisk)
	}
}
