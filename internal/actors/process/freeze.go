package process

import "time"

// A consistent copy (Sandbox.Get with Pause) freezes the workload, and
// with it the warden: a TERM or KILL sent meanwhile takes effect, and its
// reap is reported, only after the thaw. So the stop's timers (the grace
// before KILL, the wait for the reap after it) count thawed time only: a
// freeze of any length never turns into a warden given up.

// Freeze tells a process actor that its sandbox's workload is being frozen
// (Frozen true: the pause is asked) or has been thawed. The sandbox actor
// sends it on every change, and to a process spawned during a freeze.
type Freeze struct{ Frozen bool }

// WardenUnanswered is sent to the parent when the warden did not report a
// KILLed process reaped within its grace of thawed time: the process has
// been given up alone (its group killed through Docker, journaled lost);
// the sandbox checks whether its warden still answers at all.
type WardenUnanswered struct {
	ID  string
	Err error
}

// thawedTimer posts msg after d of thawed time.
type thawedTimer struct {
	left  time.Duration
	since time.Time   // when t was armed (zero: not armed)
	t     *time.Timer // nil while frozen
	msg   any
}

// after arms a stop timer that does not count frozen time.
func (a *processActor) after(d time.Duration, msg any) {
	tt := &thawedTimer{left: d, msg: msg}
	a.stopTimers = append(a.stopTimers, tt)
	if !a.frozen {
		a.arm(tt)
	}
}

func (a *processActor) arm(tt *thawedTimer) {
	tt.since = time.Now()
	msg := tt.msg
	tt.t = time.AfterFunc(tt.left, func() { a.send(msg) })
}

// onFreeze holds the stop timers while frozen and runs them on with what
// was left of them at the thaw.
func (a *processActor) onFreeze(m Freeze) {
	if m.Frozen == a.frozen {
		return
	}
	a.frozen = m.Frozen
	for _, tt := range a.stopTimers {
		switch {
		case m.Frozen && tt.t != nil:
			if tt.t.Stop() {
				tt.left = max(tt.left-time.Since(tt.since), 0)
			} else {
				tt.left = -1 // it fired: its message is on its way
			}
			tt.t = nil
		case !m.Frozen && tt.left >= 0:
			a.arm(tt)
		}
	}
}

// heldByFreeze defers a stop timer's message that arrived while the
// workload is frozen (it fired just before the freeze): it comes again
// right after the thaw. true: deferred.
func (a *processActor) heldByFreeze(msg any) bool {
	if !a.frozen {
		return false
	}
	a.stopTimers = append(a.stopTimers, &thawedTimer{msg: msg})
	return true
}

func (a *processActor) stopStopTimers() {
	for _, tt := range a.stopTimers {
		if tt.t != nil {
			tt.t.Stop()
		}
	}
}
