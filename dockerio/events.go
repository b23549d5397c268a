package dockerio

import (
	"context"
	"strconv"
	"time"

	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
)

// The event actions Events delivers.
const (
	ActionDie     = "die"      // a container stopped
	ActionExecDie = "exec_die" // an exec in a container ended
)

// ContainerEvent is a die or exec_die event of one of an owner's containers.
type ContainerEvent struct {
	Action    string // ActionDie or ActionExecDie
	Container string
	Sandbox   string
	Role      Role
	// ExecID is the exec_die event's exec.
	ExecID string
	// ExitCode is the event's exit code (-1 when absent). For exec_die it
	// is 127 when the exec was gone: confirm by InspectExec.
	ExitCode int
	// Time is when the daemon saw it.
	Time time.Time
}

// Events streams the die and exec_die events of the owner's containers
// until ctx ends. (OOM kills are read from the memory cgroup's counter
// instead: on cgroup v1 the oom event names no process.) The error channel receives one error if the stream breaks (the
// daemon restarted, say); the caller subscribes again.
func (a *Adapter) Events(ctx context.Context, owner string, since time.Time) (<-chan ContainerEvent, <-chan error) {
	out := make(chan ContainerEvent)
	errc := make(chan error, 1)
	cli, err := a.ready(ctx)
	if err != nil {
		errc <- err
		close(out)
		return out, errc
	}
	f := filters.NewArgs(
		filters.Arg("type", string(events.ContainerEventType)),
		filters.Arg("label", LabelOwner+"="+owner),
		filters.Arg("event", ActionDie),
		filters.Arg("event", ActionExecDie),
	)
	opts := events.ListOptions{Filters: f}
	if !since.IsZero() {
		// Replayed from the daemon's buffer: nothing dies unseen between a
		// recovery and the subscription, or across a resubscription.
		opts.Since = strconv.FormatFloat(float64(since.UnixNano())/1e9, 'f', 6, 64)
	}
	msgs, errs := cli.Events(ctx, opts)
	go func() {
		defer close(out)
		for {
			select {
			case m := <-msgs:
				ev, ok := containerEvent(m, owner)
				if !ok {
					continue
				}
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			case err := <-errs:
				if ctx.Err() == nil {
					errc <- translate(err, "dockerio.events", "events of owner %s", owner)
				}
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, errc
}

// containerEvent reads one daemon event, checking the owner label again:
// the filter is the daemon's, the check is ours.
func containerEvent(m events.Message, owner string) (ContainerEvent, bool) {
	attrs := m.Actor.Attributes
	if attrs[LabelOwner] != owner || attrs[LabelSandbox] == "" {
		return ContainerEvent{}, false
	}
	ev := ContainerEvent{Action: string(m.Action), Container: m.Actor.ID, Sandbox: attrs[LabelSandbox], Role: Role(attrs[LabelRole]), ExitCode: -1,
		ExecID: attrs["execID"], Time: time.Unix(0, m.TimeNano)}
	if ev.Action == ActionExecDie && ev.ExecID == "" {
		return ContainerEvent{}, false
	}
	if c, err := strconv.Atoi(attrs["exitCode"]); err == nil {
		ev.ExitCode = c
	}
	return ev, true
}
