package actors_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade/stockade/internal/actors"
)

// syncBuffer is a log sink safe for the actor system's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// parent spawns a child that panics on "boom" and reports what it is told.
type parent struct {
	failed  chan actors.ChildFailed
	stopped chan struct{}
	child   *actor.PID
}

func (p *parent) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		p.child, _ = ctx.SpawnNamed(actor.PropsFromFunc(func(c actor.Context) {
			if s, ok := c.Message().(string); ok && s == "boom" {
				panic("boom")
			}
		}), "child")
	case string:
		ctx.Send(p.child, m)
	case actors.ChildFailed:
		p.failed <- m
	case *actor.Stopped:
		close(p.stopped)
	}
}

// TestFailureStrategy: a panicking child is stopped (not restarted), its
// parent is told with ChildFailed, and the failure reaches the caller's
// logger at Warn — protoactor alone logs it only at Info.
func TestFailureStrategy(t *testing.T) {
	var logs syncBuffer
	sys, err := actors.NewSystem(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := &parent{failed: make(chan actors.ChildFailed, 1), stopped: make(chan struct{})}
	pid, err := sys.Spawn(actor.PropsFromProducer(func() actor.Actor { return p }, actor.WithSupervisor(actors.FailureStrategy())), "parent")
	if err != nil {
		t.Fatal(err)
	}
	sys.Send(pid, "boom")
	select {
	case f := <-p.failed:
		if !strings.HasSuffix(f.Child.GetId(), "/child") || f.Reason != "boom" {
			t.Fatalf("ChildFailed %+v", f)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the parent was not told its child failed")
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "actor failed") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "boom") {
		t.Fatalf("the failure did not reach the logger at Warn:\n%s", logs.String())
	}
	// Shutdown stops every actor (protoactor's Shutdown alone stops none).
	sys.Shutdown(10 * time.Second)
	select {
	case <-p.stopped:
	default:
		t.Fatal("Shutdown returned before the actors stopped")
	}
}

func TestSpawnNameClash(t *testing.T) {
	sys, err := actors.NewSystem(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Shutdown(10 * time.Second)
	props := actor.PropsFromFunc(func(actor.Context) {})
	if _, err := sys.Spawn(props, "same"); err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Spawn(props, "same"); err == nil {
		t.Fatal("a second actor with the same name was spawned")
	}
}

// TestRootHearsFailedActor: an actor spawned under the runtime supervisor
// that panics is reported to the system's owner by its name, so the runtime
// can take its sandbox out of service instead of losing track of it.
func TestRootHearsFailedActor(t *testing.T) {
	type failure struct {
		name   string
		reason any
	}
	failed := make(chan failure, 1)
	sys, err := actors.NewSystem(nil, func(name string, reason any) { failed <- failure{name, reason} })
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Shutdown(10 * time.Second)
	pid, err := sys.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if s, ok := c.Message().(string); ok && s == "boom" {
			panic("boom")
		}
	}), "sandbox-x")
	if err != nil {
		t.Fatal(err)
	}
	sys.Send(pid, "boom")
	select {
	case f := <-failed:
		if f.name != "sandbox-x" || f.reason != "boom" {
			t.Fatalf("told %+v", f)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the runtime was not told its actor failed")
	}
}

// TestDeadLetterWarns: a message to an actor that is gone reaches the
// caller's logger at Warn with its type: a request nobody will answer.
func TestDeadLetterWarns(t *testing.T) {
	var logs syncBuffer
	sys, err := actors.NewSystem(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Shutdown(10 * time.Second)
	type lostRequest struct{}
	pid, err := sys.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if _, ok := c.Message().(*actor.Started); ok {
			c.Stop(c.Self())
		}
	}), "short-lived")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "lostRequest") && time.Now().Before(deadline) {
		sys.Send(pid, lostRequest{})
		time.Sleep(10 * time.Millisecond)
	}
	if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "dead letter") || !strings.Contains(out, "lostRequest") {
		t.Fatalf("no dead letter warning:\n%s", out)
	}
}
