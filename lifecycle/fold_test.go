package lifecycle

import (
	"errors"
	"reflect"
	"slices"
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
	// Illegal in every state of TestSandboxTransitions: its sandbox is not
	// an allowlist one and was made without an egress role.
	EgressChanged{Rules: []spec.EgressRule{{Host: "example.com", Port: 443}}},
	EgressReplaced{Egress: "e2", Outside: "o2", Reason: "gone"},
	// Illegal in every state of TestSandboxTransitions: its sandbox was
	// not made for a pool (TestClaimTransitions has the pooled ones).
	SandboxClaimed{Lifetime: spec.OneShot, TTL: time.Minute, Deadline: t0.Add(time.Minute), Env: []string{"A=1"}, Dir: "/tmp",
		Labels: map[string]string{"k": "v"}, Secret: "ab"},
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
	OutputGap{From: 10, To: 20, Why: "w"},
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
		{"started", []Event{r, xc, st}, map[string]Phase{"process.stdin_closed": PhaseStarted, "process.quota_hit": PhaseStarted, "process.stopping": PhaseStopping, "process.exited": PhaseExited, "recovered": PhaseStarted, "adopted": PhaseStarted, "process.output_gap": PhaseStarted}},
		{"stopping", []Event{r, xc, st, sp}, map[string]Phase{"process.stdin_closed": PhaseStopping, "process.quota_hit": PhaseStopping, "process.exited": PhaseExited, "recovered": PhaseStopping, "adopted": PhaseStopping, "process.output_gap": PhaseStopping}},
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

// otherEvents completes sandboxEvents and processEvents: every registered
// event type is in one of the three.
var otherEvents = []Event{
	WardenStarted{PID: 1, Socket: "/run/w.sock", Secret: "s", Version: "v"},
	WardenLost{Reason: "gone"},
	EgressChanged{Rules: mustRules("example.com", "*.pypi.org:443", "203.0.113.0/24:80", "[2001:db8::1]:443")},
	EgressChanged{Rules: []spec.EgressRule{}},
	OrphanRemoved{Kind: "container", ID: "c", Name: "n", Sandbox: "sb", Role: "egress"},
	RecoveryRan{Sandboxes: 1, Processes: 2, Orphans: 3, Decisions: []string{"d"}},
	Checkpointed{ID: "ck-0123456789abcdef0123", Name: "before", Files: 3, Bytes: 12},
	RollingBack{Checkpoint: "ck-0123456789abcdef0123", Staging: ".rollback-9", Marker: ".stockade-rollback-9"},
	RolledBack{Checkpoint: "ck-0123456789abcdef0123"},
	RollbackAbandoned{Checkpoint: "ck-0123456789abcdef0123", Why: "killed"},
	Restored{Checkpoint: "ck-0123456789abcdef0123"},
	UsageSampled{Usage: spec.WorkloadUsage{At: time.Date(2026, 12, 6, 1, 2, 3, 0, time.UTC), CPU: 3 * time.Second, MemoryPeak: 4 << 20, MemoryGiBSeconds: 0.5, PidsPeak: 7, Samples: 9, Bridged: time.Minute}, RunCPU: time.Second, RunMemory: 1 << 20, RunEnded: true, Final: true},
	ProcessExited{Reason: ReasonExited, ExitCode: code(0), Usage: &spec.ProcessUsage{Source: spec.UsageRusage, Wall: time.Second, User: 2, System: 3, MaxRSS: 4, ReadBytes: 512, WriteBytes: 1024}},
	ProcessExited{Reason: ReasonExited, ExitCode: code(0), Changes: &Changes{Created: 1, Omitted: 0, Entries: []Change{{Op: "created", Path: "/workspace/work/a", Kind: "file", Size: 1, Mode: 0o644, SHA256: "ab", Text: true}}}},
}

// TestRollbackFold: a rollback's intent closes admission until its fact or
// its abandonment settles it; only the checkpoint named settles it.
func TestRollbackFold(t *testing.T) {
	const ck = "ck-0123456789abcdef0123"
	started := []Event{sandboxEvents[0], sandboxEvents[1], sandboxEvents[2]}
	intent := RollingBack{Checkpoint: ck, Staging: ".rollback-4", Marker: ".stockade-rollback-4"}
	for _, tc := range []struct {
		name      string
		then      []Event
		admits    bool
		rollbacks int
		illegal   bool
	}{
		{"intent closes admission", []Event{intent}, false, 0, false},
		{"fact reopens it", []Event{intent, RolledBack{Checkpoint: ck}}, true, 1, false},
		{"abandoned reopens it", []Event{intent, RollbackAbandoned{Checkpoint: ck, Why: "x"}}, true, 0, false},
		{"a fact without intent", []Event{RolledBack{Checkpoint: ck}}, false, 0, true},
		{"a fact of another checkpoint", []Event{intent, RolledBack{Checkpoint: "ck-ffffffffffffffffffff"}}, false, 0, true},
		{"two intents", []Event{intent, intent}, false, 0, true},
		{"a checkpoint does not close admission", []Event{Checkpointed{ID: ck, Files: 1}}, true, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := sandboxAt(t, started...)
			var err error
			for i, ev := range tc.then {
				s, err = ApplySandbox(s, uint64(len(started)+i+1), t0, ev)
				if err != nil {
					break
				}
			}
			if (err != nil) != tc.illegal {
				t.Fatalf("err %v, want illegal %v", err, tc.illegal)
			}
			if tc.illegal {
				return
			}
			if s.Admits() != tc.admits || s.Rollbacks != tc.rollbacks {
				t.Fatalf("admits %v rollbacks %d, want %v %d", s.Admits(), s.Rollbacks, tc.admits, tc.rollbacks)
			}
		})
	}
}

// TestOutputGapBounds: a gap is a non-empty byte range.
func TestOutputGapBounds(t *testing.T) {
	st := processAt(t, processEvents[0], processEvents[1], processEvents[2])
	for _, g := range []OutputGap{{From: 5, To: 5}, {From: 6, To: 5}, {From: -1, To: 5}} {
		if _, err := ApplyProcess(st, 9, t0, g); err == nil {
			t.Errorf("%+v applied", g)
		}
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	all := append(append(append([]Event{}, sandboxEvents...), processEvents...), otherEvents...)
	seen := map[string]bool{}
	for _, ev := range all {
		seen[ev.Type()] = true
	}
	for typ := range decoders {
		if !seen[typ] {
			t.Errorf("no round trip for %s: add an instance to otherEvents", typ)
		}
	}
	for _, ev := range all {
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

func mustRules(ss ...string) []spec.EgressRule {
	rules := make([]spec.EgressRule, len(ss))
	for i, s := range ss {
		r, err := spec.ParseEgressRule(s)
		if err != nil {
			panic(err)
		}
		rules[i] = r
	}
	return rules
}

// The egress events on an allowlist sandbox with an egress role: legal in
// the phases the table says, and nowhere else.
func TestEgressTransitions(t *testing.T) {
	r := SandboxReserved{Owner: "o", Spec: spec.Sandbox{Policy: spec.Policy{Network: spec.NetworkAllowlist, Egress: mustRules("a.example")}}}
	c := SandboxCreated{Workload: "w", Export: "x", Volume: "v", Network: "n", Egress: "e1", Outside: "o1", Proxy: "10.213.0.2:3128"}
	st, sp := SandboxStarted{}, SandboxStopping{Reason: ReasonStopped}
	x, rm, rd := SandboxExited{Reason: ReasonStopped}, SandboxRemoving{}, SandboxRemoved{}
	changed := EgressChanged{Rules: mustRules("b.example:443")}
	replaced := EgressReplaced{Egress: "e2", Outside: "o2", Reason: "gone"}
	tests := []struct {
		name                  string
		path                  []Event
		changedOK, replacedOK bool
	}{
		{"none", nil, false, false},
		{"reserved", []Event{r}, false, false},
		{"reserved+created", []Event{r, c}, false, true},
		{"started", []Event{r, c, st}, true, true},
		{"started+paused", []Event{r, c, st, SandboxPausing{}}, true, true},
		{"stopping", []Event{r, c, st, sp}, false, true},
		{"exited", []Event{r, c, st, x}, false, true},
		{"exited without start", []Event{r, c, x}, false, true},
		{"removing", []Event{r, c, st, x, rm}, false, true},
		{"removed", []Event{r, c, st, x, rm, rd}, false, false},
	}
	for _, tc := range tests {
		for _, step := range []struct {
			ev Event
			ok bool
		}{{changed, tc.changedOK}, {replaced, tc.replacedOK}} {
			t.Run(tc.name+"/"+step.ev.Type(), func(t *testing.T) {
				s := sandboxAt(t, tc.path...)
				next, err := ApplySandbox(s, 99, t0.Add(time.Second), step.ev)
				if !step.ok {
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
				if next.Phase != s.Phase || next.Seq != 99 || next.Paused != s.Paused {
					t.Fatalf("phase %s seq %d paused %v, want %s seq 99 paused %v", next.Phase, next.Seq, next.Paused, s.Phase, s.Paused)
				}
			})
		}
	}
}

// EgressChanged needs an allowlist sandbox; EgressReplaced one made with an
// egress role.
func TestEgressNeedsAllowlist(t *testing.T) {
	for _, kind := range []spec.NetworkKind{spec.NetworkIsolated, spec.NetworkOpen, ""} {
		s := sandboxAt(t, SandboxReserved{Spec: spec.Sandbox{Policy: spec.Policy{Network: kind}}}, SandboxCreated{Workload: "w"}, SandboxStarted{})
		if _, err := ApplySandbox(s, 9, t0, EgressChanged{Rules: mustRules("a.example")}); !spec.IsCode(err, spec.CodeJournal) {
			t.Errorf("egress_changed on a %q sandbox = %v, want an illegal transition", kind, err)
		}
		if _, err := ApplySandbox(s, 9, t0, EgressReplaced{Egress: "e"}); !spec.IsCode(err, spec.CodeJournal) {
			t.Errorf("egress_replaced on a %q sandbox without an egress role = %v, want an illegal transition", kind, err)
		}
	}
	// An allowlist sandbox whose created fact has no egress role.
	s := sandboxAt(t, SandboxReserved{Spec: spec.Sandbox{Policy: spec.Policy{Network: spec.NetworkAllowlist}}}, SandboxCreated{Workload: "w"}, SandboxStarted{})
	if _, err := ApplySandbox(s, 9, t0, EgressReplaced{Egress: "e"}); !spec.IsCode(err, spec.CodeJournal) {
		t.Errorf("egress_replaced without an egress role = %v, want an illegal transition", err)
	}
	if _, err := ApplySandbox(s, 9, t0, EgressChanged{}); err != nil {
		t.Errorf("egress_changed to no rules on an allowlist sandbox: %v", err)
	}
}

// EgressChanged sets the rules and their version, sharing no slice with the
// state before or with the event; EgressReplaced changes a copy of Created.
func TestEgressFoldsCopy(t *testing.T) {
	before := mustRules("a.example", "203.0.113.7")
	r := SandboxReserved{Spec: spec.Sandbox{Policy: spec.Policy{Network: spec.NetworkAllowlist, Egress: before}}}
	c := SandboxCreated{Workload: "w", Network: "n", Egress: "e1", Outside: "o1", Proxy: "10.213.0.2:3128"}
	s := sandboxAt(t, r, c, SandboxStarted{})
	if s.RulesVersion != 0 {
		t.Fatalf("RulesVersion of the rules made with = %d, want 0", s.RulesVersion)
	}
	prevRules := slices.Clone(s.Spec.Policy.Egress)
	ev := EgressChanged{Rules: mustRules("b.example:443", "*.pypi.org:443", "198.51.100.0/24")}
	want := slices.Clone(ev.Rules)
	next, err := ApplySandbox(s, 42, t0, ev)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(next.Spec.Policy.Egress, want) || next.RulesVersion != 42 || next.Seq != 42 {
		t.Fatalf("after egress_changed: rules %v version %d seq %d, want %v version 42", next.Spec.Policy.Egress, next.RulesVersion, next.Seq, want)
	}
	if !reflect.DeepEqual(s.Spec.Policy.Egress, prevRules) || s.RulesVersion != 0 {
		t.Fatalf("the previous state changed: rules %v version %d", s.Spec.Policy.Egress, s.RulesVersion)
	}
	// Neither the event's slice nor the new state's is the other's or the
	// old state's.
	ev.Rules[0] = spec.EgressRule{Host: "evil.example"}
	next.Spec.Policy.Egress[1] = spec.EgressRule{Host: "evil.example"}
	if !reflect.DeepEqual(s.Spec.Policy.Egress, prevRules) {
		t.Fatalf("writing the new state's rules changed the previous state's: %v", s.Spec.Policy.Egress)
	}
	again, err := ApplySandbox(s, 43, t0, EgressChanged{Rules: want})
	if err != nil || !reflect.DeepEqual(again.Spec.Policy.Egress, want) {
		t.Fatalf("refold: %v %v", again.Spec.Policy.Egress, err)
	}
	if next.Spec.Policy.Egress[0] != want[0] {
		t.Fatalf("writing the event's rules changed the state's: %v", next.Spec.Policy.Egress[0])
	}
	// A later change is a later version; an empty list is no rules.
	later, err := ApplySandbox(again, 50, t0, EgressChanged{})
	if err != nil || len(later.Spec.Policy.Egress) != 0 || later.RulesVersion != 50 {
		t.Fatalf("emptied: rules %v version %d err %v", later.Spec.Policy.Egress, later.RulesVersion, err)
	}

	rep, err := ApplySandbox(next, 60, t0, EgressReplaced{Egress: "e2", Outside: "o2", Reason: "gone"})
	if err != nil {
		t.Fatal(err)
	}
	wantCreated := c
	wantCreated.Egress, wantCreated.Outside = "e2", "o2"
	if *rep.Created != wantCreated || rep.Created == next.Created {
		t.Fatalf("after egress_replaced: %+v (shared %v), want %+v in a copy", *rep.Created, rep.Created == next.Created, wantCreated)
	}
	if *next.Created != c {
		t.Fatalf("egress_replaced changed the previous state's Created: %+v", *next.Created)
	}
	if rep.RulesVersion != 42 || !reflect.DeepEqual(rep.Spec.Policy.Egress, next.Spec.Policy.Egress) {
		t.Fatalf("egress_replaced changed the rules: %v version %d", rep.Spec.Policy.Egress, rep.RulesVersion)
	}
}

func TestClaimTransitions(t *testing.T) {
	pooled := SandboxReserved{Owner: "o", Spec: spec.Sandbox{Lifetime: spec.Kept}, Pool: "py"}
	c, st := SandboxCreated{Workload: "w", Export: "e", Volume: "v"}, SandboxStarted{}
	w := WardenStarted{PID: 9, Socket: "/s", Secret: "old", Version: "v"}
	claim := SandboxClaimed{Lifetime: spec.OneShot, TTL: time.Minute, Deadline: t0.Add(time.Minute), Env: []string{"A=1"}, Dir: "/tmp",
		Labels: map[string]string{"k": "v"}, Secret: "new"}
	for _, tc := range []struct {
		name  string
		path  []Event
		ev    Event
		legal bool
	}{
		{"pooled and started", []Event{pooled, c, st, w}, claim, true},
		{"pooled, no warden", []Event{pooled, c, st}, SandboxClaimed{Lifetime: spec.Kept}, true},
		{"pooled, still reserved", []Event{pooled, c}, claim, false},
		{"claimed twice", []Event{pooled, c, st, w, claim}, claim, false},
		{"pooled and stopping", []Event{pooled, c, st, SandboxStopping{Reason: ReasonStopped}}, claim, false},
		{"pooled and exited", []Event{pooled, c, st, SandboxExited{Reason: ReasonStopped}}, claim, false},
		{"no lifetime", []Event{pooled, c, st}, SandboxClaimed{}, false},
		{"unknown lifetime", []Event{pooled, c, st}, SandboxClaimed{Lifetime: "forever"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := sandboxAt(t, tc.path...)
			next, err := ApplySandbox(s, 50, t0, tc.ev)
			if !tc.legal {
				var it *IllegalTransition
				if !errors.As(err, &it) || !reflect.DeepEqual(next, s) {
					t.Fatalf("got %v (state changed: %v), want an illegal transition", err, !reflect.DeepEqual(next, s))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !s.Pooled() || s.Admits() || s.Shown() != PhasePooled {
				t.Fatalf("before the claim: pooled %v admits %v shown %s", s.Pooled(), s.Admits(), s.Shown())
			}
			e := tc.ev.(SandboxClaimed)
			if next.Pooled() || !next.Admits() || next.Shown() != PhaseStarted || !next.Claimed || next.Pool != "py" ||
				next.Spec.Lifetime != e.Lifetime || next.Deadline != e.Deadline || next.Spec.Dir != e.Dir ||
				!slices.Equal(next.Spec.Env, e.Env) || next.Spec.Labels["k"] != e.Labels["k"] {
				t.Fatalf("after the claim: %+v", next)
			}
			switch {
			case s.Warden == nil && next.Warden != nil:
				t.Fatal("a claim made up a warden")
			case s.Warden != nil && (next.Warden == nil || next.Warden.Secret != "new" || next.Warden.PID != 9):
				t.Fatalf("warden after the claim %+v, want the same warden with the new secret", next.Warden)
			case s.Warden != nil && s.Warden.Secret != "old":
				t.Fatal("the claim changed the state it was applied to")
			}
		})
	}
	// A claim without a secret leaves no warden to reattach: the pool's
	// secret never serves the claimant.
	s := sandboxAt(t, pooled, c, st, w, SandboxClaimed{Lifetime: spec.Kept})
	if s.Warden != nil {
		t.Fatalf("warden %+v kept with the pool's secret", s.Warden)
	}
}
