package process

import (
	"context"
	"syscall"
	"time"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// Two views of a Docker exec that the actor must not take at face value
// after an attach went wrong (dockerio/doc.go lists both traps):
//
//   - An attach that failed may still have started the process (the
//     daemon sent its 101 and then the connection was cut before the
//     wrapper's marker). It runs with nobody reading its output and no
//     group journaled, so no timeout or stop could reach it. The actor
//     reads its group back from the sandbox's tmpfs, journals it started,
//     then journals the stop and kills it: a process whose output nobody
//     can read is not left to run.
//   - After an attach connection dropped, Docker 20.10 marks the exec
//     ended with code 126 once its streams close, while the process may
//     live on. A 126 is believed only when the exec_die event says so, or
//     once a probe of the group (kill -0) finds no member and the event
//     was given a moment to arrive.

type (
	// startedGroupRead: the group of a process whose attach failed but
	// whose exec runs.
	startedGroupRead struct {
		pgid int
		err  error
	}
	// groupProbed: whether a member of the group still lives (err: the
	// probe could not say).
	groupProbed struct {
		alive bool
		err   error
	}
)

// readStartedGroup reads back, off the mailbox, the group of a process
// whose attach failed while its exec runs.
func (a *processActor) readStartedGroup() {
	if a.groupReading {
		return
	}
	a.groupReading = true
	sb, id, bg := a.p.Sandbox, a.p.ID, a.bg
	go func() {
		ctx, cancel := context.WithTimeout(bg, a.deps.Config.DockerTimeout)
		defer cancel()
		pgid, err := a.deps.Engine.ReadGroup(ctx, sb, id)
		a.send(startedGroupRead{pgid: pgid, err: err})
	}()
}

func (a *processActor) onStartedGroupRead(m startedGroupRead) {
	a.groupReading = false
	if a.done || a.state.Phase != lifecycle.PhaseReserved {
		return
	}
	if m.err != nil {
		// The wrapper may not have written it yet, or the daemon cannot
		// answer: look at the exec again shortly.
		a.deps.Log.Warn("an unattached process's group cannot be read yet", "process", a.p.ID, "err", m.err)
		a.armRecheck(time.Second)
		return
	}
	if err := a.record(lifecycle.ProcessStarted{Group: m.pgid}); err != nil {
		a.abandonJournal(err)
		return
	}
	reason := a.stopReason
	if reason == "" {
		reason = lifecycle.ReasonFailed
	}
	if err := a.record(lifecycle.ProcessStopping{Reason: reason}); err != nil {
		// No kill without a journaled intent: the journal, which now holds
		// its group, lets the next recovery settle it.
		a.abandonJournal(err)
		return
	}
	a.signalGroup(syscall.SIGKILL, nil)
	a.armRecheck(time.Second) // in case its exec_die never reaches us
}

// doubt126 reports whether an inspect's "ended with 126" must be checked
// before it is believed, and starts that check. The exec_die event's code
// wins when it came; otherwise the group is probed.
func (a *processActor) doubt126(st *dockerio.ExecState) bool {
	if a.wproc != nil || !st.Known || st.Running || st.Pid == 0 || st.ExitCode != 126 || a.state.Phase == lifecycle.PhaseReserved {
		return false
	}
	if a.diedCode != nil {
		st.ExitCode = *a.diedCode
		return false
	}
	if a.groupGone {
		// The group is gone and the event had its moment: 126 it is
		// (a program that could not be executed ends so, too).
		return false
	}
	pgid := a.state.Group
	if a.att != nil {
		pgid = a.att.Group()
	}
	if pgid <= 1 || a.probing {
		return pgid > 1
	}
	a.probing = true
	sb, bg := a.p.Sandbox, a.bg
	go func() {
		ctx, cancel := context.WithTimeout(bg, a.deps.Config.DockerTimeout)
		defer cancel()
		err := a.deps.Engine.SignalGroup(ctx, sb, pgid, 0)
		switch {
		case err == nil:
			a.send(groupProbed{alive: true})
		case spec.IsCode(err, spec.CodeNotFound):
			a.send(groupProbed{})
		default:
			a.send(groupProbed{err: err})
		}
	}()
	return true
}

func (a *processActor) onGroupProbed(m groupProbed) {
	a.probing = false
	if a.done {
		return
	}
	switch {
	case m.err != nil:
		a.deps.Log.Warn("probing a process group failed; asking again", "process", a.p.ID, "err", m.err)
		a.armRecheck(time.Second)
	case m.alive:
		// A phantom 126: the process lives on. Watch it like a running
		// one (its exec_die brings the real end).
		a.recheckDelay = min(max(2*a.recheckDelay, time.Second), 30*time.Second)
		a.armRecheck(a.recheckDelay)
	default:
		// No member lives: give its exec_die a moment, then believe.
		a.groupGone = true
		a.armRecheck(time.Second)
	}
}
