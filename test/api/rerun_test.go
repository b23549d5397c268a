package api

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/rerun"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// session runs scripts in a new kept sandbox, one after another (stdin
// given to those with one), and returns the sandbox and its process ids.
func session(t *testing.T, e *testkit.APIEnv, scripts []string, stdin map[int]string) (*stockade.Sandbox, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb := e.Sandbox(t, spec.Kept)
	var ids []string
	for i, s := range scripts {
		p := spec.Process{Argv: []string{"sh", "-c", s}}
		in, ok := stdin[i]
		p.Stdin = ok
		proc, err := sb.Start(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			if _, err := proc.Stdin().Write([]byte(in)); err != nil {
				t.Fatal(err)
			}
			if err := proc.Stdin().Close(); err != nil {
				t.Fatal(err)
			}
		}
		go func() { _, _ = io.Copy(io.Discard, proc.Stderr()) }()
		if _, err := io.Copy(io.Discard, proc.Stdout()); err != nil {
			t.Fatal(err)
		}
		if _, err := proc.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, proc.ID())
	}
	return sb, ids
}

// TestRerunReproduces: a recorded session of ten deterministic processes
// (files written, changed, renamed and deleted, stdin fed, a non-zero
// exit, stderr) re-runs in a new sandbox with no divergence; the new
// sandbox is removed.
func TestRerunReproduces(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	scripts := []string{
		"echo start; mkdir -p src",
		"printf 'a\\nb\\n' > src/list.txt; cat src/list.txt",
		"cat > input.txt; wc -l < input.txt",
		"sort -r src/list.txt > src/sorted.txt; cat src/sorted.txt",
		"echo warning >&2; echo out",
		"mv src/sorted.txt src/rev.txt; ls src",
		"head -c 5000 /dev/zero | tr '\\0' x > blob; wc -c < blob",
		"rm input.txt; ls",
		"sh -c 'exit 3'",
		"find . -type f | sort; cat src/rev.txt",
	}
	sb, ids := session(t, e, scripts, map[int]string{2: "one\ntwo\nthree\n"})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := rerun.Run(ctx, e.RT.Host(), sb.ID(), rerun.Files(e.Journal), rerun.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Diverged || rep.FirstDivergence != "" || len(rep.Processes) != len(scripts) {
		t.Fatalf("the re-run diverged: %+v", rep)
	}
	for i, p := range rep.Processes {
		if p.Original != ids[i] || !p.Same || !p.Stdout.Compared || !p.Changes.Compared {
			t.Fatalf("process %d: %+v", i, p)
		}
	}
	if rep.Processes[8].Exit.Rerun.ExitCode == nil || *rep.Processes[8].Exit.Rerun.ExitCode != 3 {
		t.Fatalf("the exit 3: %+v", rep.Processes[8].Exit)
	}
	if st, err := e.RT.ReplaySandbox(ctx, rep.Rerun, 0); err != nil || st.Phase != lifecycle.PhaseRemoved {
		t.Fatalf("the re-run's sandbox %s was kept (%s): %v", rep.Rerun, st.Phase, err)
	}
}

// TestRerunFlagsTheClock: in a session whose fourth process reads the
// clock, exactly that process is flagged (its output), the re-run goes on
// and every other process is the same.
func TestRerunFlagsTheClock(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	// The clock to a hundredth of a second on line 1 (busybox date has no
	// %N: seconds alone can repeat when the re-run lands in the same one).
	scripts := []string{"echo a > a.txt", "cat a.txt", "echo b", "cat /proc/uptime; date", "echo c; ls"}
	sb, ids := session(t, e, scripts, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := rerun.Run(ctx, e.RT.Host(), sb.ID(), rerun.Files(e.Journal), rerun.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Diverged || rep.FirstDivergence != ids[3] {
		t.Fatalf("first divergence %q, want %s (date): %+v", rep.FirstDivergence, ids[3], rep)
	}
	for i, p := range rep.Processes {
		if p.Same != (i != 3) {
			t.Fatalf("process %d (%s) same=%v", i, strings.Join(p.Argv, " "), p.Same)
		}
	}
	if d := rep.Processes[3]; d.Stdout.Same || d.Stdout.Line != 1 || !d.Exit.Same || !d.Changes.Same {
		t.Fatalf("the date process: %+v", d)
	}
	// Until stops before the clock: nothing diverges.
	until := 0
	evs, err := e.RT.History(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range evs {
		if ev.ID == ids[2] && ev.Type == "process.reserved" {
			until = i + 1
		}
	}
	rep, err = rerun.Run(ctx, e.RT.Host(), sb.ID(), rerun.Files(e.Journal), rerun.Options{Until: uint64(until)})
	if err != nil || rep.Diverged || len(rep.Processes) != 3 {
		t.Fatalf("until the third process: %+v %v", rep, err)
	}
}
