package process

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// paCollector forwards every user message it gets to got.
type paCollector struct{ got chan any }

func (c paCollector) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started, *actor.Stopping, *actor.Stopped:
	default:
		c.got <- ctx.Message()
	}
}

// TestThawedTimers: a stop timer does not run while the workload is
// frozen (it is held, with what was left of it) and runs after the thaw;
// a timer's message that arrives during a freeze is deferred to the thaw.
func TestThawedTimers(t *testing.T) {
	const d = 20 * time.Millisecond
	tests := []struct {
		name string
		run  func(a *processActor)
	}{
		{"armed, then frozen", func(a *processActor) {
			a.after(d, graceExpired{gen: 1})
			a.onFreeze(Freeze{Frozen: true})
		}},
		{"armed while frozen", func(a *processActor) {
			a.onFreeze(Freeze{Frozen: true})
			a.after(d, graceExpired{gen: 1})
		}},
		{"fired into a freeze", func(a *processActor) {
			a.onFreeze(Freeze{Frozen: true})
			if !a.heldByFreeze(graceExpired{gen: 1}) {
				t.Fatal("a timer's message during a freeze was not held")
			}
		}},
	}
	sys := actor.NewActorSystem()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan any, 4)
			pid := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return paCollector{got: got} }))
			defer sys.Root.Stop(pid)
			a := &processActor{sys: sys, self: pid}
			tc.run(a)
			for _, tt := range a.stopTimers {
				if tt.t != nil || tt.left > d { // left -1: it fired just before the freeze
					t.Fatalf("a stop timer while frozen: armed %v, left %v (of %v)", tt.t != nil, tt.left, d)
				}
			}
			a.onFreeze(Freeze{Frozen: false})
			select {
			case m := <-got:
				if m != (graceExpired{gen: 1}) {
					t.Fatalf("after the thaw: %#v", m)
				}
			case <-time.After(time.Minute):
				t.Fatal("the timer never ran after the thaw")
			}
			if a.heldByFreeze(graceExpired{gen: 2}) {
				t.Fatal("a timer's message was held while thawed")
			}
			a.stopStopTimers()
		})
	}
}
