package checkpoint

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/statedir"
	"github.com/stockade/stockade/test/testkit"
)

// mustRun runs a shell script in /workspace/work of sb and fails the test
// unless it exits 0; it returns its stdout.
func mustRun(t *testing.T, sb *stockade.Sandbox, script string) string {
	t.Helper()
	out, errOut, res, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"sh", "-c", script}, Dir: "/workspace/work"})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%q: %+v %v %s", script, res, err, errOut)
	}
	return out
}

// TestCheckpointHostileTreeRestores (issue 30, defect 8): a workspace with
// absolute symlinks (a Python venv's python), links leaving the workspace,
// a link whose target is not UTF-8, and file and directory names that are
// not UTF-8 is checkpointed, changed, rolled back, and read back byte for
// byte (by the digest of a tar of it, which covers names and link targets
// as bytes, and by readlink); a sandbox created from the checkpoint has
// the same workspace. Nothing is extracted through those links.
func TestCheckpointHostileTreeRestores(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	for _, tc := range []struct {
		name, tree, links string
	}{
		{"absolute links", `mkdir -p venv/bin lib; ln -s /bin/busybox venv/bin/python; ln -s / root; ln -s ../outside up; ln -s root/etc lib/etc; echo data > lib/f`,
			"venv/bin/python root up lib/etc"},
		{"names not UTF-8", `printf 'latin\n' > "$(printf 'n\377\376.txt')"; mkdir "$(printf 'd\351')"; echo in > "$(printf 'd\351')/f";
ln -s "$(printf 't\377 x')" raw; ln "$(printf 'n\377\376.txt')" "$(printf 'h\377')"; ln -s /usr/lib/python3/dist-packages/"$(printf '\351')" abs`,
			"raw abs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			sb := e.Sandbox(t, spec.Kept)
			mustRun(t, sb, tc.tree)
			readlinks := "for l in " + tc.links + "; do readlink $l | od -An -tx1; done"
			links := mustRun(t, sb, readlinks)
			before := digestOf(t, sb)
			// A link climbing out of /workspace by its own "..", which
			// Docker's extraction refuses to make, is skipped and named.
			mustRun(t, sb, "ln -s ../../../etc/passwd esc")
			ck, err := sb.Checkpoint(ctx, "")
			if err != nil {
				t.Fatalf("checkpoint: %v", err)
			}
			if len(ck.Skipped) != 1 || !strings.Contains(ck.Skipped[0], `"esc"`) {
				t.Fatalf("skipped: %q, want esc", ck.Skipped)
			}
			mustRun(t, sb, "rm -rf ./* ; echo changed > changed")
			if digestOf(t, sb) == before {
				t.Fatal("the change changed nothing")
			}
			// The digest's consistent copy thaws the workload once closed;
			// a rollback waits for that.
			mustRun(t, sb, "true")
			if err := sb.Rollback(ctx, ck.ID); err != nil {
				t.Fatalf("rollback: %v", err)
			}
			if got := digestOf(t, sb); got != before {
				t.Fatal("the rolled back workspace is not the checkpoint's")
			}
			if got := mustRun(t, sb, readlinks); got != links {
				t.Fatalf("link targets after the rollback:\n%s\nwant\n%s", got, links)
			}
			// The links are links: nothing was written through them.
			if out := mustRun(t, sb, "ls -A /workspace | tr '\\n' ' '; stat -c '%U %a' /workspace"); !strings.HasSuffix(out, "root 755\n") {
				t.Fatalf("/workspace after the rollback: %q", out)
			}
			from, err := e.RT.CreateSandbox(ctx, spec.Sandbox{Image: e.Image, Policy: testkit.SmallPolicy(), From: ck.ID})
			if err != nil {
				t.Fatalf("create --from: %v", err)
			}
			if got := digestOf(t, from); got != before {
				t.Fatal("a sandbox from the checkpoint has another workspace")
			}
			if got := mustRun(t, from, readlinks); got != links {
				t.Fatalf("link targets in a sandbox from the checkpoint:\n%s\nwant\n%s", got, links)
			}
		})
	}
}

// storeWatch samples the bytes the checkpoint store at dir holds (tmp/,
// blobs/ and manifests/, apparent sizes) until stopped, and keeps the
// most it saw.
type storeWatch struct {
	dir  string
	stop chan struct{}
	done sync.WaitGroup
	most int64
}

func watchStore(dir string) *storeWatch {
	w := &storeWatch{dir: dir, stop: make(chan struct{})}
	w.done.Add(1)
	go func() {
		defer w.done.Done()
		for {
			w.sample()
			select {
			case <-w.stop:
				w.sample()
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *storeWatch) sample() {
	var total int64
	_ = filepath.WalkDir(w.dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				total += info.Size()
			}
		}
		return nil
	})
	w.most = max(w.most, total)
}

// Most stops the sampling and returns the most bytes the store held.
func (w *storeWatch) Most() int64 {
	close(w.stop)
	w.done.Wait()
	return w.most
}

// TestCheckpointHostileSparseFile (issue 30, defect 6): a sparse file far
// past the checkpoint store's bound (1 GiB and 10 TiB, no blocks in the
// sandbox, against 32 MiB) is refused resource_exhausted while the store
// never holds more than about its bound; the sandbox is thawed after and
// takes work, and a checkpoint that fits is taken.
func TestCheckpointHostileSparseFile(t *testing.T) {
	const bound = 32 << 20
	e := testkit.NewAPI(t, stockade.Options{CheckpointBytes: bound})
	sb := e.Sandbox(t, spec.Kept)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	store := statedir.Checkpoints(e.Journal)
	for _, size := range []string{"1073741824", "10995116277760"} { // 1 GiB, 10 TiB
		mustRun(t, sb, "rm -f sparse && truncate -s "+size+" sparse && echo small > small && ls -ls sparse")
		w := watchStore(store)
		start := time.Now()
		_, err := sb.Checkpoint(ctx, "")
		most, took := w.Most(), time.Since(start)
		t.Logf("a %s sparse file: %v after %v; the store held at most %d bytes", size, err, took.Round(time.Millisecond), most)
		if !spec.IsCode(err, spec.CodeResourceExhausted) {
			t.Fatalf("a %s sparse file against a bound of %d: %v, want resource_exhausted", size, bound, err)
		}
		if most > bound+1<<20 {
			t.Fatalf("a %s sparse file: the store held %d bytes, past its bound of %d", size, most, bound)
		}
		if out := mustRun(t, sb, "cat small"); out != "small\n" {
			t.Fatalf("after the refusal: %q", out)
		}
	}
	mustRun(t, sb, "rm sparse")
	if _, err := sb.Checkpoint(ctx, "fits"); err != nil {
		t.Fatalf("a checkpoint that fits: %v", err)
	}
}

// TestCheckpointHostileManifest (issue 30, defect 7): a workspace of links
// with long targets (no file content) makes a manifest counted against
// the store's bound: past it, the checkpoint fails resource_exhausted and
// nothing is kept. A manifest in the store that cannot be read (planted,
// or left by an older runtime) takes nothing else down: listing,
// checkpoints, rollbacks and creates from other checkpoints work; it can
// be removed.
func TestCheckpointHostileManifest(t *testing.T) {
	const bound = 4 << 20
	e := testkit.NewAPI(t, stockade.Options{CheckpointBytes: bound})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	victim := e.Sandbox(t, spec.Kept)
	mustRun(t, victim, "echo mine > mine")
	good, err := victim.Checkpoint(ctx, "good")
	if err != nil {
		t.Fatal(err)
	}

	attacker := e.Sandbox(t, spec.Kept)
	mustRun(t, attacker, `t=$(head -c 4000 /dev/zero | tr '\0' t); i=0; while [ $i -lt 1200 ]; do ln -s $t l$i; i=$((i+1)); done`)
	w := watchStore(statedir.Checkpoints(e.Journal))
	ck, err := attacker.Checkpoint(ctx, "")
	most := w.Most()
	if !spec.IsCode(err, spec.CodeResourceExhausted) || !strings.Contains(err.Error(), "manifest") {
		t.Fatalf("1200 links of 4000 bytes against a bound of %d: %+v %v (the store held %d bytes), want resource_exhausted naming the manifest", bound, ck, err, most)
	}
	if most > bound+1<<20 {
		t.Fatalf("the store held %d bytes, past its bound of %d", most, bound)
	}
	if list, err := e.RT.Checkpoints(ctx, ""); err != nil || len(list) != 1 || list[0].ID != good.ID {
		t.Fatalf("checkpoints after the refusal: %+v %v", list, err)
	}

	// A manifest that cannot be read.
	const bad = "ck-00000000000000000bad"
	if err := os.WriteFile(filepath.Join(statedir.Checkpoints(e.Journal), "manifests", bad+".json"), []byte(`{"id":"`+bad+`","entries":[`), 0o600); err != nil {
		t.Fatal(err)
	}
	if list, err := e.RT.Checkpoints(ctx, ""); err != nil || len(list) != 1 || list[0].ID != good.ID {
		t.Fatalf("checkpoints beside a bad manifest: %+v %v", list, err)
	}
	mustRun(t, victim, "echo changed > mine")
	if _, err := victim.Checkpoint(ctx, "second"); err != nil {
		t.Fatalf("a checkpoint beside a bad manifest: %v", err)
	}
	mustRun(t, victim, "true") // the checkpoint's copy is closed, the workload thawed
	if err := victim.Rollback(ctx, "good"); err != nil {
		t.Fatalf("a rollback beside a bad manifest: %v", err)
	}
	if out := mustRun(t, victim, "cat mine"); out != "mine\n" {
		t.Fatalf("after the rollback: %q", out)
	}
	from, err := e.RT.CreateSandbox(ctx, spec.Sandbox{Image: e.Image, Policy: testkit.SmallPolicy(), From: good.ID})
	if err != nil {
		t.Fatalf("create --from beside a bad manifest: %v", err)
	}
	if out := mustRun(t, from, "cat mine"); out != "mine\n" {
		t.Fatalf("a sandbox from the checkpoint: %q", out)
	}
	if _, err := e.RT.CreateSandbox(ctx, spec.Sandbox{Image: e.Image, Policy: testkit.SmallPolicy(), From: bad}); !spec.IsCode(err, spec.CodeJournal) || !strings.Contains(err.Error(), "remove") {
		t.Fatalf("create --from the bad manifest: %v, want a journal error saying to remove it", err)
	}
	if err := e.RT.RemoveCheckpoint(ctx, bad); err != nil {
		t.Fatalf("removing the bad manifest: %v", err)
	}
}
