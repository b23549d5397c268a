package recovery

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/volume"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/internal/actors/sandbox"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

func decisionOf(t *testing.T, rt *stockade.Runtime, id string) stockade.RecoveredSandbox {
	t.Helper()
	report, err := rt.Recovery(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range report.Sandboxes {
		if s.ID == id {
			return s
		}
	}
	t.Fatalf("recovery did not report sandbox %s: %+v", id, report)
	return stockade.RecoveredSandbox{}
}

// TestRecoveryReadoptsKept: a kept sandbox left running is re-adopted after
// a fresh readback, runs new processes, and a process it was running is
// re-adopted detached with its exit code recorded when it ends.
func TestRecoveryReadoptsKept(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	sb := e.Sandbox(t, spec.Kept)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", "echo started; sleep 2; exit 7"}, Stderr: spec.Discard})
	if err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 8)
	if _, err := io.ReadFull(p.Stdout(), line); err != nil {
		t.Fatal(err)
	}
	rt := e.Reopen(t, stockade.Options{})
	got := decisionOf(t, rt, sb.ID())
	if got.Decision != string(sandbox.Readopt) || got.Settled != lifecycle.PhaseStarted {
		t.Fatalf("decision %+v, want re-adopt, started", got)
	}
	sb2, err := rt.Sandbox(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	out, _, res, err := testkit.RunOut(t, sb2, spec.Process{Argv: []string{"echo", "again"}})
	if err != nil || out != "again\n" || res.ExitCode != 0 {
		t.Fatalf("a re-adopted sandbox runs a new process: %q %+v %v", out, res, err)
	}
	// The detached process's exit is recorded once it ends.
	deadline := time.Now().Add(time.Minute)
	for {
		h, err := rt.History(t.Context(), sb.ID())
		if err != nil {
			t.Fatal(err)
		}
		var exited *stockade.HistoryEvent
		var adopted bool
		for i, ev := range h {
			if ev.ID == p.ID() && ev.Type == "adopted" {
				adopted = strings.Contains(string(ev.Payload), `"detached":true`)
			}
			if ev.ID == p.ID() && ev.Type == "process.exited" {
				exited = &h[i]
			}
		}
		if exited != nil {
			var x lifecycle.ProcessExited
			if err := json.Unmarshal(exited.Payload, &x); err != nil {
				t.Fatalf("process.exited payload: %v", err)
			}
			if !adopted || x.ExitCode == nil || *x.ExitCode != 7 || x.Reason != lifecycle.ReasonExited {
				t.Fatalf("detached process ended %+v (adopted detached: %v), want exited 7", x, adopted)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the detached process's exit was never recorded")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestRecoveryRemovesOneShot: a one-shot sandbox whose runtime went away is
// stopped and removed; nothing of it is left.
func TestRecoveryRemovesOneShot(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{StopGrace: time.Second})
	sb := e.Sandbox(t, spec.OneShot)
	rt := e.Reopen(t, stockade.Options{StopGrace: time.Second})
	got := decisionOf(t, rt, sb.ID())
	if got.Decision != string(sandbox.StopRemove) || got.Settled != lifecycle.PhaseRemoved {
		t.Fatalf("decision %+v, want stop and remove, removed", got)
	}
	if n, err := dockertest.Owned(context.Background(), e.Docker, rt.Owner()); err != nil || n != 0 {
		t.Fatalf("%d resources left (%v)", n, err)
	}
	if _, err := rt.Sandbox(context.Background(), sb.ID()); !spec.IsCode(err, spec.CodeNotFound) {
		t.Fatalf("a removed sandbox is still listed: %v", err)
	}
}

// TestRecoveryDeadWorkload: a kept sandbox whose workload died while no
// runtime watched is recorded exited with what Docker reports, and kept.
func TestRecoveryDeadWorkload(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	sb := e.Sandbox(t, spec.Kept)
	st, err := sb.State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.RT.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Docker.ContainerKill(context.Background(), st.Created.Workload, "KILL"); err != nil {
		t.Fatal(err)
	}
	rt := e.Reopen(t, stockade.Options{})
	got := decisionOf(t, rt, sb.ID())
	if got.Decision != string(sandbox.RecordExit) || got.Settled != lifecycle.PhaseExited {
		t.Fatalf("decision %+v, want record exit, exited", got)
	}
	sb2, err := rt.Sandbox(context.Background(), sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	st2, _ := sb2.State(context.Background())
	if st2.Exit == nil || st2.Exit.ExitCode == nil || *st2.Exit.ExitCode != 137 {
		t.Fatalf("exit %+v, want Docker's 137", st2.Exit)
	}
	if err := sb2.Remove(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestRecoveryTearsDownTampered: a kept sandbox whose limits were changed
// behind the runtime's back fails readback and is torn down, never
// re-adopted.
func TestRecoveryTearsDownTampered(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{StopGrace: time.Second})
	sb := e.Sandbox(t, spec.Kept)
	st, _ := sb.State(context.Background())
	if err := e.RT.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := e.Docker.ContainerUpdate(context.Background(), st.Created.Workload, container.UpdateConfig{
		Resources: container.Resources{Memory: 256 << 20, MemorySwap: 256 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	rt := e.Reopen(t, stockade.Options{StopGrace: time.Second})
	got := decisionOf(t, rt, sb.ID())
	if got.Decision != string(sandbox.TearDown) || got.Settled != lifecycle.PhaseRemoved || !strings.Contains(got.Observed, "Memory") {
		t.Fatalf("decision %+v, want tear down naming Memory, removed", got)
	}
}

// TestRecoveryOrphansAndForeign: resources labelled with this owner but no
// live sandbox are removed and journaled; resources of another owner —
// even with a sandbox id this journal knows, re-adopted or torn down — are
// never touched.
func TestRecoveryOrphansAndForeign(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{StopGrace: time.Second})
	sb := e.Sandbox(t, spec.Kept)
	gone := e.Sandbox(t, spec.OneShot) // recovery stops and removes it
	owner := e.RT.Owner()
	foreign := dockertest.Owner(t, e.Docker)
	ctx := context.Background()
	mk := func(owner, sandboxID string) string {
		v, err := e.Docker.VolumeCreate(ctx, volume.CreateOptions{Labels: map[string]string{
			"io.stockade.owner": owner, "io.stockade.sandbox": sandboxID, "io.stockade.role": "volume"}})
		if err != nil {
			t.Fatal(err)
		}
		return v.Name
	}
	orphan := mk(owner, "orphansandboxid0000000000a")
	foreignSame := mk(foreign, sb.ID())
	foreignTorn := mk(foreign, gone.ID())
	foreignOther := mk(foreign, "orphansandboxid0000000000a")
	rt := e.Reopen(t, stockade.Options{StopGrace: time.Second})
	report, err := rt.Recovery(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := report.Orphans; len(got) != 1 || got[0].ID != orphan {
		t.Fatalf("orphans %+v, want just %s", got, orphan)
	}
	if _, err := e.Docker.VolumeInspect(ctx, orphan); err == nil {
		t.Fatal("the orphan volume survived")
	}
	if d := decisionOf(t, rt, gone.ID()); d.Decision != string(sandbox.StopRemove) || d.Settled != lifecycle.PhaseRemoved {
		t.Fatalf("the one-shot sandbox: %+v", d)
	}
	for _, v := range []string{foreignSame, foreignTorn, foreignOther} {
		if _, err := e.Docker.VolumeInspect(ctx, v); err != nil {
			t.Fatalf("a foreign volume was touched: %v", err)
		}
	}
	if d := decisionOf(t, rt, sb.ID()); d.Decision != string(sandbox.Readopt) {
		t.Fatalf("the known sandbox: %+v", d)
	}
}
