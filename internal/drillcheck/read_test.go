package drillcheck

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/internal/testenv"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/spec"
)

// TestMain keeps the runtime TestReadJournal opens away from the user's
// state.
func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

// TestReadJournal: Read folds the processes of a journal a runtime on the
// Fake left and finds their recordings; a process that ended with its
// output recorded breaks no promise, and the journal replays. A journal
// never made holds nothing.
func TestReadJournal(t *testing.T) {
	none, err := Read(filepath.Join(t.TempDir(), "never.db"))
	if err != nil || len(none.procs) != 0 {
		t.Fatalf("a journal never made: %+v %v, want nothing", none, err)
	}

	f := testutil.NewFake(t)
	f.Script = func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun {
		return dockerio.FakeRun{Frames: []dockerio.FakeFrame{{Stream: framing.Stdout, Data: []byte("hello\n")}}}
	}
	path := filepath.Join(t.TempDir(), "journal.db")
	rt := testutil.OpenFake(t, f, path)
	ctx := context.Background()
	sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: "sha256:0000000000000000000000000000000000000000000000000000000000000001", Lifetime: spec.Kept})
	if err != nil {
		t.Fatal(err)
	}
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"x"}, Stderr: spec.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, p.Stdout()); err != nil {
		t.Fatal(err)
	}
	if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}

	dj, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := dj.procs[p.ID()]; got == nil || !got.Terminal() || !dj.recs[p.ID()].complete || dj.recs[p.ID()].end != 6 {
		t.Fatalf("process %+v, recording %+v: want exited, its 6 bytes recorded complete", got, dj.recs[p.ID()])
	}
	var violations []string
	violate := func(f string, a ...any) { violations = append(violations, fmt.Sprintf(f, a...)) }
	dj.CheckAtKill(violate)
	if notes := dj.CheckFinal(dj, nil, violate); len(notes) > 0 || len(violations) > 0 {
		t.Errorf("notes %q, violations %q: want none", notes, violations)
	}
	if err := Replay(path); err != nil {
		t.Errorf("replay: %v", err)
	}
}
