package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stockade/stockade/warden/wire"
)

// workspace makes a temporary tree for the warden to track as its
// /workspace (startWarden(t, "-workspace", root)) with a work directory
// holding files, and returns the root and the work directory.
func workspace(t *testing.T, files map[string]string) (string, string) {
	t.Helper()
	root := t.TempDir()
	work := filepath.Join(root, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(work, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root, work
}

// brief is a Change as the tests compare it: op, path (relative to
// /workspace/work), from, kind and the kept texts ("-": none).
type brief struct {
	op, path, from, kind, before, after string
}

func briefs(t *testing.T, m *wire.Changes) []brief {
	t.Helper()
	var out []brief
	for _, c := range m.Entries {
		text := func(s *string) string {
			if s == nil {
				return "-"
			}
			return *s
		}
		b := brief{op: c.Op, path: strings.TrimPrefix(c.Path, "/workspace/work/"), kind: c.Kind, before: text(c.Before), after: text(c.After)}
		if c.From != "" {
			b.from = strings.TrimPrefix(c.From, "/workspace/work/")
		}
		if c.Op != wire.OpDeleted && c.Kind == wire.KindFile && c.SHA256 == "" {
			t.Errorf("%s: a file without a hash (%q)", c.Path, c.Unhashed)
		}
		out = append(out, b)
	}
	return out
}

func TestChanges(t *testing.T) {
	for _, tc := range []struct {
		name      string
		files     map[string]string
		script    string
		noChanges bool
		want      []brief
		untracked bool
	}{
		{
			name:   "create modify delete rename mkdir",
			files:  map[string]string{"keep.txt": "old\n", "gone.txt": "bye\n", "moveme.txt": "m\n", "untouched.txt": "u\n"},
			script: "echo new > created.txt; echo changed > keep.txt; rm gone.txt; mv moveme.txt moved.txt; mkdir d; cat untouched.txt >/dev/null",
			want: []brief{
				{op: "created", path: "created.txt", kind: "file", before: "-", after: "new\n"},
				{op: "created", path: "d", kind: "dir", before: "-", after: "-"},
				{op: "deleted", path: "gone.txt", kind: "file", before: "bye\n", after: "-"},
				{op: "modified", path: "keep.txt", kind: "file", before: "old\n", after: "changed\n"},
				{op: "renamed", path: "moved.txt", from: "moveme.txt", kind: "file", before: "m\n", after: "m\n"},
			},
		},
		{
			name:   "writes nothing",
			files:  map[string]string{"a.txt": "a\n"},
			script: "cat a.txt; ls >/dev/null",
		},
		{
			name:   "a write that changes nothing",
			files:  map[string]string{"a.txt": "a\n"},
			script: "exec 3>>a.txt",
		},
		{
			name:   "a child process's writes are its parent's",
			script: "sh -c 'echo x > f'; sh -c 'sh -c \"mkdir -p sub/deeper\"'",
			want: []brief{
				{op: "created", path: "f", kind: "file", before: "-", after: "x\n"},
				{op: "created", path: "sub", kind: "dir", before: "-", after: "-"},
				{op: "created", path: "sub/deeper", kind: "dir", before: "-", after: "-"},
			},
		},
		{
			name:   "a renamed directory moves what was touched in it",
			script: "mkdir a && echo x > a/f && mv a b",
			want: []brief{
				{op: "created", path: "b", kind: "dir", before: "-", after: "-"},
				{op: "created", path: "b/f", kind: "file", before: "-", after: "x\n"},
			},
		},
		{
			name:   "binary content is hashed, not kept",
			script: "printf 'a\\000b' > bin",
			want:   []brief{{op: "created", path: "bin", kind: "file", before: "-", after: "-"}},
		},
		{
			name:   "outside the workspace is not tracked",
			script: "echo x > ../../outside-$$ 2>/dev/null; rm -f ../../outside-$$",
		},
		{
			// The mtime is the caller's to set; the ctime is not.
			name:   "a rewrite at the same size with its mtime put back",
			files:  map[string]string{"a.txt": "aaaa\n"},
			script: "touch -r a.txt /tmp/ref.$$ && printf 'bbbb\\n' > a.txt && touch -r /tmp/ref.$$ a.txt; rm -f /tmp/ref.$$",
			want:   []brief{{op: "modified", path: "a.txt", kind: "file", before: "aaaa\n", after: "bbbb\n"}},
		},
		{
			name:   "a write through a directory symlink outside the workspace",
			script: "ln -s \"$PWD\" /tmp/l.$$ && echo x > /tmp/l.$$/f; rm -f /tmp/l.$$",
			want:   []brief{{op: "created", path: "f", kind: "file", before: "-", after: "x\n"}},
		},
		{
			name:   "a write through a final symlink outside the workspace",
			files:  map[string]string{"g": "old\n"},
			script: "ln -s \"$PWD/g\" /tmp/m.$$ && echo new > /tmp/m.$$; ln -s \"$PWD/h\" /tmp/n.$$ && echo h > /tmp/n.$$; rm -f /tmp/m.$$ /tmp/n.$$",
			want: []brief{
				{op: "modified", path: "g", kind: "file", before: "old\n", after: "new\n"},
				{op: "created", path: "h", kind: "file", before: "-", after: "h\n"},
			},
		},
		{
			name:   "a write through /proc/self/cwd",
			script: "echo z > /proc/self/cwd/z; mkdir /proc/self/cwd/../work/d",
			want: []brief{
				{op: "created", path: "d", kind: "dir", before: "-", after: "-"},
				{op: "created", path: "z", kind: "file", before: "-", after: "z\n"},
			},
		},
		{
			name:   "mkdir -p of directories already there changes nothing",
			script: "mkdir -p /tmp/x.$$ && cd .. && mkdir -p work/new && cd work && mkdir -p new; rmdir /tmp/x.$$",
			want:   []brief{{op: "created", path: "new", kind: "dir", before: "-", after: "-"}},
		},
		{
			name:   "a write through /dev/fd and //proc",
			files:  map[string]string{"victim.txt": "good\n", "a.txt": "a\n"},
			script: "exec 9<\"$PWD\"; echo evil > /dev/fd/9/victim.txt; rm //proc/self/fd/9/a.txt; rm /tmp/../proc/self/cwd/missing 2>/dev/null; true",
			want: []brief{
				{op: "deleted", path: "a.txt", kind: "file", before: "a\n", after: "-"},
				{op: "modified", path: "victim.txt", kind: "file", before: "good\n", after: "evil\n"},
			},
		},
		{
			name:   "a directory named as deleted",
			script: "mkdir 'd (deleted)' && echo x > 'd (deleted)/f' && cd 'd (deleted)' && echo y > g",
			want: []brief{
				{op: "created", path: "d (deleted)", kind: "dir", before: "-", after: "-"},
				{op: "created", path: "d (deleted)/f", kind: "file", before: "-", after: "x\n"},
				{op: "created", path: "d (deleted)/g", kind: "file", before: "-", after: "y\n"},
			},
		},
		{
			name:   "a write through a hard link it made",
			files:  map[string]string{"victim.txt": "good\n"},
			script: "ln victim.txt .h && echo evil > .h && rm .h",
			want:   []brief{{op: "modified", path: "victim.txt", kind: "file", before: "good\n", after: "evil\n"}},
		},
		{
			name:   "a directory renamed away and made again",
			files:  map[string]string{"keep": ""},
			script: "mkdir src && echo good > src/main.c && cd .. && mv work/src work/src.bak && mkdir work/src && cp work/src.bak/main.c work/src/ && echo evil >> work/src/main.c",
			want: []brief{
				{op: "created", path: "src", kind: "dir", before: "-", after: "-"},
				{op: "created", path: "src.bak", kind: "dir", before: "-", after: "-"},
				{op: "created", path: "src.bak/main.c", kind: "file", before: "-", after: "good\n"},
				{op: "created", path: "src/main.c", kind: "file", before: "-", after: "good\nevil\n"},
			},
		},
		{
			name:   "the older touch is kept where a rename brings it",
			files:  map[string]string{"x": ""},
			script: "mv x y && mv y z && : >> z",
			want:   []brief{{op: "renamed", path: "z", from: "x", kind: "file", before: "", after: ""}},
		},
		{
			name:   "a unix socket bound by path",
			script: "python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('sock')\"",
			want:   []brief{{op: "created", path: "sock", kind: "other", before: "-", after: "-"}},
		},
		{
			name:      "no_changes",
			script:    "echo x > f",
			noChanges: true,
			untracked: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, work := workspace(t, tc.files)
			w := startWarden(t, "-workspace", root)
			c := w.link(wire.Init{})
			c.spawn(1, wire.Spawn{Argv: []string{"sh", "-c", tc.script}, Dir: work, NoChanges: tc.noChanges})
			x, st := c.waitExited(1)
			if x.Code != 0 {
				t.Fatalf("exit %+v, output %q", x, st.out)
			}
			m := st.changes
			if tc.untracked {
				if m.Untracked == "" {
					t.Errorf("changes %+v, want untracked", m)
				}
				return
			}
			if m.Untracked != "" || m.Incomplete != "" {
				t.Fatalf("untracked %q, incomplete %q", m.Untracked, m.Incomplete)
			}
			got := briefs(t, m)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("changes\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// Two processes that run at the same time each see only their own writes:
// attribution is by who wrote, not when. Each writes one file, waits for
// the other's first, then writes a second, so their writes interleave.
func TestChangesOverlapping(t *testing.T) {
	root, work := workspace(t, nil)
	w := startWarden(t, "-workspace", root)
	c := w.link(wire.Init{})
	script := func(me, other string) string {
		return fmt.Sprintf("echo %[1]s > %[1]s1; while [ ! -e %[2]s1 ]; do sleep 0.01; done; echo %[1]s > %[1]s2", me, other)
	}
	c.spawn(1, wire.Spawn{Argv: []string{"sh", "-c", script("a", "b")}, Dir: work})
	c.spawn(2, wire.Spawn{Argv: []string{"sh", "-c", script("b", "a")}, Dir: work})
	for ch, me := range map[uint32]string{1: "a", 2: "b"} {
		_, st := c.waitExited(ch)
		var paths []string
		for _, e := range st.changes.Entries {
			paths = append(paths, e.Op+" "+strings.TrimPrefix(e.Path, "/workspace/work/"))
		}
		sort.Strings(paths)
		if want := []string{"created " + me + "1", "created " + me + "2"}; fmt.Sprint(paths) != fmt.Sprint(want) {
			t.Errorf("process %s: changes %v, want %v", me, paths, want)
		}
	}
}

// A touch that changed nothing is no change of that process: one whose
// only call on a path is a failing rmdir (the path absent) is not credited
// with the file a neighbour creates there meanwhile.
func TestChangesNotCreditedWithANeighboursFile(t *testing.T) {
	root, work := workspace(t, nil)
	w := startWarden(t, "-workspace", root)
	c := w.link(wire.Init{})
	c.spawn(1, wire.Spawn{Argv: []string{"sh", "-c", "rmdir neighbour.txt 2>/dev/null; : > tried; while [ ! -e neighbour.txt ]; do sleep 0.01; done"}, Dir: work})
	c.spawn(2, wire.Spawn{Argv: []string{"sh", "-c", "while [ ! -e tried ]; do sleep 0.01; done; echo n > neighbour.txt"}, Dir: work})
	for ch, want := range map[uint32]string{1: "[created tried]", 2: "[created neighbour.txt]"} {
		x, st := c.waitExited(ch)
		if x.Code != 0 || st.changes.Incomplete != "" {
			t.Fatalf("process %d: exit %+v, incomplete %q", ch, x, st.changes.Incomplete)
		}
		var got []string
		for _, e := range st.changes.Entries {
			got = append(got, e.Op+" "+strings.TrimPrefix(e.Path, "/workspace/work/"))
		}
		if fmt.Sprint(got) != want {
			t.Errorf("process %d: changes %v, want %s", ch, got, want)
		}
	}
}

// A directory renamed twice (d→e→g) carries what was touched in it before:
// the first rename stands through the second.
func TestChangesRenameChain(t *testing.T) {
	root, work := workspace(t, nil)
	w := startWarden(t, "-workspace", root)
	c := w.link(wire.Init{})
	c.spawn(1, wire.Spawn{Argv: []string{"sh", "-c", "mkdir d && echo A > d/f"}, Dir: work})
	c.waitExited(1)
	c.spawn(2, wire.Spawn{Argv: []string{"sh", "-c", "echo B > d/f && mv d e && mv e g"}, Dir: work})
	_, st := c.waitExited(2)
	got := briefs(t, st.changes)
	want := []brief{
		{op: "renamed", path: "g", from: "d", kind: "dir", before: "-", after: "-"},
		{op: "modified", path: "g/f", kind: "file", before: "A\n", after: "B\n"},
	}
	if st.changes.Incomplete != "" || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("changes %+v (incomplete %q)\nwant %+v", got, st.changes.Incomplete, want)
	}
}

// A chown clears setuid: the mode's change is the chown's process's.
func TestChangesChownClearsSetuid(t *testing.T) {
	root, work := workspace(t, map[string]string{"s": "x\n"})
	w := startWarden(t, "-workspace", root)
	c := w.link(wire.Init{})
	for ch, step := range []struct{ script, want string }{
		{"chmod 4755 s", "[modified s 2541]"},
		{"chown $(id -u):$(id -g) s", "[modified s 493]"},
	} {
		c.spawn(uint32(ch+1), wire.Spawn{Argv: []string{"sh", "-c", step.script}, Dir: work})
		x, st := c.waitExited(uint32(ch + 1))
		var got []string
		for _, e := range st.changes.Entries {
			got = append(got, fmt.Sprintf("%s %s %d", e.Op, strings.TrimPrefix(e.Path, "/workspace/work/"), e.Mode))
		}
		if x.Code != 0 || fmt.Sprint(got) != step.want {
			t.Errorf("%s: exit %+v, changes %v, want %s", step.script, x, got, step.want)
		}
	}
}

// A process that leaves a descendant writing after it ended is reported
// incomplete: what the descendant does later is not heard.
func TestChangesDescendantsStillRunning(t *testing.T) {
	root, work := workspace(t, map[string]string{"victim.txt": "good\n"})
	w := startWarden(t, "-workspace", root)
	c := w.link(wire.Init{})
	c.spawn(1, wire.Spawn{Argv: []string{"sh", "-c", "(sleep 1; echo evil > victim.txt) </dev/null >/dev/null 2>&1 & exit 0"}, Dir: work})
	_, st := c.waitExited(1)
	if !strings.Contains(st.changes.Incomplete, "still ran") {
		t.Errorf("changes %+v, want incomplete: descendants still running", st.changes)
	}
}

// Past MaxChangeEntries the changes are counted, not listed.
func TestChangesOmitted(t *testing.T) {
	root, work := workspace(t, nil)
	w := startWarden(t, "-workspace", root)
	c := w.link(wire.Init{})
	n := wire.MaxChangeEntries + 20
	c.spawn(1, wire.Spawn{Argv: []string{"sh", "-c", fmt.Sprintf("i=0; while [ $i -lt %d ]; do : > f$i; i=$((i+1)); done", n)}, Dir: work})
	_, st := c.waitExited(1)
	m := st.changes
	if m.Created != n || m.Omitted != 20 || len(m.Entries) != wire.MaxChangeEntries {
		t.Errorf("created %d, omitted %d, %d listed; want %d, 20, %d", m.Created, m.Omitted, len(m.Entries), n, wire.MaxChangeEntries)
	}
}

// After a reattach, the Resume of an exited process has its Changes first,
// before its output, and again right before its Exited.
func TestChangesResentAfterResume(t *testing.T) {
	root, work := workspace(t, nil)
	w := startWarden(t, "-workspace", root)
	c := w.link(wire.Init{})
	c.setNoAck(1, true)
	c.spawn(1, wire.Spawn{Argv: []string{"sh", "-c", "echo out; echo x > f"}, Dir: work})
	c.waitExited(1)
	_ = w.stdin.Close()
	c.waitEnd()

	r := w.attach(c.first.Socket, w.secret)
	r.waitHello()
	if e := entryOf(r.list(), 1); e == nil || e.Exit == nil {
		t.Fatalf("entry %+v, want exited", e)
	}
	if err := r.w.WriteOffset(wire.TResume, 1, 0); err != nil {
		t.Fatal(err)
	}
	_, st := r.waitExited(1)
	if len(st.frames) == 0 || st.frames[0] != wire.TChanges {
		t.Fatalf("frames after the resume %v, want changes first", st.frames)
	}
	if string(st.out) != "out\n" || len(st.changes.Entries) != 1 || st.changes.Entries[0].Path != "/workspace/work/f" {
		t.Errorf("output %q, changes %+v", st.out, st.changes)
	}
}
