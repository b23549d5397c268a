package checkpoint

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzManifest: any bytes read back as a manifest decode without a panic
// into a manifest whose every field holds (re-encoded, it decodes the
// same), or a journal error.
func FuzzManifest(f *testing.F) {
	s := openStore(f, 0)
	m, err := s.Capture(context.Background(), bytes.NewReader(tarOf(f, "work", tree...)), Meta{Sandbox: "sb", Name: "n", Env: []string{"A=1"}})
	if err != nil {
		f.Fatal(err)
	}
	good, err := os.ReadFile(s.manifestPath(m.ID))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"id":"ck-0123456789abcdef0123","files":1,"entries":[{"path":".","type":"dir","mode":493}]}`))
	f.Add([]byte(`{"id":"ck-0123456789abcdef0123","files":2,"entries":[{"path":".","type":"dir"},{"path":"../x","type":"dir"}]}`))
	f.Add([]byte(`{"id":"ck-0123456789abcdef0123","files":2,"entries":[{"path":".","type":"dir"},{"path":"h","type":"hardlink","link":"."}]}`))
	f.Add(bytes.Replace(good, []byte(`"bytes":`), []byte(`"bytes":1`), 1))
	hostile, err := s.Capture(context.Background(), bytes.NewReader(tarOf(f, "work", hostileNames...)), Meta{Sandbox: "sb"})
	if err != nil {
		f.Fatal(err)
	}
	b, err := os.ReadFile(s.manifestPath(hostile.ID))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"id":"ck-0123456789abcdef0123","files":2,"entries":[{"path":".","type":"dir"},{"path_b64":"bv8=","type":"symlink","link_b64":"L/8="}]}`))
	f.Add([]byte(`{"id":"ck-0123456789abcdef0123","files":2,"entries":[{"path":".","type":"dir"},{"path":"a","path_b64":"bv8=","type":"dir"}]}`))
	f.Add([]byte(`{"id":"ck-0123456789abcdef0123","files":2,"entries":[{"path":".","type":"dir"},{"path_b64":"YQ==","type":"dir"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeManifest(b)
		if err != nil {
			return
		}
		again, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		back, err := decodeManifest(again)
		if err != nil {
			t.Fatalf("a decoded manifest does not decode again: %v", err)
		}
		for i := range m.Entries {
			if back.Entries[i].Path != m.Entries[i].Path || back.Entries[i].Link != m.Entries[i].Link {
				t.Fatalf("entry %d changed on a round trip: %q → %q", i, m.Entries[i].Path, back.Entries[i].Path)
			}
		}
	})
}

// FuzzCapture: any bytes as an archive are captured or refused without a
// panic, and nothing is ever written outside the store's directory; what
// is captured restores to the same tree.
func FuzzCapture(f *testing.F) {
	f.Add(tarOf(f, "work", tree...))
	f.Add(tarOf(f, "work", ent{name: "work/../../x", typ: tar.TypeReg, body: "x"}))
	f.Add(tarOf(f, "work", ent{name: "work/l", typ: tar.TypeLink, link: "/etc/passwd"}))
	f.Add(tarRaw(f, ent{name: "a/", typ: tar.TypeDir}, ent{name: "a/b", typ: tar.TypeReg, body: "b"}))
	f.Add([]byte("not a tar"))
	f.Add(tarOf(f, "work", hostileNames...))
	f.Fuzz(func(t *testing.T, b []byte) {
		root := t.TempDir()
		s, err := Open(filepath.Join(root, "store"), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		m, err := s.Capture(context.Background(), bytes.NewReader(b), Meta{Sandbox: "sb"})
		ents, _ := os.ReadDir(root)
		if len(ents) != 1 || ents[0].Name() != "store" {
			t.Fatalf("wrote outside the store: %v", ents)
		}
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := s.Restore(m.ID, &out, "w", 1, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := TreeDigest(&out); err != nil && !strings.Contains(err.Error(), "checkpoint") {
			t.Fatal(err)
		}
	})
}
