// Package testutil is what the module's tests share beyond testenv's
// isolation: Eventually, a bounded wait for a condition, and the runtime on
// the Fake engine the root's, the server's, the node's and the CLI's tests
// run on (NewFake, OpenFake).
//
// It imports the root package, so the root's own tests use it from their
// external test package (stockade_test), and no package the root imports
// can use it in its tests (an import cycle). It is for tests only.
package testutil

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/profile"
)

// Bound is how long Eventually waits before it fails the test. It only
// stops a test that would hang: long enough for a loaded machine and the
// real daemon, it is never an assertion on how long anything takes.
const Bound = time.Minute

// maxPoll is the longest pause between two looks at a condition.
const maxPoll = 50 * time.Millisecond

// Eventually polls cond until it holds, and fails the test (naming what it
// waited for) if it does not within Bound. It looks at once, then after
// pauses that double from a millisecond up to 50 ms: a condition that holds
// soon is seen soon, one that takes seconds (or runs a process to find
// out) is not asked about more than 20 times a second. cond runs on the
// caller's goroutine, so it may itself fail the test.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Bound)
	for pause := time.Millisecond; !cond(); pause = min(2*pause, maxPoll) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", Bound, what)
		}
		time.Sleep(pause)
	}
}

// NewFake is a Fake engine with the linux-x64 profile, running the real
// warden in-process. A test of the exec transport itself (what Docker's
// exec API does to a process) sets NoWarden on it before opening a runtime.
func NewFake(t testing.TB) *dockerio.Fake {
	t.Helper()
	p, err := profile.Lookup("linux-x64")
	if err != nil {
		t.Fatal(err)
	}
	return dockerio.NewFake(p)
}

// OpenFake opens a runtime on engine (a Fake, or an engine over one) with
// the journal at path ("" makes one in a temporary directory) and a
// StopGrace of 50 ms, logging to stderr when $DBGLOG is set; mutate amends
// those options. The runtime is closed when the test ends (a test may close
// it before), and the test fails if a removed sandbox left an ask
// unanswered (Runtime.Unanswered).
func OpenFake(t testing.TB, engine dockerio.Engine, path string, mutate ...func(*stockade.Options)) *stockade.Runtime {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "journal.db")
	}
	opts := stockade.Options{Journal: path, Engine: engine, StopGrace: 50 * time.Millisecond}
	if os.Getenv("DBGLOG") != "" {
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	for _, m := range mutate {
		m(&opts)
	}
	rt, err := stockade.Open(context.Background(), opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		_ = rt.Close() // teardown (a test may have closed it)
		if u := rt.Unanswered(); len(u) > 0 {
			t.Errorf("removed sandboxes left asks unanswered: %v", u)
		}
	})
	return rt
}
