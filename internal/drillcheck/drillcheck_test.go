package drillcheck

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stockade/stockade/lifecycle"
)

// TestDrillPromiseChecks: the drill's checks of the promise flag a running
// process journaled lost, an end record ahead of the journaled exit, and a
// recording that stops short with no journaled gap over where it stops.
func TestDrillPromiseChecks(t *testing.T) {
	proc := func(sb string, ph lifecycle.Phase, reason lifecycle.Reason, gaps ...lifecycle.OutputGap) *Proc {
		p := &Proc{Process: lifecycle.Process{Sandbox: sb, Phase: ph, Group: 7}, gaps: gaps}
		if reason != "" {
			p.Exit = &lifecycle.ProcessExited{Reason: reason, StdoutBytes: 100}
		}
		return p
	}
	view := func(p *Proc, re recordingEnd) Journal {
		return Journal{procs: map[string]*Proc{"p": p}, recs: map[string]recordingEnd{"p": re}}
	}
	complete := recordingEnd{found: true, complete: true, end: 100}
	short := recordingEnd{found: true, end: 40}
	for _, tc := range []struct {
		name     string
		atKill   Journal
		final    Journal
		tornDown map[string]string
		want     string // a violation's words; "" none
	}{
		{"running, then exited", view(proc("s", lifecycle.PhaseStarted, ""), short), view(proc("s", lifecycle.PhaseExited, lifecycle.ReasonExited), complete), nil, ""},
		{"running, then lost", view(proc("s", lifecycle.PhaseStarted, ""), short), view(proc("s", lifecycle.PhaseExited, lifecycle.ReasonLost), complete), nil, "journaled lost"},
		{"stopping, then lost", view(proc("s", lifecycle.PhaseStopping, ""), short), view(proc("s", lifecycle.PhaseExited, lifecycle.ReasonLost), complete), nil, "journaled lost"},
		{"running, lost with its torn-down sandbox", view(proc("s", lifecycle.PhaseStarted, ""), short), view(proc("s", lifecycle.PhaseExited, lifecycle.ReasonLost), complete), map[string]string{"s": "stop and remove"}, ""},
		{"printed, no recording", view(proc("s", lifecycle.PhaseReserved, ""), recordingEnd{}), view(proc("s", lifecycle.PhaseExited, lifecycle.ReasonLost), recordingEnd{}), nil, "no recording"},
		{"end record before the exit", view(proc("s", lifecycle.PhaseStarted, ""), complete), view(proc("s", lifecycle.PhaseExited, lifecycle.ReasonExited), complete), nil, "end record at the kill"},
		{"stops short, no gap", view(proc("s", lifecycle.PhaseStarted, ""), short), view(proc("s", lifecycle.PhaseExited, lifecycle.ReasonSandboxStopped), short), nil, "stops at byte 40"},
		{"stops short, a gap elsewhere", view(proc("s", lifecycle.PhaseStarted, ""), short), view(proc("s", lifecycle.PhaseExited, lifecycle.ReasonSandboxStopped, lifecycle.OutputGap{From: 0, To: 40}), short), nil, "stops at byte 40"},
		{"stops short, its gap journaled", view(proc("s", lifecycle.PhaseStarted, ""), short), view(proc("s", lifecycle.PhaseExited, lifecycle.ReasonSandboxStopped, lifecycle.OutputGap{From: 40, To: 100}), short), nil, ""},
		{"unreadable", view(proc("s", lifecycle.PhaseStarted, ""), short), view(proc("s", lifecycle.PhaseExited, lifecycle.ReasonExited), recordingEnd{found: true, err: fmt.Errorf("corrupt")}), nil, "does not read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			violate := func(f string, a ...any) { got = append(got, fmt.Sprintf(f, a...)) }
			tc.atKill.CheckAtKill(violate)
			tc.final.CheckFinal(tc.atKill, tc.tornDown, violate)
			all := strings.Join(got, "; ")
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("violations %q, want none", all)
			case tc.want != "" && !strings.Contains(all, tc.want):
				t.Errorf("violations %q, want one saying %q", all, tc.want)
			}
		})
	}
}
