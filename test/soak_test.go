//go:build soak

package test

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
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// The soak (make soak): for $STOCKADE_SOAK (default 3m) one `stockade serve`
// is driven at random: sandboxes created, processes started, killed and
// waited for, sandboxes stopped and removed, and now and then the server
// killed with SIGKILL and started again on the same journal. At the end every
// sandbox is removed and the server's threads, open files and memory, the
// owner's Docker resources and the journal's size are reported beside their
// values at the start; the test fails on an error no kill explains, on a
// resource left, or on a journal that does not verify.
//
//	CI=true STOCKADE_SOAK=3m go test -tags soak -run TestSoak -v -timeout 30m ./test/

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
	e := newCLI(t)
	cli := dockertest.Client(t)
	image := dockertest.ImageID(t, cli)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))

	srv := e.serve(t, ctx)
	c, err := clientpkg.Dial(srv.sock)
	if err != nil {
		t.Fatal(err)
	}
	// The baseline, once the runtime is up and idle.
	time.Sleep(2 * time.Second)
	start := statsOf(t, srv.cmd.Process.Pid)
	jstart := fileSize(t, e.journal)

	var live []string
	counts := map[string]int{}
	restart := func() {
		c.Close()
		srv.stop(t, syscall.SIGKILL)
		srv = e.serve(t, ctx)
		if c, err = clientpkg.Dial(srv.sock); err != nil {
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
	pol := smallPolicy()
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
			_ = p
			restart()
			counts["runtime killed mid-process"]++
		case op < 4 || len(live) == 0:
			if len(live) >= 5 {
				continue
			}
			sb, err := c.CreateSandbox(ctx, host.SandboxSpec{Image: image, Policy: pol, Lifetime: spec.Kept})
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
			go io.Copy(io.Discard, p.Stderr())
			go io.Copy(io.Discard, p.Stdout())
			if rng.IntN(3) == 0 {
				p.Signal(ctx, syscall.SIGKILL)
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
	time.Sleep(2 * time.Second)
	end := statsOf(t, srv.cmd.Process.Pid)
	c.Close()
	if err := srv.stop(t, syscall.SIGTERM); err != nil {
		t.Errorf("serve: %v", err)
	}
	owner := ownerOfJournal(t, e)
	n, err := dockertest.Owned(ctx, cli, owner)
	if err != nil || n != 0 {
		t.Errorf("%d resources of owner %s left (%v)", n, owner, err)
	}
	if code, out, errOut := e.run(t, "", "journal", "verify"); code != 0 {
		t.Errorf("journal verify: %d %s %s", code, out, errOut)
	}
	report := fmt.Sprintf("soak %v: %v\nthe first server idle at the start vs the last one at the end (all removed): threads %d → %d, fds %d → %d, RSS %d → %d KiB\n"+
		"Docker resources of the owner at the end: %d; journal %d → %d bytes",
		d, counts, start.threads, end.threads, start.fds, end.fds, start.rssKiB, end.rssKiB, n, jstart, fileSize(t, e.journal))
	t.Log("\n" + report)
	fmt.Fprintln(os.Stderr, report)
}

func fileSize(t *testing.T, path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}
