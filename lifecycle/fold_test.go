package lifecycle

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/stockade/stockade/spec"
)

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func code(n int) *int { return &n }

// sandboxEvents is one instance of every event a sandbox stream may hold.
var sandboxEvents = []Event{
	SandboxReserved{Owner: "o", Spec: spec.Sandbox{Lifetime: spec.Kept}},
	SandboxCreated{Workload: "w", Export: "e", Volume: "v"},
	SandboxStarted{},
	SandboxStopping{Reason: ReasonStopped},
	SandboxExited{Reason: ReasonStopped, ExitCode: code(137)},
	SandboxRemoving{},
	SandboxRemoved{},
	Recovered{Decision: "d"},
	Adopted{},
	SandboxPausing{},
	SandboxUnpaused{},
}

var processEvents = []Event{
	ProcessReserved{Sandbox: "s", Spec: spec.Process{Argv: []string{"true"}}},
	ExecCreated{ExecID: "x"},
	ProcessStarted{Group: 7},
	StdinClosed{},
	QuotaHit{Bytes: 10},
	ProcessStopping{Reason: ReasonTimeout},
	ProcessExited{Reason: ReasonExited, ExitCode: code(0)},
	Recovered{Decision: "d"},
	Adopted{Detached: true},
}

// sandboxAt folds a path of events from the empty state.
func sandboxAt(t *testing.T, path ...Event) Sandbox {
	t.Helper()
	s := Sandbox{ID: "sb"}
	for i, ev := range path {
		var err error
		if s, err = ApplySandbox(s, uint64(i+1), t0, ev); err != nil {
			t.Fatalf("path step %d (%s): %v", i, ev.Type(), err)
		}
	}
	return s
}

func processAt(t *testing.T, path ...Event) Process {
	t.Helper()
	p := Process{ID: "p"}
	for i, ev := range path {
		var err error
		if p, err = ApplyProcess(p, uint64(i+1), t0, ev); err != nil {
			t.Fatalf("path step %d (%s): %v", i, ev.Type(), err)
		}
	}
	return p
}

func TestSandboxTransitions(t *testing.T) {
	r, c, st, sp := sandboxEvents[0], sandboxEvents[1], sandboxEvents[2], sandboxEvents[3]
	x, rm, rd := sandboxEvents[4], sandboxEvents[5], sandboxEvents[6]
	states := []struct {
		name  string
		path  []Event
		legal map[string]Phase // event type → phase after
	}{
		{"none", nil, map[string]Phase{"sandbox.reserved": PhaseReserved}},
		{"reserved", []Event{r}, map[string]Phase{"sandbox.created": PhaseReserved, "sandbox.exited": PhaseExited, "recovered": PhaseReserved}},
		{"reserved+created", []Event{r, c}, map[string]Phase{"sandbox.started": PhaseStarted, "sandbox.exited": PhaseExited, "recovered": PhaseReserved}},
		{"started", []Event{r, c, st}, map[string]Phase{"sandbox.stopping": PhaseStopping, "sandbox.exited": PhaseExited, "recovered": PhaseStarted, "adopted": PhaseStarted, "sandbox.pausing": PhaseStarted}},
		{"stopping", []Event{r, c, st, sp}, map[string]Phase{"sandbox.exited": PhaseExited, "recovered": PhaseStopping}},
		{"exited", []Event{r, c, st, x}, map[string]Phase{"sandbox.removing": PhaseRemoving, "recovered": PhaseExited}},
		{"removing", []Event{r, c, st, x, rm}, map[string]Phase{"sandbox.removing": PhaseRemoving, "sandbox.removed": PhaseRemoved, "recovered": PhaseRemoving}},
		{"removed", []Event{r, c, st, x, rm, rd}, map[string]Phase{}},
	}
	for _, tc := range states {
		for _, ev := range sandboxEvents {
			t.Run(tc.name+"/"+ev.Type(), func(t *testing.T) {
				s := sandboxAt(t, tc.path...)
				next, err := ApplySandbox(s, 99, t0.Add(time.Second), ev)
				want, legal := tc.legal[ev.Type()]
				if !legal {
					var it *IllegalTransition
					if !errors.As(err, &it) || !spec.IsCode(err, spec.CodeJournal) {
						t.Fatalf("got %v, want an illegal transition (code journal)", err)
					}
					if !reflect.DeepEqual(next, s) {
						t.Fatalf("state changed on an illegal event")
					}
					return
				}
				if err != nil {
					t.Fatalf("legal event refused: %v", err)
				}
				if next.Phase != want || next.Seq != 99 {
					t.Fatalf("phase %s seq %d, want %s seq 99", next.Phase, next.Seq, want)
				}
			})
		}
	}
}

func TestProcessTransitions(t *testing.T) {
	r, xc, st, sp, ex := processEvents[0], processEvents[1], processEvents[2], processEvents[5], processEvents[6]
	states := []struct {
		name  string
		path  []Event
		legal map[string]Phase
	}{
		{"none", nil, map[string]Phase{"process.reserved": PhaseReserved}},
		{"reserved", []Event{r}, map[string]Phase{"process.exec_created": PhaseReserved, "process.exited": PhaseExited, "recovered": PhaseReserved}},
		{"exec_created", []Event{r, xc}, map[string]Phase{"process.started": PhaseStarted, "process.exited": PhaseExited, "recovered": PhaseReserved}},
		{"started", []Event{r, xc, st}, map[string]Phase{"process.stdin_closed": PhaseStarted, "process.quota_hit": PhaseStarted, "process.stopping": PhaseStopping, "process.exited": PhaseExited, "recovered": PhaseStarted, "adopted": PhaseStarted}},
		{"stopping", []Event{r, xc, st, sp}, map[string]Phase{"process.stdin_closed": PhaseStopping, "process.quota_hit": PhaseStopping, "process.exited": PhaseExited, "recovered": PhaseStopping, "adopted": PhaseStopping}},
		{"exited", []Event{r, xc, st, ex}, map[string]Phase{}},
	}
	for _, tc := range states {
		for _, ev := range processEvents {
			t.Run(tc.name+"/"+ev.Type(), func(t *testing.T) {
				p := processAt(t, tc.path...)
				next, err := ApplyProcess(p, 99, t0, ev)
				want, legal := tc.legal[ev.Type()]
				if !legal {
					var it *IllegalTransition
					if !errors.As(err, &it) {
						t.Fatalf("got %v, want an illegal transition", err)
					}
					return
				}
				if err != nil || next.Phase != want {
					t.Fatalf("got phase %s err %v, want %s", next.Phase, err, want)
				}
			})
		}
	}
	// Sandbox events never apply to a process, nor process events to a sandbox.
	for _, ev := range sandboxEvents[:7] {
		if _, err := ApplyProcess(processAt(t, r), 1, t0, ev); err == nil {
			t.Errorf("process accepted %s", ev.Type())
		}
	}
	for _, ev := range processEvents[:7] {
		if _, err := ApplySandbox(sandboxAt(t, sandboxEvents[0]), 1, t0, ev); err == nil {
			t.Errorf("sandbox accepted %s", ev.Type())
		}
	}
}

// TestPauseFacts: a pause is journaled once per episode (a second pausing
// while paused is illegal), its unpause only while paused, also after the
// sandbox stopped (Docker thaws a workload to stop it).
func TestPauseFacts(t *testing.T) {
	r, c, st, sp, x := sandboxEvents[0], sandboxEvents[1], sandboxEvents[2], sandboxEvents[3], sandboxEvents[4]
	paused := sandboxAt(t, r, c, st, SandboxPausing{})
	if !paused.Paused {
		t.Fatal("pausing did not mark the sandbox paused")
	}
	if _, err := ApplySandbox(paused, 9, t0, SandboxPausing{}); err == nil {
		t.Fatal("a second pausing while paused was accepted")
	}
	for _, path := range [][]Event{{r, c, st, SandboxPausing{}}, {r, c, st, SandboxPausing{}, sp}, {r, c, st, SandboxPausing{}, sp, x}} {
		s := sandboxAt(t, path...)
		next, err := ApplySandbox(s, 9, t0, SandboxUnpaused{})
		if err != nil || next.Paused || next.Phase != s.Phase {
			t.Fatalf("unpaused after %d events: %+v %v", len(path), next, err)
		}
	}
	if _, err := ApplySandbox(sandboxAt(t, r, c, st, sp), 9, t0, SandboxPausing{}); err == nil {
		t.Fatal("pausing a stopping sandbox was accepted")
	}
}

func TestStdinClosedOnce(t *testing.T) {
	p := processAt(t, processEvents[0], processEvents[1], processEvents[2], StdinClosed{})
	if _, err := ApplyProcess(p, 9, t0, StdinClosed{}); err == nil {
		t.Fatal("stdin closed twice was accepted")
	}
}

func TestFoldKeepsFacts(t *testing.T) {
	deadline := t0.Add(time.Hour)
	s := sandboxAt(t, SandboxReserved{Owner: "o", Revision: "rev", Deadline: deadline}, SandboxCreated{Workload: "w"}, SandboxStarted{},
		Recovered{Decision: "re-adopt"}, Adopted{}, SandboxStopping{Reason: ReasonTimeout}, SandboxExited{Reason: ReasonTimeout, OOM: true})
	if s.Revision != "rev" || !s.Deadline.Equal(deadline) || s.Created.Workload != "w" || !s.Adopted ||
		len(s.Recovered) != 1 || s.Stopping != ReasonTimeout || !s.Exit.OOM || s.Terminal() || s.Admits() {
		t.Fatalf("facts lost: %+v", s)
	}
	p := processAt(t, ProcessReserved{Sandbox: "sb"}, ExecCreated{ExecID: "x"}, ProcessStarted{Group: 42}, QuotaHit{Bytes: 1},
		ProcessExited{Reason: ReasonOutputLimit, StdoutBytes: 5, StderrBytes: 6})
	if p.Sandbox != "sb" || p.ExecID != "x" || p.Group != 42 || !p.QuotaHit || !p.Terminal() || p.Exit.StdoutBytes != 5 {
		t.Fatalf("facts lost: %+v", p)
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, ev := range append(append([]Event{}, sandboxEvents...), processEvents...) {
		typ, payload, err := Encode(ev)
		if err != nil {
			t.Fatalf("%s: %v", ev.Type(), err)
		}
		got, err := Decode(typ, payload)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		if !reflect.DeepEqual(got, ev) {
			t.Fatalf("%s: round trip gave %#v, want %#v", typ, got, ev)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct{ typ, payload string }{
		{"sandbox.bogus", `{}`},
		{"", `{}`},
		{"sandbox.exited", `{"exit_code":"x"}`},
		{"process.reserved", `not json`},
	} {
		if _, err := Decode(tc.typ, []byte(tc.payload)); !spec.IsCode(err, spec.CodeJournal) {
			t.Errorf("Decode(%q, %q) = %v, want a journal error", tc.typ, tc.payload, err)
		}
	}
}

func TestTerminal(t *testing.T) {
	for _, ev := range append(append([]Event{}, sandboxEvents...), processEvents...) {
		want := ev.Type() == "sandbox.removed" || ev.Type() == "process.exited"
		if Terminal(ev) != want {
			t.Errorf("Terminal(%s) = %v", ev.Type(), !want)
		}
	}
}

// FuzzDecode: arbitrary journal records decode to an event or a typed error,
// never a panic; what decodes re-encodes and decodes to the same event.
func FuzzDecode(f *testing.F) {
	for _, ev := range append(append([]Event{}, sandboxEvents...), processEvents...) {
		typ, payload, _ := Encode(ev)
		f.Add(typ, payload)
	}
	f.Add("sandbox.exited", []byte(`{"exit_code":1e400}`))
	f.Add("process.reserved", []byte(`{"spec":{"timeout":"x"}}`))
	f.Fuzz(func(t *testing.T, typ string, payload []byte) {
		ev, err := Decode(typ, payload)
		if err != nil {
			if !spec.IsCode(err, spec.CodeJournal) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		typ2, payload2, err := Encode(ev)
		if err != nil || typ2 != typ {
			t.Fatalf("re-encode: %v %q", err, typ2)
		}
		ev2, err := Decode(typ2, payload2)
		if err != nil || !reflect.DeepEqual(ev, ev2) {
			t.Fatalf("unstable round trip: %v", err)
		}
		// Folding a decoded event never panics.
		_, _ = ApplySandbox(Sandbox{}, 1, t0, ev)
		_, _ = ApplyProcess(Process{}, 1, t0, ev)
	})
}
