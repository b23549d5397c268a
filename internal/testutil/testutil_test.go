package testutil_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/internal/testenv"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/spec"
)

// TestMain keeps the runtimes these tests open away from the user's state.
func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

// TestEventually: Eventually returns once the condition holds, having
// asked no more than it had to.
func TestEventually(t *testing.T) {
	calls := 0
	testutil.Eventually(t, "the third look", func() bool { calls++; return calls == 3 })
	if calls != 3 {
		t.Fatalf("the condition was asked %d times, want 3", calls)
	}
}

// TestOpenFake: a runtime on the Fake runs a process (through the warden,
// or as an exec with NoWarden), opened with the options mutate amends.
func TestOpenFake(t *testing.T) {
	for _, noWarden := range []bool{false, true} {
		f := testutil.NewFake(t)
		f.NoWarden = noWarden
		var grace time.Duration
		rt := testutil.OpenFake(t, f, "", func(o *stockade.Options) { grace = o.StopGrace })
		if grace != 50*time.Millisecond {
			t.Errorf("mutate saw a StopGrace of %v, want the fixture's 50ms", grace)
		}
		ctx := context.Background()
		sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: "sha256:0000000000000000000000000000000000000000000000000000000000000001"})
		if err != nil {
			t.Fatal(err)
		}
		p, err := sb.Start(ctx, spec.Process{Argv: []string{"true"}, Stdout: spec.Discard, Stderr: spec.Discard})
		if err != nil {
			t.Fatal(err)
		}
		if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 {
			t.Fatalf("no warden %v: %+v %v", noWarden, res, err)
		}
		if err := sb.Remove(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
