package serve

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/test/testkit"
)

// caLines is how many lines the crash story's process writes after its
// gate opens; caScript writes "up", waits for the gate, then writes them.
const caLines = 3000

var caScript = fmt.Sprintf(`echo up; while [ ! -e /tmp/gate ]; do sleep 0.1; done; i=0; while [ $i -lt %d ]; do echo "line $i"; i=$((i+1)); done`, caLines)

func caWant() string {
	var b strings.Builder
	b.WriteString("up\n")
	for i := range caLines {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

// caKillHost starts `stockade exec` of caScript in sandbox (served, or
// embedded when no server runs), reads its first line and kills it -9.
func caKillHost(t *testing.T, e *testkit.CLIEnv, sandbox string) {
	t.Helper()
	cmd := exec.Command(e.Bin, "--journal", e.Journal, "exec", sandbox, "--", "sh", "-c", caScript)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	sub := testkit.StartSubprocess(t, cmd)
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "up\n" {
		t.Fatalf("first line of the host's exec: %q %v", line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-sub.Done
}

// caReattach is the new host's side of the crash story: it finds the
// killed host's process by id (the one process of the sandbox), attaches
// from 0 and from where the dead host stopped reading (after "up\n") while
// the process still waits, lets it go on, and checks that each attach got
// every byte from its offset once, in order, and the exit.
func caReattach(t *testing.T, ctx context.Context, rt host.Runtime, sandbox string) {
	t.Helper()
	list, err := rt.Sandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var id string
	for _, s := range list {
		if s.ID == sandbox && len(s.Processes) == 1 {
			id = s.Processes[0]
		}
	}
	if id == "" {
		t.Fatalf("after its host was killed, sandbox %s lists no running process: %+v", sandbox, list)
	}
	p, err := rt.Process(ctx, id)
	if err != nil {
		t.Fatalf("Process(%s): %v", id, err)
	}
	want := caWant()
	type attached struct {
		from int64
		got  strings.Builder
		bad  string
		end  host.Attached
		err  error
	}
	froms := []*attached{{from: 0}, {from: int64(len("up\n"))}}
	var wg sync.WaitGroup
	for _, a := range froms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.end, a.err = p.Attach(ctx, host.AttachOptions{From: a.from}, func(c host.OutputChunk) error {
				if c.Stream != "stdout" || c.Offset != a.from+int64(a.got.Len()) {
					a.bad = fmt.Sprintf("chunk %s at %d (gap %d) after %d bytes", c.Stream, c.Offset, c.Gap, a.got.Len())
				}
				a.got.Write(c.Data)
				return nil
			})
		}()
	}
	sb, err := rt.Sandbox(ctx, sandbox)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, res, err := testkit.RunIn(ctx, sb, "touch /tmp/gate"); err != nil || res.ExitCode != 0 {
		t.Fatalf("opening the gate: %+v %v", res, err)
	}
	wg.Wait()
	for _, a := range froms {
		if a.err != nil || a.bad != "" || a.end.Result.Reason != "exited" || a.end.Result.ExitCode != 0 || !a.end.Output.Complete {
			t.Fatalf("attach from %d: %+v %v %s", a.from, a.end, a.err, a.bad)
		}
		if a.got.String() != want[a.from:] {
			t.Fatalf("attach from %d: %d bytes, want %d (first difference at %d)", a.from, a.got.Len(), len(want)-int(a.from), testkit.FirstDiff(a.got.String(), want[a.from:]))
		}
	}
}

// TestCrashAttachServed: the crash story of a served host. A client that
// runs a process is killed -9 mid-output; a new client finds the process
// by id and attaches from 0 and from where the dead one stopped: every
// byte once and the exit.
func TestCrashAttachServed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e, _, c, sb := testkit.ServedKeptSandbox(t, ctx)
	caKillHost(t, e, sb.ID())
	caReattach(t, ctx, c, sb.ID())
}

// TestCrashAttachEmbedded: the same story when the host embeds the
// runtime: the killed host is `stockade exec` with no server (the runtime
// in its process dies with it, the process runs on in its kept sandbox),
// and the new host opens the journal itself, whose recovery re-adopts the
// process, and attaches.
func TestCrashAttachEmbedded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e := testkit.NewCLI(t)
	code, out, errOut := e.Run(t, "", "sandbox", "create")
	sandbox := strings.TrimSpace(out)
	if code != 0 || sandbox == "" {
		t.Fatalf("create: %d %q %q", code, out, errOut)
	}
	caKillHost(t, e, sandbox)
	rt, err := stockade.Open(ctx, stockade.Options{Journal: e.Journal})
	if err != nil {
		t.Fatalf("the new host's open: %v", err)
	}
	t.Cleanup(func() {
		_ = rt.Close()
		testkit.CheckAnswered(t, rt)
	})
	caReattach(t, ctx, rt.Host(), sandbox)
}
