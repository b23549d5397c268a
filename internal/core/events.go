package core

import (
	"context"
	"time"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/internal/actors/sandbox"
)

// Docker's events, fanned in: one subscription per runtime, each event
// handed to the sandbox it concerns.

// watchEvents follows the die and exec_die events of this owner's
// containers, so a workload that dies under a live runtime is noticed at
// once and a process's end is learned without polling. A broken stream (a
// daemon restart) is subscribed again, and every sandbox is told to look
// again at what it waits for (events may have been missed meanwhile).
func (rt *Runtime) watchEvents(ctx context.Context, since time.Time) {
	defer close(rt.eventsDone)
	for resumed := false; ctx.Err() == nil; resumed = true {
		evs, errs := rt.engine.Events(ctx, rt.journal.Owner(), since)
		if resumed {
			rt.toEverySandbox(sandbox.EventsResumed{})
		}
	stream:
		for {
			select {
			case ev, ok := <-evs:
				if !ok {
					break stream
				}
				if ev.Time.After(since) {
					since = ev.Time // a resubscription resumes from here
				}
				if ev.Role != dockerio.RoleWorkload {
					continue
				}
				switch ev.Action {
				case dockerio.ActionDie:
					rt.toSandbox(ev.Sandbox, sandbox.WorkloadDied{ExitCode: ev.ExitCode})
				case dockerio.ActionExecDie:
					rt.toSandbox(ev.Sandbox, sandbox.ExecDied{ExecID: ev.ExecID, ExitCode: ev.ExitCode})
				}
			case err := <-errs:
				rt.log.Warn("the Docker event stream broke; subscribing again", "err", err)
				break stream
			case <-ctx.Done():
				return
			}
		}
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
	}
}

// toSandbox sends msg to a live sandbox's actor, if there is one.
func (rt *Runtime) toSandbox(id string, msg any) {
	rt.mu.Lock()
	sb := rt.sandboxes[id]
	rt.mu.Unlock()
	if sb != nil && sb.pid != nil {
		rt.sys.Send(sb.pid, msg)
	}
}

func (rt *Runtime) toEverySandbox(msg any) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for _, sb := range rt.sandboxes {
		if sb.pid != nil {
			rt.sys.Send(sb.pid, msg)
		}
	}
}
