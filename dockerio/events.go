package dockerio

import (
	"context"
	"strconv"
	"time"

	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
)

// ContainerEvent is a die or oom event of one of an owner's containers.
type ContainerEvent struct {
	Action    string // "die" or "oom"
	Container string
	Sandbox   string
	Role      Role
	// ExitCode is the die event's exit code (-1 for oom or when absent).
	ExitCode int
	// Time is when the daemon saw it.
	Time time.Time
}

// Events streams the die and oom events of the owner's containers until ctx
// ends. The error channel receives one error if the stream breaks (the
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
		filters.Arg("event", string(events.ActionDie)),
		filters.Arg("event", string(events.ActionOOM)),
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
		Time: time.Unix(0, m.TimeNano)}
	if c, err := strconv.Atoi(attrs["exitCode"]); err == nil {
		ev.ExitCode = c
	}
	return ev, true
}
