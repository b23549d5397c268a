package drill

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/internal/drillcheck"
	"github.com/stockade/stockade/internal/failpoint"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/statedir"
)

// drFailpoints are the failpoints `make test` drills: one or two of each
// stage of a sandbox's life, every one of the warden link and the recorder,
// exec-created (a sandbox without a warden), and the warm pool's claim
// and refill. `make drill` drills them
// all, and random kills besides.
var drFailpoints = []string{
	failpoint.SandboxCreateCall, failpoint.WardenStarted,
	failpoint.ProcessReserved, failpoint.ProcessSpawnSent, failpoint.ProcessExecCreated,
	failpoint.ProcessAttached, failpoint.ProcessMidStream, failpoint.RecorderChunkWritten,
	failpoint.ProcessStopping, failpoint.ProcessReapReported, failpoint.RecorderEndRecord,
	failpoint.ProcessForgetSent, failpoint.SandboxStopCall, failpoint.SandboxRemoveCall,
	failpoint.RecoveryOrphan, failpoint.RecoveryReattached,
	failpoint.PoolFilled, failpoint.PoolClaimed, failpoint.PoolRekeyed,
	failpoint.CheckpointStored, failpoint.RollbackStaged, failpoint.RollbackExchanged,
}

// TestDrillFailpoints runs `stockade drill` over drFailpoints: a child
// runtime (a kept sandbox with a streaming neighbour, a one-shot one) is
// SIGKILLed at each, a new runtime recovers, and the invariants hold
// (nothing leaked, nothing foreign touched, every entity terminal,
// re-adopted or exited-and-kept, the journal replays, a re-adopted sandbox
// runs a new process, no process running at the kill journaled lost, no
// end record before the exit is journaled, every recording complete or its
// gap journaled; every ask answered, one warden per re-adopted sandbox; a
// rollback's journaled outcome is its workspace, /workspace root's, no
// survivor of the workload left and none run as uid 0). The journals it
// leaves are checked again here with its checks (internal/drillcheck). The
// whole drill is `make drill`.
func TestDrillFailpoints(t *testing.T) {
	cli := dockertest.Client(t)
	dockertest.ImageID(t, cli)
	root, err := dockertest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "stockade")
	if out, err := exec.Command("go", "build", "-o", bin, filepath.Join(root, "cmd", "stockade")).CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	dir := t.TempDir()
	// Whatever happens, remove what the drill's runtimes (each its own
	// journal, so its own owner) left behind — only theirs.
	t.Cleanup(func() {
		files, _ := filepath.Glob(filepath.Join(dir, "*.db"))
		for _, f := range files {
			j, err := journal.Open(f, journal.Options{ReadOnly: true})
			if err != nil {
				t.Errorf("cleanup: %s: %v", f, err)
				continue
			}
			owner := j.Owner()
			_ = j.Close()
			if err := dockertest.RemoveOwned(context.Background(), cli, owner); err != nil {
				t.Errorf("cleanup of %s: %v", owner, err)
			}
		}
	})
	// Hostile: a survivor (setsid, a double fork, planting links and
	// markers) runs beside every checkpoint and rollback.
	cmd := exec.Command(bin, "drill", "--hostile", "--dir", dir, "--failpoints", strings.Join(drFailpoints, ","))
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	t.Logf("stockade drill:\n%s", out)
	if err != nil {
		t.Fatalf("drill failed: %v", err)
	}
	for _, fp := range drFailpoints {
		if !strings.Contains(string(out), fp) {
			t.Errorf("failpoint %s was not drilled", fp)
		}
	}
	if !strings.Contains(string(out), "no violation") {
		t.Fatal("the drill did not report a clean run")
	}
	// The journals the drill left (one per failpoint, each after its
	// cleanup removed every sandbox), checked again here with the drill's
	// own checks (internal/drillcheck): each replays, and every recording
	// is complete or its gap journaled.
	journals, err := filepath.Glob(filepath.Join(dir, "drill-*.db"))
	if err != nil || len(journals) == 0 {
		t.Fatalf("the drill left no journal in %s: %v", dir, err)
	}
	for _, jpath := range journals {
		violate := func(format string, args ...any) {
			t.Errorf("%s: %s", filepath.Base(jpath), fmt.Sprintf(format, args...))
		}
		if err := drillcheck.Replay(jpath); err != nil {
			violate("does not replay: %v", err)
		}
		final, err := drillcheck.Read(jpath)
		if err != nil {
			violate("reading it: %v", err)
			continue
		}
		final.CheckRecordings(violate)
	}
	// Every runtime the drill started had its own journal in dir.
	if def, err := statedir.DefaultJournal(); err != nil {
		t.Error(err)
	} else if _, err := os.Stat(def); !os.IsNotExist(err) {
		t.Errorf("the drill touched the default journal %s: %v", def, err)
	}
}
