//go:build soak

package soak

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientpkg "github.com/stockade/stockade/client"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// The soak (make soak): for $STOCKADE_SOAK (default 3m) one `stockade serve`
// is driven at random: sandboxes created, processes started, killed and
// waited for, sandboxes stopped and removed, and now and then the server
// killed with SIGKILL and started again on the same journal. At the end every
// sandbox is removed, one last server life does a fixed round of work
// unkilled, and the server's goroutines, heap, open files, threads and RSS
// (its SIGUSR1 stats line and /proc), the owner's Docker resources and the
// journal's size are reported beside their values at the start; the test fails on an error no kill explains, on a
// resource left, or on a journal that does not verify.
//
//	CI=true STOCKADE_SOAK=3m go test -tags soak -run TestSoak -v -timeout 30m ./test/soak/

// procStats is what /proc shows of a process.
type procStats struct {
	threads, fds int
	rssKiB       int
}

func statsOf(t *testing.T, pid int) procStats {
	t.Helper()
	var s procStats
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "Threads:":
			s.threads, _ = strconv.Atoi(f[1])
		case "VmRSS:":
			s.rssKiB, _ = strconv.Atoi(f[1])
		}
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	s.fds = len(ents)
	return s
}

func TestSoak(t *testing.T) {
	d := 3 * time.Minute
	if v := os.Getenv("STOCKADE_SOAK"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("STOCKADE_SOAK=%q: %v", v, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), d+10*time.Minute)
	defer cancel()
	e := testkit.NewCLI(t)
	cli := dockertest.Client(t)
	image := dockertest.ImageID(t, cli)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))

	srv := e.Serve(t, ctx)
	c, err := clientpkg.Dial(srv.Sock)
	if err != nil {
		t.Fatal(err)
	}
	// The baseline, once the runtime is up and idle.
	time.Sleep(2 * time.Second)
	start, startGo := statsOf(t, srv.Cmd.Process.Pid), srv.Stats(t)
	jstart := fileSize(t, e.Journal)

	var live []string
	counts := map[string]int{}
	restart := func() {
		_ = c.Close()
		_ = srv.Stop(t, syscall.SIGKILL)
		srv = e.Serve(t, ctx)
		if c, err = clientpkg.Dial(srv.Sock); err != nil {
			t.Fatal(err)
		}
		infos, err := c.Sandboxes(ctx)
		if err != nil {
			t.Fatalf("sandboxes after a restart: %v", err)
		}
		live = live[:0]
		for _, in := range infos {
			if in.Phase == lifecycle.PhaseStarted {
				live = append(live, in.ID)
			}
		}
		counts["runtime killed"]++
	}
	pol := testkit.SmallPolicy()
	pol.MemoryBytes = 64 << 20
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		switch op := rng.IntN(20); {
		case op == 0:
			restart()
		case op == 1 && len(live) > 0:
			// Killed while a process runs: it is re-adopted by the next
			// server and ends on its own.
			sb, err := c.Sandbox(ctx, live[rng.IntN(len(live))])
			if err != nil {
				t.Fatalf("sandbox: %v", err)
			}
			p, err := sb.Start(ctx, spec.Process{Argv: []string{"sleep", "2"}, Stdout: spec.Discard, Stderr: spec.Discard})
			if err != nil {
				t.Fatalf("start: %v", err)
			}
			restart()
			if res, err := c.Wait(ctx, p.ID()); err != nil || res.Reason != string(lifecycle.ReasonExited) || res.ExitCode != 0 {
				t.Fatalf("the process running at the kill, re-adopted by the next server: %+v %v, want exited 0", res, err)
			}
			counts["runtime killed mid-process"]++
		case op < 4 || len(live) == 0:
			if len(live) >= 5 {
				continue
			}
			sb, err := c.CreateSandbox(ctx, spec.Sandbox{Image: image, Policy: pol, Lifetime: spec.Kept})
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			live = append(live, sb.ID())
			counts["sandbox created"]++
		case op < 14:
			id := live[rng.IntN(len(live))]
			sb, err := c.Sandbox(ctx, id)
			if err != nil {
				t.Fatalf("sandbox %s: %v", id, err)
			}
			p, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", "echo start; sleep " + strconv.Itoa(rng.IntN(3))}})
			if err != nil {
				t.Fatalf("start in %s: %v", id, err)
			}
			go func() { _, _ = io.Copy(io.Discard, p.Stderr()) }()
			go func() { _, _ = io.Copy(io.Discard, p.Stdout()) }()
			if rng.IntN(3) == 0 {
				_ = p.Signal(ctx, syscall.SIGKILL)
				counts["process killed"]++
			}
			res, err := p.Wait(ctx)
			if err != nil && res.Reason != string(lifecycle.ReasonSignaled) {
				t.Fatalf("wait in %s: %+v %v", id, res, err)
			}
			counts["process "+res.Reason]++
		case op < 17:
			i := rng.IntN(len(live))
			sb, err := c.Sandbox(ctx, live[i])
			if err != nil {
				t.Fatalf("sandbox %s: %v", live[i], err)
			}
			if err := sb.Remove(ctx); err != nil {
				t.Fatalf("remove %s: %v", live[i], err)
			}
			live = append(live[:i], live[i+1:]...)
			counts["sandbox removed"]++
		default:
			i := rng.IntN(len(live))
			sb, err := c.Sandbox(ctx, live[i])
			if err != nil {
				t.Fatalf("sandbox %s: %v", live[i], err)
			}
			if err := sb.Stop(ctx); err != nil {
				t.Fatalf("stop %s: %v", live[i], err)
			}
			live = append(live[:i], live[i+1:]...)
			counts["sandbox stopped"]++
		}
	}
	// The end: every sandbox the journal still lists removed.
	removeAll := func() {
		infos, err := c.Sandboxes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range infos {
			sb, err := c.Sandbox(ctx, in.ID)
			if err == nil {
				err = sb.Remove(ctx)
			}
			if err != nil {
				t.Errorf("removing %s at the end: %v", in.ID, err)
			}
		}
	}
	removeAll()
	// One last life, killed by nobody: idle after its recovery, then a
	// fixed round of work (10 sandboxes, 3 processes each, removed), then
	// idle again. What it holds at its end against its own start is a
	// leak within one life; against the first server's start, across the
	// whole soak.
	restart()
	time.Sleep(2 * time.Second)
	lastIdle, lastIdleGo := statsOf(t, srv.Cmd.Process.Pid), srv.Stats(t)
	for i := range 10 {
		sb, err := c.CreateSandbox(ctx, spec.Sandbox{Image: image, Policy: pol, Lifetime: spec.Kept})
		if err != nil {
			t.Fatalf("create in the last life: %v", err)
		}
		for k := range 3 {
			p, err := sb.Start(ctx, spec.Process{Argv: []string{"echo", fmt.Sprint(i, k)}})
			if err != nil {
				t.Fatalf("start in the last life: %v", err)
			}
			go func() { _, _ = io.Copy(io.Discard, p.Stderr()) }()
			_, _ = io.Copy(io.Discard, p.Stdout())
			if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 {
				t.Fatalf("process in the last life: %+v %v", res, err)
			}
		}
		if err := sb.Remove(ctx); err != nil {
			t.Fatalf("remove in the last life: %v", err)
		}
	}
	removeAll()
	time.Sleep(2 * time.Second)
	end, endGo := statsOf(t, srv.Cmd.Process.Pid), srv.Stats(t)
	_ = c.Close()
	if err := srv.Stop(t, syscall.SIGTERM); err != nil {
		t.Errorf("serve: %v", err)
	}
	owner := testkit.OwnerOfJournal(t, e)
	n, err := dockertest.Owned(ctx, cli, owner)
	if err != nil || n != 0 {
		t.Errorf("%d resources of owner %s left (%v)", n, owner, err)
	}
	if code, out, errOut := e.Run(t, "", "journal", "verify"); code != 0 {
		t.Errorf("journal verify: %d %s %s", code, out, errOut)
	}
	row := func(name string, a, b, c int64) string {
		return fmt.Sprintf("%-13s %12d %12d %12d", name, a, b, c)
	}
	report := strings.Join([]string{
		fmt.Sprintf("soak %v: %v", d, counts),
		fmt.Sprintf("%-13s %12s %12s %12s", "", "first, idle", "last, idle", "last, end"),
		row("goroutines", startGo["goroutines"], lastIdleGo["goroutines"], endGo["goroutines"]),
		row("heap_inuse", startGo["heap_inuse"], lastIdleGo["heap_inuse"], endGo["heap_inuse"]),
		row("heap_objects", startGo["heap_objects"], lastIdleGo["heap_objects"], endGo["heap_objects"]),
		row("fds", int64(start.fds), int64(lastIdle.fds), int64(end.fds)),
		row("threads", int64(start.threads), int64(lastIdle.threads), int64(end.threads)),
		row("rss_kib", int64(start.rssKiB), int64(lastIdle.rssKiB), int64(end.rssKiB)),
		fmt.Sprintf("Docker resources of the owner at the end: %d; journal %d → %d bytes", n, jstart, fileSize(t, e.Journal)),
	}, "\n")
	t.Log("\n" + report)
	fmt.Fprintln(os.Stderr, report)
	// One life's work, all of it undone, must not leave goroutines behind
	// (a margin for the gRPC and Docker clients' idle connections).
	if g0, g1 := lastIdleGo["goroutines"], endGo["goroutines"]; g1 > g0+20 {
		t.Errorf("the last server held %d goroutines idle and %d after its work was undone: a leak", g0, g1)
	}
}

func fileSize(t *testing.T, path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}
