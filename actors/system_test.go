package actors_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade/stockade/actors"
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
	sys, err := actors.NewSystem(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})))
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
	sys, err := actors.NewSystem(nil)
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
