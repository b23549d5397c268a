package stockade_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/statedir"
)

// TestFakeLogsOfARunningProcessWithoutARecordingYet: a process that runs,
// recorded, but whose recording is not on disk (its read loop makes it just
// after the start returns) has no output yet: Logs answers an empty,
// incomplete summary, not not_found (an agent that runs `exec -d` then
// `logs` at once got "no recording"). A process that ended, or an unknown
// id, without a recording is still not_found.
func TestFakeLogsOfARunningProcessWithoutARecordingYet(t *testing.T) {
	f := testutil.NewFake(t)
	hold := make(chan struct{})
	f.Script = func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun { return dockerio.FakeRun{Hold: hold} }
	path := filepath.Join(t.TempDir(), "j.db")
	rt := testutil.OpenFake(t, f, path)
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage, Lifetime: spec.Kept})
	p := mustStart(t, sb, spec.Process{Argv: []string{"sleep"}, Stderr: spec.Discard})
	go drain(p)
	head := filepath.Join(statedir.Recordings(path), p.ID()+".rec")
	testutil.Eventually(t, "the read loop to make the recording", func() bool { _, err := os.Stat(head); return err == nil })
	// As it is in the moment before the read loop makes it.
	if err := os.Remove(head); err != nil {
		t.Fatal(err)
	}
	var chunks int
	sum, err := rt.Logs(context.Background(), p.ID(), func(stockade.OutputChunk) error { chunks++; return nil })
	if err != nil || sum.Complete || chunks != 0 {
		t.Fatalf("Logs of a running process with no recording yet: %+v, %d chunks, %v; want empty, incomplete, no error", sum, chunks, err)
	}
	close(hold)
	if _, err := p.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Logs(context.Background(), p.ID(), func(stockade.OutputChunk) error { return nil }); !spec.IsCode(err, spec.CodeNotFound) {
		t.Fatalf("Logs of an ended process whose recording is gone: %v, want not_found", err)
	}
	if _, err := rt.Logs(context.Background(), "nosuchprocess", func(stockade.OutputChunk) error { return nil }); !spec.IsCode(err, spec.CodeNotFound) {
		t.Fatalf("Logs of an unknown process: %v, want not_found", err)
	}
}
