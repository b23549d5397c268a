package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade/stockade/actors/process"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/warden"
)

// The sandbox's warden: started by one Docker exec right after the workload
// (the create answers once it is up), journaled when its link is up, and
// replaced for new work when it is lost. Its processes hold the link; the
// sandbox holds it too, and closes it when the actor stops (a runtime that
// closes leaves the warden and its processes running for the next one).

type (
	wardenUp struct {
		gen    int
		link   *warden.Link
		hello  warden.Hello
		secret []byte
		err    error
	}
	wardenDown struct {
		gen int
		err error
	}
)

// wardenState is the sandbox actor's view of its warden.
type wardenState struct {
	link     *warden.Link
	gen      int
	starting bool
	held     []Launch // launches waiting for the link
	creating bool     // the first start, part of the create
}

// startWarden starts a warden off the mailbox. ensure checks the delivered
// binary first (a Put since the delivery could have changed it).
func (a *sandboxActor) startWarden(ensure bool) {
	a.w.gen++
	a.w.starting = true
	gen, sb, eng, log := a.w.gen, a.sb, a.deps.Engine, a.deps.Log
	id := a.p.ID
	a.goDocker(func(ctx context.Context) any {
		secret := make([]byte, warden.SecretSize)
		rand.Read(secret)
		if ensure {
			if err := eng.EnsureWarden(ctx, sb); err != nil {
				return wardenUp{gen: gen, err: err}
			}
		}
		stderr := &dockerio.LineLog{Max: 100, Log: func(line string) { log.Warn("warden", "sandbox", id, "line", line) }}
		conn, err := eng.StartWarden(ctx, sb, stderr)
		if err != nil {
			return wardenUp{gen: gen, err: err}
		}
		link, hello, err := warden.Open(ctx, conn.R, conn.W, conn.C, warden.Handshake{Secret: secret})
		if err != nil {
			return wardenUp{gen: gen, err: spec.Wrap(spec.CodeStreamFailure, "sandbox.warden", err, "sandbox %s: the warden's first link", id)}
		}
		return wardenUp{gen: gen, link: link, hello: hello, secret: secret}
	})
}

func (a *sandboxActor) onWardenUp(ctx actor.Context, m wardenUp) {
	if m.gen != a.w.gen {
		if m.link != nil {
			m.link.Close()
		}
		return
	}
	a.w.starting = false
	err := m.err
	if err == nil {
		ev := lifecycle.WardenStarted{PID: m.hello.PID, Socket: m.hello.Socket, Secret: hex.EncodeToString(m.secret), Version: m.hello.Version}
		if err = a.record(ev); err != nil {
			m.link.Close()
		}
	}
	creating := a.w.creating
	a.w.creating = false
	held := a.w.held
	a.w.held = nil
	if err != nil {
		a.deps.Log.Warn("the sandbox's warden did not start", "sandbox", a.p.ID, "err", err)
		for _, l := range held {
			l.Reply <- launchFailed(l, err)
		}
		if creating {
			a.createFailed(err)
		}
		return
	}
	a.w.link = m.link
	gen, link := m.gen, m.link
	go func() {
		<-link.Done()
		a.send(wardenDown{gen: gen, err: link.Err()})
	}()
	if creating {
		a.createdDone()
	}
	for _, l := range held {
		a.launch(ctx, l)
	}
}

// onWardenDown journals a lost warden while the sandbox serves: its
// processes learn it from their own streams and end; a new warden is
// started at the next launch (not at once: a workload that kills every
// warden must not make the runtime spin).
func (a *sandboxActor) onWardenDown(m wardenDown) {
	if m.gen != a.w.gen || a.w.link == nil {
		return
	}
	a.w.link = nil
	if a.state.Phase != lifecycle.PhaseStarted || a.stopReason != "" || a.exitDead || a.state.Warden == nil {
		return // the workload is stopping: its warden goes with it
	}
	reason := "the link ended"
	if m.err != nil {
		reason = m.err.Error()
	}
	a.deps.Log.Warn("the sandbox's warden was lost", "sandbox", a.p.ID, "reason", reason)
	if err := a.record(lifecycle.WardenLost{Reason: reason}); err != nil {
		a.deps.Log.Warn("journaling the warden's loss failed", "sandbox", a.p.ID, "err", err)
	}
}

// wardenLaunch holds a launch until the link is up, starting a warden if
// none is coming. false: the launch goes on with the link.
func (a *sandboxActor) wardenHold(m Launch) bool {
	if !a.deps.Config.Warden || a.w.link != nil {
		return false
	}
	a.w.held = append(a.w.held, m)
	if !a.w.starting {
		a.startWarden(true)
	}
	return true
}

func (a *sandboxActor) closeWarden() {
	if a.w.link != nil {
		a.w.link.Close()
	}
}

func launchFailed(l Launch, err error) process.Launch {
	return process.Launch{Err: spec.Wrap(spec.CodeStreamFailure, "sandbox", err, "process %s: the sandbox's warden is not available", l.ID)}
}
