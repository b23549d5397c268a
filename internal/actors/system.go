package actors

import (
	"fmt"
	"log/slog"
	"path"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/eventstream"

	"github.com/stockade/stockade/spec"
)

// Ref addresses an actor. It is protoactor's PID under a name of ours, so
// packages above actors/ hold references without importing protoactor.
type Ref = *actor.PID

// System is the runtime's actor system with its supervisor at the root.
type System struct {
	sys      *actor.ActorSystem
	root     *actor.PID
	rootDone chan struct{}
	sub      *eventstream.Subscription
	log      *slog.Logger
}

// NewSystem starts an actor system that logs through log (quiet when nil) and
// spawns the runtime supervisor. childFailed (if set) hears of every actor
// spawned with Spawn that panicked and was stopped, by the name it was
// spawned with, so the runtime can take what it ran out of service instead
// of losing track of it.
func NewSystem(log *slog.Logger, childFailed func(name string, reason any)) (*System, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &System{log: log, rootDone: make(chan struct{})}
	s.sys = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return log }))
	// protoactor logs a panic only at Info: surface supervision and dead
	// letters through the caller's logger at levels that say what they are.
	s.sub = s.sys.EventStream.Subscribe(func(evt any) {
		switch e := evt.(type) {
		case *actor.SupervisorEvent:
			log.Warn("actor failed", "actor", e.Child.GetId(), "directive", e.Directive.String(), "reason", fmt.Sprint(e.Reason))
		case *actor.DeadLetterEvent:
			// A message to an actor that is gone: a reply nobody waits for,
			// or a request that will never be answered.
			log.Warn("dead letter", "to", e.PID.GetId(), "message", fmt.Sprintf("%T", e.Message))
		}
	})
	props := actor.PropsFromProducer(func() actor.Actor { return &supervisor{done: s.rootDone, childFailed: childFailed} },
		actor.WithSupervisor(FailureStrategy()))
	root, err := s.sys.Root.SpawnNamed(props, "runtime")
	if err != nil {
		return nil, spec.Wrap(spec.CodeEngine, "actors", err, "spawning the runtime supervisor")
	}
	s.root = root
	return s, nil
}

// Send delivers msg to pid.
func (s *System) Send(pid *actor.PID, msg any) { s.sys.Root.Send(pid, msg) }

// Spawn starts an actor under the runtime supervisor with a stable name.
func (s *System) Spawn(props *actor.Props, name string) (*actor.PID, error) {
	reply := make(chan spawned, 1)
	s.sys.Root.Send(s.root, spawnChild{props: props, name: name, reply: reply})
	select {
	case r := <-reply:
		return r.pid, r.err
	case <-s.rootDone:
		return nil, spec.Errorf(spec.CodeCancelled, "actors", "the runtime is shutting down")
	}
}

// Shutdown stops the supervisor and with it every actor, waits (at most
// wait) until they have stopped, then shuts the system down. protoactor's
// Shutdown stops nothing by itself, hence the explicit stop first.
func (s *System) Shutdown(wait time.Duration) {
	s.sys.Root.Stop(s.root)
	select {
	case <-s.rootDone:
	case <-time.After(wait):
		s.log.Warn("actors did not stop in time", "wait", wait)
	}
	s.sys.EventStream.Unsubscribe(s.sub)
	s.sys.Shutdown()
}

type spawnChild struct {
	props *actor.Props
	name  string
	reply chan<- spawned
}

type spawned struct {
	pid *actor.PID
	err error
}

// supervisor is the runtime's root actor: it parents the sandbox actors.
type supervisor struct {
	done        chan struct{}
	childFailed func(name string, reason any)
}

func (a *supervisor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case spawnChild:
		pid, err := ctx.SpawnNamed(m.props, m.name)
		if err != nil {
			err = spec.Wrap(spec.CodeConflict, "actors", err, "spawning %s", m.name)
		}
		m.reply <- spawned{pid: pid, err: err}
	case ChildFailed:
		if a.childFailed != nil {
			a.childFailed(path.Base(m.Child.GetId()), m.Reason)
		}
	case *actor.Stopped:
		close(a.done)
	}
}

// ChildFailed is sent to a supervising actor when one of its children
// panicked. The child has been stopped; the parent decides what the failure
// means (a process fails, a sandbox fails closed), and journals it.
type ChildFailed struct {
	Child  *actor.PID
	Reason any
}

// FailureStrategy stops a panicking child and tells its parent with a
// ChildFailed message, instead of restarting it: a restart would reset its
// state (and, for a parent, stop all its children), losing track of live
// Docker work.
func FailureStrategy() actor.SupervisorStrategy { return failureStrategy{} }

type failureStrategy struct{}

func (failureStrategy) HandleFailure(sys *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, _ *actor.RestartStatistics, reason, _ any) {
	sys.EventStream.Publish(&actor.SupervisorEvent{Child: child, Reason: reason, Directive: actor.StopDirective})
	if self, ok := sup.(interface{ Self() *actor.PID }); ok {
		sys.Root.Send(self.Self(), ChildFailed{Child: child, Reason: reason})
	}
	sup.StopChildren(child)
}
