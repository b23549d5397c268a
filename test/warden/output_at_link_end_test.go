package warden

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// Issue 19, defect 4: the output a runtime has received from its warden
// when the link ends is handed on, recorded and counted, not dropped.
//
// The process writes wlOutput bytes (less than the warden's window, so the
// warden reads and sends all of them) while its consumer does not read:
// the consumer's pipe holds 64 KiB, and the rest waits in the runtime.
// Then the process kills its warden. Before the fix the consumer got the
// pipe's 64 KiB, the exit counted the chunk the read loop held on top,
// and the rest was dropped; now the consumer gets every byte the runtime
// received, the exit counts them and the recording holds them, and the
// stream ends with the cut (not a clean end). (How much the runtime
// received before the warden died depends on the transport: the process
// gives it a moment, and the exact check of Proc.Next against the real
// warden is cmd/warden's TestOutputReceivedBeforeLinkEndIsHandedOn.)
func TestWardenOutputReceivedAtLinkEndIsDelivered(t *testing.T) {
	const wlOutput = 960 << 10
	// More than the consumer's pipe holds (spec.DefaultHighWaterMark).
	const wlAtLeast = 64<<10 + 1
	e := testkit.NewAPI(t, stockade.Options{})
	sb := e.Sandbox(t, spec.Kept)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := sb.Start(ctx, spec.Process{
		Argv:  []string{"sh", "-c", "head -c 983040 /dev/zero | tr '\\0' x; read go; sleep 2; kill -9 $PPID; exec sleep 30"},
		Stdin: true, Stdout: spec.Pipe, Stderr: spec.Discard,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The consumer reads nothing until the warden is dead: the process
	// reads "go" only once its output is written.
	if _, err := io.WriteString(p.Stdin(), "go\n"); err != nil {
		t.Fatal(err)
	}
	wlWaitWardenLost(t, e.RT, sb.ID())
	got, rerr := io.ReadAll(p.Stdout())
	res, werr := p.Wait(ctx)
	t.Logf("consumer got %d bytes (%v); result %+v %v", len(got), rerr, res, werr)
	if res.Reason != "lost" {
		t.Fatalf("a process whose warden was killed: %+v %v, want lost", res, werr)
	}
	if len(got) < wlAtLeast || !bytes.Equal(got, bytes.Repeat([]byte("x"), len(got))) {
		t.Fatalf("the consumer got %d bytes of the %d written, want more than its pipe's %d: the output the runtime had received was dropped", len(got), wlOutput, wlAtLeast-1)
	}
	if !spec.IsCode(rerr, spec.CodeStreamFailure) {
		t.Errorf("the consumer's stream ended with %v, want a stream_failure: it was cut by the warden's loss", rerr)
	}
	if res.StdoutBytes != int64(len(got)) {
		t.Errorf("the exit counts %d stdout bytes, the consumer got %d", res.StdoutBytes, len(got))
	}
	var rec []byte
	if _, err := e.RT.Logs(ctx, p.ID(), func(c stockade.OutputChunk) error {
		if c.Stream == "stdout" {
			rec = append(rec, c.Data...)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rec, got) {
		t.Errorf("the recording holds %d bytes, the consumer got %d", len(rec), len(got))
	}
}

// wlWaitWardenLost waits until the sandbox's journal says its warden was
// lost.
func wlWaitWardenLost(t *testing.T, rt *stockade.Runtime, id string) {
	t.Helper()
	limit := time.Now().Add(time.Minute)
	for testkit.Count(testkit.SandboxTypes(t, rt, id), "sandbox.warden_lost") == 0 {
		if time.Now().After(limit) {
			t.Fatal("the warden's loss was never journaled")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
