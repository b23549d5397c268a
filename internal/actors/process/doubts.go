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
//     If the group cannot be read back a few times over, the sandbox is
//     failed closed: its stop ends the process. A kill that fails is sent
//     again while the exec runs.
//   - After an attach connection dropped (a cut stream, a crashed
//     runtime), Docker 20.10 marks the exec ended with code 126 once its
//     streams close, while the process may live on; and if that cleanup
//     ran first, the exec_die event of the real end says 127 (the exec is
//     no longer in the container's store). A 126 is believed only when
//     exec_die says 126. Otherwise the exec_die code is taken (126 then
//     127 is unknown), or, once a probe of the group (kill -0) finds no
//     member and the event was given a moment, no code is journaled:
//     none is invented.

// execDoubts is what an attach gone wrong leaves to doubt.
type execDoubts struct {
	// attachFailed: the attach failed, perhaps after the exec started;
	// endedUnattached: the exec's end, seen before its group was read.
	attachFailed    bool
	endedUnattached *dockerio.ExecState
	// reading: a read of the group is in flight (reads: how many were
	// made); failedClosed: the sandbox was told to fail closed.
	reading, failedClosed bool
	reads                 int
	// probing: a probe of the group is in flight; groupGone: one found
	// no member.
	probing, groupGone bool
}

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
func (x *execTransport) readStartedGroup() {
	if x.doubts.reading {
		return
	}
	x.doubts.reading = true
	x.readGroup(func(pgid int, err error) any { return startedGroupRead{pgid: pgid, err: err} })
}

// groupReadTries is how often an unattached process's group is read back
// before its sandbox is failed closed.
const groupReadTries = 5

func (x *execTransport) onStartedGroupRead(m startedGroupRead) {
	a, d := x.a, &x.doubts
	d.reading = false
	if a.done || a.state.Phase != lifecycle.PhaseReserved {
		return
	}
	if m.err != nil && spec.IsCode(m.err, spec.CodeNotFound) && d.endedUnattached != nil && x.watch.diedCode != nil {
		// It ended (its exec_die came) before its wrapper recorded a
		// group: nothing of it is left to signal, and exec_die's code is
		// the answer (127 after a 126: none is known).
		st := *d.endedUnattached
		st.ExitCode = *x.watch.diedCode
		a.exit.codeUnknown = *x.watch.diedCode == 127
		a.exit.state = &st
		a.maybeFinish()
		return
	}
	if m.err != nil {
		// The wrapper may not have written it yet, or the daemon cannot
		// answer: look again, backing off; in the end, stop the sandbox.
		d.reads++
		a.deps.Log.Warn("an unattached process's group cannot be read", "process", a.p.ID, "try", d.reads, "err", m.err)
		if d.reads >= groupReadTries && !d.failedClosed {
			d.failedClosed = true
			a.sys.Root.Send(a.parent, FailClosed{ID: a.p.ID, Err: spec.Wrap(spec.CodeStreamFailure, "process", m.err,
				"process %s runs unattached and its group cannot be read back", a.p.ID)})
		}
		x.armRecheck(min(200*time.Millisecond<<min(d.reads, 6), 10*time.Second))
		return
	}
	if err := a.record(lifecycle.ProcessStarted{Group: m.pgid}); err != nil {
		a.abandonJournal(err)
		return
	}
	reason := a.stopping.reason
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
	x.armRecheck(time.Second) // in case its exec_die never reaches us
}

// doubt126 reports whether an inspect's "ended with 126" must be checked
// before it is believed, and starts that check. The exec_die event's code
// wins when it came; otherwise the group is probed.
func (x *execTransport) doubt126(st *dockerio.ExecState) bool {
	a, d := x.a, &x.doubts
	a.exit.codeUnknown = false // decided again on every sight
	if !st.Known || st.Running || st.Pid == 0 || st.ExitCode != 126 || a.state.Phase == lifecycle.PhaseReserved {
		return false
	}
	if died := x.watch.diedCode; died != nil {
		st.ExitCode = *died
		if *died == 127 {
			// The cleanup of a dropped attach ran before the real end
			// reached the daemon, which then reports 127 for an exec it
			// no longer holds: the real code is unknown.
			a.exit.codeUnknown = true
		}
		return false
	}
	if d.groupGone {
		// The group is gone and no exec_die came: the process ended, with
		// a code nobody can tell (a program that could not be executed
		// ends 126 too, but its exec_die comes at once).
		a.exit.codeUnknown = true
		return false
	}
	pgid := a.group()
	if pgid <= 1 || d.probing {
		return pgid > 1
	}
	d.probing = true
	sb, bg := a.p.Sandbox, a.bg
	go func() {
		ctx, cancel := context.WithTimeout(bg, a.deps.Config.DockerTimeout)
		defer cancel()
		err := a.engine.SignalGroup(ctx, sb, pgid, 0)
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

func (x *execTransport) onGroupProbed(m groupProbed) {
	a := x.a
	x.doubts.probing = false
	if a.done {
		return
	}
	switch {
	case m.err != nil:
		a.deps.Log.Warn("probing a process group failed; asking again", "process", a.p.ID, "err", m.err)
		x.recheckBackoff()
	case m.alive:
		// A phantom 126: the process lives on. Treat it as a running one:
		// a kill under way is sent again (the first may have failed); a
		// recovered one is re-adopted as the recovery table says (its stop
		// option, its deadline, a stop the dead runtime began); its
		// exec_die brings the real end.
		if a.stopping.killSent && a.state.Phase == lifecycle.PhaseStopping {
			a.signalGroup(syscall.SIGKILL, nil)
		}
		if a.p.Adopt != nil && !a.state.Adopted {
			x.adoptRunning()
		}
		x.recheckBackoff()
	default:
		// No member lives: give its exec_die a moment, then believe.
		x.doubts.groupGone = true
		x.armRecheck(time.Second)
	}
}
