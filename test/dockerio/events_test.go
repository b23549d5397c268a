package dockerio

import (
	"context"
	"testing"
	"time"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// TestDockerioExecDieEvents: the owner's event stream carries an exec_die
// event naming the exec and its exit code (the runtime learns a process's
// end from it), and the wrapper reports the sandbox's OOM kill count at the
// start, which OOMKills reads again.
func TestDockerioExecDieEvents(t *testing.T) {
	e := testkit.NewDio(t)
	sb := e.Sandbox(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	evs, errs := e.Adapter.Events(ctx, e.Owner, time.Now().Add(-time.Second))
	req := dockerio.ExecRequest{ProcessID: testkit.NewID(), Spec: spec.Process{Argv: []string{"sh", "-c", "exit 5"}, Stdout: spec.Pipe, Stderr: spec.Pipe}}
	id, err := e.Adapter.CreateExec(ctx, sb, req)
	if err != nil {
		t.Fatal(err)
	}
	att, err := e.Adapter.AttachExec(ctx, sb, id, req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = att.Close() }()
	if att.OOMKills() < 0 {
		t.Fatalf("the wrapper could not read the OOM kill count (%d)", att.OOMKills())
	}
	if n, err := e.Adapter.OOMKills(ctx, sb); err != nil || n != att.OOMKills() {
		t.Fatalf("OOMKills: %d %v, want %d", n, err, att.OOMKills())
	}
	for {
		select {
		case ev := <-evs:
			if ev.Action != dockerio.ActionExecDie || ev.ExecID != id {
				continue
			}
			if ev.ExitCode != 5 || ev.Sandbox != sb.ID || ev.Role != dockerio.RoleWorkload {
				t.Fatalf("exec_die %+v, want exit 5 of sandbox %s's workload", ev, sb.ID)
			}
			return
		case err := <-errs:
			t.Fatalf("event stream: %v", err)
		case <-ctx.Done():
			t.Fatal("no exec_die event for the exec")
		}
	}
}
