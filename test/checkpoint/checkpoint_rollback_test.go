package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/checkpoint"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/internal/failpoint"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// digestOf is the digest of /workspace/work of sb, read consistently.
func digestOf(t *testing.T, sb *stockade.Sandbox) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rc, _, err := sb.Get(ctx, "work", true)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	d, err := checkpoint.TreeDigest(rc)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

const workTree = `mkdir -p src/pkg empty; printf 'package main\n' > src/main.go; printf 'one\ntwo\n' > notes.txt;
head -c 70000 /dev/urandom > data.bin; ln -s notes.txt link; printf '#!/bin/sh\necho run\n' > run.sh; chmod 750 run.sh;
echo deep > src/pkg/deep.txt; echo 'ünïcode' > 'ünï cödé.txt'`

// TestCheckpointRollback: a checkpoint of a tree (files, directories, a
// symlink, modes, an empty directory, a non-ASCII name), then changes and
// a running process; the rollback stops the process and restores a
// byte-identical workspace (by the digest of a tar of each), journaled;
// a new sandbox from the checkpoint has the same workspace and its env
// and dir; listing and removal; a store too small fails resource_exhausted
// and keeps nothing.
func TestCheckpointRollback(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	sb, err := e.RT.CreateSandbox(ctx, spec.Sandbox{Image: e.Image, Policy: testkit.SmallPolicy(), Env: []string{"MODE=ckpt"}, Dir: "/workspace/work/src"})
	if err != nil {
		t.Fatal(err)
	}
	if _, errOut, res, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"sh", "-c", workTree}, Dir: "/workspace/work"}); err != nil || res.ExitCode != 0 {
		t.Fatalf("tree: %+v %v %s", res, err, errOut)
	}
	before := digestOf(t, sb)
	ck, err := sb.Checkpoint(ctx, "before")
	if err != nil {
		t.Fatal(err)
	}
	if !spec.IsCheckpointID(ck.ID) || ck.Name != "before" || ck.Sandbox != sb.ID() || ck.Files < 9 || ck.Bytes < 70000 || ck.Dir != "/workspace/work/src" {
		t.Fatalf("checkpoint info: %+v", ck)
	}
	if _, err := sb.Checkpoint(ctx, "before"); !spec.IsCode(err, spec.CodeConflict) {
		t.Fatalf("a second checkpoint named before: %v", err)
	}
	if _, errOut, res, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"sh", "-c", "rm -r src empty; echo three >> notes.txt; echo new > new.txt; chmod 600 run.sh"}, Dir: "/workspace/work"}); err != nil || res.ExitCode != 0 {
		t.Fatalf("changes: %+v %v %s", res, err, errOut)
	}
	if digestOf(t, sb) == before {
		t.Fatal("the changes changed nothing")
	}
	sleeper, err := sb.Start(ctx, spec.Process{Argv: []string{"sleep", "600"}, Dir: "/workspace/work", Stdout: spec.Discard, Stderr: spec.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Rollback(ctx, "before"); err != nil {
		t.Fatal(err)
	}
	res, err := sleeper.Wait(ctx)
	if err != nil && !spec.IsCode(err, spec.CodeCancelled) || res.Reason != string(lifecycle.ReasonStopped) {
		t.Fatalf("the running process at the rollback: %+v %v", res, err)
	}
	if got := digestOf(t, sb); got != before {
		t.Fatalf("the rolled back workspace differs from the checkpoint's (%s, want %s)", got, before)
	}
	types := testkit.SandboxTypes(t, e.RT, sb.ID())
	rb := slices.Index(types, (lifecycle.RollingBack{}).Type())
	// The warden is journaled lost before the rollback kills every
	// process of the sandbox's user; the run the kill ends closes in the
	// usage ledger; the fact follows.
	if !slices.Contains(types, (lifecycle.Checkpointed{}).Type()) || rb < 0 || rb+3 >= len(types) ||
		types[rb+1] != (lifecycle.WardenLost{}).Type() || types[rb+2] != (lifecycle.UsageSampled{}).Type() || types[rb+3] != (lifecycle.RolledBack{}).Type() {
		t.Fatalf("journal: %v", types)
	}
	// The sandbox takes work again, and the staging directory was emptied.
	out, _, res, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"sh", "-c", "cat ../notes.txt; ls -a /workspace | grep -c rollback; ls -A /workspace/.rollback-* | wc -l; echo $MODE"}})
	if err != nil || out != "one\ntwo\n1\n0\nckpt\n" {
		t.Fatalf("after the rollback: %q %+v %v", out, res, err)
	}

	from, err := e.RT.CreateSandbox(ctx, spec.Sandbox{Image: e.Image, Policy: testkit.SmallPolicy(), From: ck.ID})
	if err != nil {
		t.Fatal(err)
	}
	if got := digestOf(t, from); got != before {
		t.Fatal("a sandbox from the checkpoint has another workspace")
	}
	if out, _, _, err := testkit.RunOut(t, from, spec.Process{Argv: []string{"sh", "-c", "pwd; echo $MODE"}}); err != nil || out != "/workspace/work/src\nckpt\n" {
		t.Fatalf("the env and dir of a sandbox from a checkpoint: %q %v", out, err)
	}
	if st, err := from.State(ctx); err != nil || st.Restored != ck.ID || st.Spec.From != ck.ID {
		t.Fatalf("restored: %+v %v", st, err)
	}

	list, err := e.RT.Checkpoints(ctx, sb.ID())
	if err != nil || len(list) != 1 || list[0].ID != ck.ID {
		t.Fatalf("list: %+v %v", list, err)
	}
	if err := e.RT.RemoveCheckpoint(ctx, ck.ID); err != nil {
		t.Fatal(err)
	}
	if err := sb.Rollback(ctx, ck.ID); !spec.IsCode(err, spec.CodeNotFound) {
		t.Fatalf("a rollback to a removed checkpoint: %v", err)
	}
	if _, err := e.RT.CreateSandbox(ctx, spec.Sandbox{Image: e.Image, From: ck.ID}); !spec.IsCode(err, spec.CodeNotFound) {
		t.Fatalf("a sandbox from a removed checkpoint: %v", err)
	}
}

// TestCheckpointStoreFull: a checkpoint past the store's bound fails
// resource_exhausted, keeps nothing, and journals nothing.
func TestCheckpointStoreFull(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{CheckpointBytes: 50000})
	sb := e.Sandbox(t, spec.Kept)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, _, res, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"sh", "-c", "head -c 80000 /dev/urandom > big"}}); err != nil || res.ExitCode != 0 {
		t.Fatal(res, err)
	}
	if _, err := sb.Checkpoint(ctx, ""); !spec.IsCode(err, spec.CodeResourceExhausted) {
		t.Fatalf("a checkpoint past the bound: %v", err)
	}
	if list, err := e.RT.Checkpoints(ctx, ""); err != nil || len(list) != 0 {
		t.Fatalf("kept: %+v %v", list, err)
	}
	if slices.Contains(testkit.SandboxTypes(t, e.RT, sb.ID()), (lifecycle.Checkpointed{}).Type()) {
		t.Fatal("journaled")
	}
}

// TestRollbackKilled: the CLI's rollback killed -9 at each of its
// failpoints; the next runtime settles it by the marker: before the
// exchange the old workspace stays (rollback_abandoned), after it the new
// one is there (rolled_back); never a mix, always journaled. A checkpoint
// killed before its fact leaves nothing listed.
func TestRollbackKilled(t *testing.T) {
	c := testkit.NewCLI(t)
	code, out, errOut := c.Run(t, "", "sandbox", "create", "--memory", "128m")
	id := strings.TrimSpace(out)
	if code != 0 {
		t.Fatalf("create: %d %s", code, errOut)
	}
	if code, _, errOut := c.Run(t, "", "exec", id, "--", "sh", "-c", workTree); code != 0 {
		t.Fatalf("tree: %s", errOut)
	}
	code, out, errOut = c.Run(t, "", "checkpoint", id, "base")
	ck := strings.TrimSpace(out)
	if code != 0 || !spec.IsCheckpointID(ck) {
		t.Fatalf("checkpoint: %d %q %s", code, out, errOut)
	}
	// The checkpoint's tree, by the digest of a tar of it.
	want := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		rt, err := stockade.Open(ctx, stockade.Options{Journal: c.Journal})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = rt.Close() }()
		sb, err := rt.Sandbox(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return digestOf(t, sb)
	}()
	killedAt := func(fp string, args ...string) {
		t.Helper()
		cmd := exec.Command(c.Bin, append([]string{"--journal", c.Journal}, args...)...)
		cmd.Env = append(os.Environ(), failpoint.Env+"="+fp)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != -1 {
			t.Fatalf("%s at %s: not killed: %v %s", args[0], fp, err, errb.String())
		}
	}
	for _, tc := range []struct {
		failpoint string
		settled   string // the event recovery journals
		restored  bool
	}{
		{failpoint.RollbackIntent, (lifecycle.RollbackAbandoned{}).Type(), false},
		{failpoint.RollbackStaged, (lifecycle.RollbackAbandoned{}).Type(), false},
		{failpoint.RollbackExchanged, (lifecycle.RolledBack{}).Type(), true},
	} {
		t.Run(tc.failpoint, func(t *testing.T) {
			if code, _, errOut := c.Run(t, "", "exec", id, "--", "sh", "-c", "rm -rf * ; echo changed > changed.txt"); code != 0 {
				t.Fatalf("change: %s", errOut)
			}
			killedAt(tc.failpoint, "rollback", id, "base")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rt, err := stockade.Open(ctx, stockade.Options{Journal: c.Journal})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = rt.Close() }()
			sb, err := rt.Sandbox(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, "the rollback settled", func() bool {
				st, err := sb.State(ctx)
				return err == nil && st.RollingBack == nil
			})
			types := testkit.SandboxTypes(t, rt, id)
			if types[len(types)-1] != tc.settled && !slices.Contains(types[len(types)-3:], tc.settled) {
				t.Fatalf("journal after recovery: %v", types)
			}
			var out string
			testutil.Eventually(t, "the rollback's marker gone from work", func() bool {
				out, _, _, err = testkit.RunOut(t, sb, spec.Process{Argv: []string{"sh", "-c", "ls -A | sort | tr '\\n' ' '"}})
				return err == nil && !strings.Contains(out, "stockade-rollback")
			})
			if !tc.restored && out != "changed.txt " {
				t.Fatalf("workspace after recovery: %q, want the old one", out)
			}
			if tc.restored && digestOf(t, sb) != want {
				t.Fatalf("workspace after recovery: %q, not the checkpoint's", out)
			}
		})
	}
	killedAt(failpoint.CheckpointStored, "checkpoint", id, "lost")
	code, out, _ = c.Run(t, "", "checkpoint", "ls", id)
	if code != 0 || strings.Contains(out, "lost") || !strings.Contains(out, "base") {
		t.Fatalf("checkpoints after a kill before the fact: %d %q", code, out)
	}
}

// TestRollbackRightAfterCheckpoint: a rollback asked the moment a
// checkpoint returns (its consistent copy's thaw still under way) waits for
// the thaw and rolls back, instead of failing conflict.
func TestRollbackRightAfterCheckpoint(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	sb := e.Sandbox(t, spec.Kept)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range 3 {
		if out, _, _, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"sh", "-c", "echo v1 > version; echo ok"}}); err != nil || out != "ok\n" {
			t.Fatalf("%q %v", out, err)
		}
		ck, err := sb.Checkpoint(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := sb.Rollback(ctx, ck.ID); err != nil {
			t.Fatalf("round %d: a rollback right after its checkpoint: %v", i, err)
		}
		if out, _, _, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"cat", "version"}}); err != nil || out != "v1\n" {
			t.Fatalf("after the rollback: %q %v", out, err)
		}
	}
}

// TestStopDuringRollback: a stop asked while a rollback has the workload
// stopped goes on once the rollback is done: the sandbox ends exited with
// its workload not running (the rollback's restart does not undo the
// stop), and the rollback's outcome is journaled first.
func TestStopDuringRollback(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	sb := e.Sandbox(t, spec.Kept)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, _, _, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"sh", "-c", "dd if=/dev/zero of=big bs=1M count=16 2>/dev/null; echo ok"}}); err != nil || out != "ok\n" {
		t.Fatalf("%q %v", out, err)
	}
	ck, err := sb.Checkpoint(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	rolled := make(chan error, 1)
	go func() { rolled <- sb.Rollback(ctx, ck.ID) }()
	testutil.Eventually(t, "the rollback's warden given up", func() bool {
		return testkit.Count(testkit.SandboxTypes(t, e.RT, sb.ID()), (lifecycle.WardenLost{}).Type()) > 0
	})
	if err := sb.Stop(ctx); err != nil {
		t.Fatalf("stop during the rollback: %v", err)
	}
	err = <-rolled
	st, serr := sb.State(ctx)
	if serr != nil || st.Phase != lifecycle.PhaseExited {
		t.Fatalf("after the stop: %+v %v (rollback: %v)", st.Phase, serr, err)
	}
	c, ierr := e.Docker.ContainerInspect(ctx, st.Created.Workload)
	if ierr != nil || c.State.Running {
		t.Fatalf("the workload runs after the sandbox was stopped during a rollback (%v)", ierr)
	}
	types := testkit.SandboxTypes(t, e.RT, sb.ID())
	settled := max(slices.Index(types, (lifecycle.RolledBack{}).Type()), slices.Index(types, (lifecycle.RollbackAbandoned{}).Type()))
	if settled < 0 || settled > slices.Index(types, (lifecycle.SandboxStopping{}).Type()) {
		t.Fatalf("journal %v: want the rollback settled before the stop", types)
	}
}

// TestRollbackKilledPastTTL (the second review of issue 30): a runtime
// killed while its rollback has the workload stopped, reopened after the
// sandbox's TTL: recovery settles the rollback by its proof and starts the
// workload again before the TTL's stop, which then stops it for good — the
// sandbox ends exited with its workload not running, the rollback's
// outcome journaled before the stop.
func TestRollbackKilledPastTTL(t *testing.T) {
	c := testkit.NewCLI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	first, err := stockade.Open(ctx, stockade.Options{Journal: c.Journal})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := first.CreateSandbox(ctx, spec.Sandbox{Image: dockertest.ImageTag, Policy: testkit.SmallPolicy(), Lifetime: spec.Kept, TTL: 8 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	id, deadline := sb.ID(), time.Now().Add(8*time.Second)
	if out, _, _, err := testkit.RunOut(t, sb, spec.Process{Argv: []string{"sh", "-c", "echo v1 > version; echo ok"}}); err != nil || out != "ok\n" {
		t.Fatalf("write: %q %v", out, err)
	}
	if _, err := sb.Checkpoint(ctx, "base"); err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(c.Bin, "--journal", c.Journal, "rollback", id, "base")
	cmd.Env = append(os.Environ(), failpoint.Env+"="+failpoint.RollbackStaged)
	var exit *exec.ExitError
	if err := cmd.Run(); !errors.As(err, &exit) || exit.ExitCode() != -1 {
		t.Fatalf("rollback at %s: not killed: %v", failpoint.RollbackStaged, err)
	}
	time.Sleep(time.Until(deadline) + time.Second)
	rt, err := stockade.Open(ctx, stockade.Options{Journal: c.Journal})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rt.Close() }()
	var st lifecycle.Sandbox
	testutil.Eventually(t, "the sandbox exited by its TTL", func() bool {
		st, err = rt.ReplaySandbox(ctx, id, 0)
		return err == nil && st.Phase == lifecycle.PhaseExited
	})
	if st.RollingBack != nil {
		t.Fatalf("exited with its rollback unsettled: %+v", st.RollingBack)
	}
	cl := dockertest.Client(t)
	if ci, err := cl.ContainerInspect(ctx, st.Created.Workload); err != nil || ci.State.Running {
		t.Fatalf("the workload runs after the sandbox exited (%v)", err)
	}
	types := testkit.SandboxTypes(t, rt, id)
	settled := slices.Index(types, (lifecycle.RollbackAbandoned{}).Type())
	if settled < 0 || settled > slices.Index(types, (lifecycle.SandboxStopping{}).Type()) {
		t.Fatalf("journal %v: want the rollback abandoned before the stop", types)
	}
}
