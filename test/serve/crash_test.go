package serve

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// TestServeCrashMidExec: kill -9 of `stockade serve` while an attached
// process runs in a kept sandbox, then a restart on the same journal (the
// stale socket file replaced). The sandbox is re-adopted, a new exec in it
// works, the killed server's process is re-adopted detached and its exit
// journaled when it ends, journal show works through the CLI while served,
// and once the sandbox is removed nothing of the journal's owner is left
// on the daemon.
func TestServeCrashMidExec(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e, first, c, sb := testkit.ServedKeptSandbox(t, ctx)
	st, err := sb.State(ctx)
	if err != nil || st.Owner == "" {
		t.Fatalf("state: %+v %v", st, err)
	}
	owner := st.Owner
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", "echo up; sleep 15"}})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	// Stderr is piped too: drain it so the stream never stalls.
	go func() { _, _ = io.Copy(io.Discard, p.Stderr()) }()
	line, err := bufio.NewReader(p.Stdout()).ReadString('\n')
	if err != nil || line != "up\n" {
		t.Fatalf("first line of the attached process: %q %v", line, err)
	}
	killedPID := p.ID()

	// kill -9 mid-exec: the attached client loses its server; its process
	// ends with an error, not a result.
	if err := first.Stop(t, syscall.SIGKILL); err == nil {
		t.Fatal("serve after SIGKILL exited 0")
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	res, werr := p.Wait(wctx)
	wcancel()
	if werr == nil || ctx.Err() != nil {
		t.Fatalf("the attached process after its server was killed: %+v %v, want an error from the lost connection", res, werr)
	}
	_ = c.Close()
	if fi, err := os.Lstat(first.Sock); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("after kill -9 the socket file should be left behind (stale): %v", err)
	}

	// Restart on the same journal: the stale socket is replaced.
	second := e.Serve(t, ctx)
	c2 := second.Dial(t)
	rep, err := c2.Recovery(ctx)
	if err != nil {
		t.Fatalf("recovery report: %v", err)
	}
	var line2 *host.RecoveredSandbox
	for i := range rep.Sandboxes {
		if rep.Sandboxes[i].ID == sb.ID() {
			line2 = &rep.Sandboxes[i]
		}
	}
	if line2 == nil || line2.Decision != "re-adopt" || line2.Settled != lifecycle.PhaseStarted || line2.Error != "" || rep.Processes < 1 {
		t.Fatalf("recovery report after kill -9: %+v (line %+v), want the sandbox re-adopted and started, its process counted", rep, line2)
	}
	infos, err := c2.Sandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, in := range infos {
		if in.ID == sb.ID() {
			found = true
			if in.Phase != lifecycle.PhaseStarted || !in.Adopted || in.Unreconciled {
				t.Fatalf("the sandbox after restart: %+v, want started and adopted", in)
			}
		}
	}
	if !found {
		t.Fatalf("the sandbox is not listed after restart: %+v", infos)
	}

	// A new exec in the re-adopted sandbox.
	again, err := c2.Sandbox(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, res2, err := testkit.RunIn(ctx, again, "echo again; echo on-stderr >&2; exit 5")
	if err != nil || out != "again\n" || errOut != "on-stderr\n" || res2.ExitCode != 5 || res2.Reason != "exited" {
		t.Fatalf("exec after restart: %q %q %+v %v", out, errOut, res2, err)
	}

	// The killed server's process was re-adopted detached: it ends on its
	// own (sleep 15), its exit is journaled, and Wait by id (the server
	// follows the journal for a process it did not start) reports it.
	if res, err := c2.Wait(ctx, killedPID); err != nil || res.Reason != "exited" || res.ExitCode != 0 {
		t.Fatalf("wait by id for a process re-adopted from the killed server: %+v %v, want exited 0", res, err)
	}
	var exited *lifecycle.ProcessExited
	var ptypes []string
	deadline := time.Now().Add(90 * time.Second)
	for exited == nil {
		evs, err := c2.History(ctx, sb.ID())
		if err != nil {
			t.Fatal(err)
		}
		ptypes = ptypes[:0]
		for _, ev := range evs {
			if ev.Kind != "process" || ev.ID != killedPID {
				continue
			}
			ptypes = append(ptypes, ev.Type)
			if ev.Type == "process.exited" {
				exited = new(lifecycle.ProcessExited)
				if err := json.Unmarshal(ev.Payload, exited); err != nil {
					t.Fatalf("process.exited payload %s: %v", ev.Payload, err)
				}
			}
		}
		if exited == nil && time.Now().After(deadline) {
			t.Fatalf("the re-adopted process %s has no exit in the journal 90s after a 15s sleep: %v\n%s", killedPID, ptypes, second.Logs.String())
		}
		time.Sleep(250 * time.Millisecond)
	}
	if !slices.Contains(ptypes, "process.started") || exited.ExitCode == nil || *exited.ExitCode != 0 || exited.Reason != lifecycle.ReasonExited {
		t.Fatalf("journal of the re-adopted process %s: %v, exit %+v; want started … exited with code 0", killedPID, ptypes, *exited)
	}

	// journal show through the CLI while served (an embedded runtime
	// would find the journal locked).
	code, show, errShow := e.Run(t, "", "journal", "show", sb.ID())
	if code != 0 || !strings.Contains(show, "recovered") || !strings.Contains(show, "adopted") || !strings.Contains(show, killedPID) || !strings.Contains(show, "process.exited") {
		t.Fatalf("journal show while served: %d\n%s\n%s", code, show, errShow)
	}

	if err := again.Remove(ctx); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if _, err := c2.Sandbox(ctx, sb.ID()); !spec.IsCode(err, spec.CodeNotFound) {
		t.Fatalf("the sandbox after remove: %v, want not_found", err)
	}
	if n, err := dockertest.Owned(ctx, dockertest.Client(t), owner); err != nil || n != 0 {
		t.Fatalf("after remove, %d resources of owner %s left on the daemon (%v)", n, owner, err)
	}
	_ = c2.Close()
	if err := second.Stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("serve after SIGTERM: %v (want exit 0)\n%s", err, second.Logs.String())
	}
}
