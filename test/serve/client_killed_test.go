package serve

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/test/testkit"
)

// TestServeClientKilledProcessRunsOn: the crash story of a served host. A
// client attached to a process (`stockade exec`) is killed -9 mid-output;
// the process runs on. A new client finds it by id in the journal
// (Runtime.Process), its exit comes to Wait, and Logs holds its whole
// output, every byte once, the part written after the client died
// included.
func TestServeClientKilledProcessRunsOn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e, _, c, sb := testkit.ServedKeptSandbox(t, ctx)
	const lines = 2000
	script := fmt.Sprintf(`echo up; while [ ! -e /tmp/gate ]; do sleep 0.1; done; i=0; while [ $i -lt %d ]; do echo "line $i"; i=$((i+1)); done`, lines)
	cmd := exec.Command(e.Bin, "--journal", e.Journal, "exec", sb.ID(), "--", "sh", "-c", script)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	sub := testkit.StartSubprocess(t, cmd)
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "up\n" {
		t.Fatalf("first line of the attached exec: %q %v", line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-sub.Done

	// The new host knows the sandbox; its process is found in the journal.
	list, err := c.Sandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var id string
	for _, s := range list {
		if s.ID == sb.ID() && len(s.Processes) == 1 {
			id = s.Processes[0]
		}
	}
	if id == "" {
		t.Fatalf("after its client was killed, sandbox %s lists no running process: %+v", sb.ID(), list)
	}
	var rt host.Runtime = c
	p, err := rt.Process(ctx, id)
	if err != nil {
		t.Fatalf("Process(%s): %v", id, err)
	}
	if _, _, res, err := testkit.RunIn(ctx, sb, "touch /tmp/gate"); err != nil || res.ExitCode != 0 {
		t.Fatalf("opening the gate: %+v %v", res, err)
	}
	res, err := p.Wait(ctx)
	var want strings.Builder
	want.WriteString("up\n")
	for i := range lines {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if err != nil || res.Reason != "exited" || res.ExitCode != 0 || res.StdoutBytes != int64(want.Len()) {
		t.Fatalf("the process after its client was killed: %+v %v, want exited 0 with %d bytes", res, err, want.Len())
	}
	var got strings.Builder
	sum, err := rt.Logs(ctx, id, func(ch host.OutputChunk) error {
		if ch.Gap != 0 || int64(got.Len()) != ch.Offset {
			return fmt.Errorf("chunk at %d (gap %d) after %d bytes", ch.Offset, ch.Gap, got.Len())
		}
		got.Write(ch.Data)
		return nil
	})
	if err != nil || !sum.Complete || got.String() != want.String() {
		t.Fatalf("its recording: %d bytes, %+v, %v; want %d bytes, complete (first difference at %d)", got.Len(), sum, err, want.Len(), testkit.FirstDiff(got.String(), want.String()))
	}
}
