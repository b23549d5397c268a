package lifecycle

import (
	"maps"
	"slices"
	"time"

	"github.com/stockade/stockade/spec"
)

// Phase is a lifecycle state.
type Phase string

const (
	// PhaseNone is the state before the first event.
	PhaseNone     Phase = ""
	PhaseReserved Phase = "reserved"
	PhaseStarted  Phase = "started"
	PhaseStopping Phase = "stopping"
	PhaseExited   Phase = "exited"
	PhaseRemoving Phase = "removing"
	PhaseRemoved  Phase = "removed"
)

// Sandbox is a sandbox's folded state.
type Sandbox struct {
	ID       string
	Phase    Phase
	Owner    string
	Spec     spec.Sandbox
	Profile  string
	Revision string
	Deadline time.Time
	// Created holds the resources once made.
	Created *SandboxCreated
	// Started: the workload ever ran (a failed create never did).
	Started bool
	// Stopping is the reason given at the stopping intent.
	Stopping Reason
	// Paused: a pause was journaled and its unpause not yet; recovery
	// thaws such a workload.
	Paused bool
	Exit   *SandboxExited
	// Recovered lists every recovery decision, oldest first.
	Recovered []Recovered
	Adopted   bool
	// Warden is the sandbox's warden while it serves (nil before the
	// first and after a loss).
	Warden *WardenStarted
	// RulesVersion is the sequence of the last egress change (0: the
	// rules the sandbox was made with); Spec.Policy.Egress holds the rules.
	RulesVersion uint64
	// Pool is the warm pool the sandbox was made for; Claimed says it
	// was handed to a caller (see Pooled).
	Pool    string
	Claimed bool
	// Checkpoints lists the checkpoints taken of the sandbox, oldest
	// first; RollingBack is a rollback's intent not yet settled (the
	// sandbox admits no process meanwhile); Rollbacks counts the settled
	// ones that restored a checkpoint; Restored is the checkpoint the
	// workspace was made from (its spec's From).
	Checkpoints []Checkpointed
	RollingBack *RollingBack
	Rollbacks   int
	Restored    string
	// LastRollback is the last settled rollback's intent (its staging
	// directory and marker, tidied after a crash).
	LastRollback *RollingBack
	// Usage is the last usage sample journaled (nil: none yet).
	Usage *UsageSampled
	// Seq is the sequence of the last event applied; At its time.
	Seq      uint64
	Reserved time.Time
	At       time.Time
}

// PhasePooled is how a pooled sandbox is shown: its fold's phase is
// started (recovery treats it as a kept, started sandbox: readback,
// re-adopt, orphans), and Pooled says it waits for a claim.
const PhasePooled Phase = "pooled"

// Pooled reports whether the sandbox was made for a warm pool and not yet
// claimed: it admits no process, so no pooled sandbox ever ran one.
func (s Sandbox) Pooled() bool { return s.Pool != "" && !s.Claimed }

// Shown is the phase to show a reader: PhasePooled for a started, pooled
// sandbox, else Phase.
func (s Sandbox) Shown() Phase {
	if s.Phase == PhaseStarted && s.Pooled() {
		return PhasePooled
	}
	return s.Phase
}

// Process is a process's folded state.
type Process struct {
	ID       string
	Phase    Phase
	Sandbox  string
	Spec     spec.Process
	Deadline time.Time
	ExecID   string
	Group    int
	PID      int
	// ByWarden: the sandbox's warden spawned it (no Docker exec).
	ByWarden bool
	// OOMKills is the sandbox's OOM kill count at the start; -1 unknown.
	OOMKills    int64
	StdinClosed bool
	QuotaHit    bool
	Stopping    Reason
	Exit        *ProcessExited
	Recovered   []Recovered
	Adopted     bool
	Detached    bool
	Seq         uint64
	Reserved    time.Time
	At          time.Time
}

// Repeats reports whether r is the recovery decision last recorded in rs,
// with the same observation: a recovery that changes nothing records
// nothing, so a kept entity's stream does not grow with every restart.
func Repeats(rs []Recovered, r Recovered) bool {
	return len(rs) > 0 && rs[len(rs)-1] == r
}

// Terminal reports whether the sandbox is removed.
func (s Sandbox) Terminal() bool { return s.Phase == PhaseRemoved }

// Terminal reports whether the process has exited.
func (p Process) Terminal() bool { return p.Phase == PhaseExited }

// Result is how the process ended, as its exited fact records it (from its
// reservation to its last event); ok is false while it has not ended.
func (p Process) Result() (r spec.Result, ok bool) {
	e := p.Exit
	if e == nil {
		return spec.Result{}, false
	}
	r = spec.Result{ExitCode: -1, Reason: string(e.Reason), StdoutBytes: e.StdoutBytes, StderrBytes: e.StderrBytes, Started: p.Reserved, Ended: p.At, Usage: e.Usage}
	if e.ExitCode != nil {
		r.ExitCode = *e.ExitCode
	}
	if e.Error != "" {
		r.Err = &spec.Error{Code: e.Error, Op: "process", Msg: e.Message}
	}
	return r, true
}

// Admits reports whether the sandbox accepts new processes: it is started,
// no stop has been asked, and it is not waiting in a pool.
func (s Sandbox) Admits() bool {
	return s.Phase == PhaseStarted && !s.Pooled() && s.RollingBack == nil
}

// IllegalTransition is returned by the folds for an event its state does not
// admit.
type IllegalTransition struct {
	Entity string // "sandbox" or "process"
	ID     string
	From   Phase
	Event  string
}

func (e *IllegalTransition) Error() string {
	from := string(e.From)
	if from == "" {
		from = "(none)"
	}
	return "lifecycle: " + e.Entity + " " + e.ID + ": illegal transition " + from + " --" + e.Event + "-->"
}

func illegal(entity, id string, from Phase, ev Event) error {
	return spec.Wrap(spec.CodeJournal, "lifecycle", &IllegalTransition{Entity: entity, ID: id, From: from, Event: ev.Type()}, "%s %s", entity, id)
}

// ApplySandbox folds one event into a sandbox's state. seq and at are the
// event's journal sequence and time. It never mutates s's slices in place.
func ApplySandbox(s Sandbox, seq uint64, at time.Time, ev Event) (Sandbox, error) {
	from := s.Phase
	ok := false
	switch e := ev.(type) {
	case SandboxReserved:
		if ok = from == PhaseNone; ok {
			s.Phase, s.Owner, s.Spec, s.Profile, s.Revision, s.Deadline = PhaseReserved, e.Owner, e.Spec, e.Profile, e.Revision, e.Deadline
			s.Spec.Secrets = spec.WithoutSecretValues(e.Spec.Secrets) // a state never holds a value, even folded in memory
			s.Reserved, s.Pool = at, e.Pool
		}
	case SandboxClaimed:
		if ok = from == PhaseStarted && s.Pooled() && e.Lifetime.Valid(); ok {
			s.Claimed = true
			s.Spec.Lifetime, s.Spec.TTL, s.Deadline = e.Lifetime, e.TTL, e.Deadline
			s.Spec.Env, s.Spec.Dir, s.Spec.Labels = slices.Clone(e.Env), e.Dir, maps.Clone(e.Labels)
			s.Spec.Secrets = spec.WithoutSecretValues(e.Secrets)
			if s.Warden != nil {
				w := *s.Warden
				w.Secret = e.Secret
				if e.Secret == "" {
					s.Warden = nil // no secret: the pool's warden is not the claimant's
				} else {
					s.Warden = &w
				}
			}
		}
	case SandboxCreated:
		if ok = from == PhaseReserved && s.Created == nil; ok {
			c := e
			s.Created = &c
		}
	case SandboxStarted:
		if ok = from == PhaseReserved && s.Created != nil; ok {
			s.Phase, s.Started = PhaseStarted, true
		}
	case SandboxStopping:
		if ok = from == PhaseStarted; ok {
			s.Phase, s.Stopping = PhaseStopping, e.Reason
		}
	case SandboxExited:
		if ok = from == PhaseReserved || from == PhaseStarted || from == PhaseStopping; ok {
			x := e
			s.Phase, s.Exit = PhaseExited, &x
		}
	case SandboxPausing:
		if ok = from == PhaseStarted && !s.Paused; ok {
			s.Paused = true
		}
	case SandboxUnpaused:
		// Also after the stop (Docker thaws a workload to stop it) and
		// from recovery, which finds the workload as it is.
		if ok = s.Paused && from != PhaseRemoved; ok {
			s.Paused = false
		}
	case WardenStarted:
		if ok = from == PhaseStarted; ok {
			w := e
			s.Warden = &w
		}
	case WardenLost:
		if ok = s.Warden != nil && from != PhaseRemoved; ok {
			s.Warden = nil
		}
	case UsageSampled:
		if ok = from == PhaseStarted || from == PhaseStopping; ok {
			u := e
			s.Usage = &u
		}
	case Checkpointed:
		if ok = (from == PhaseStarted || from == PhaseStopping || from == PhaseExited) && !s.Pooled() && e.ID != ""; ok {
			s.Checkpoints = append(s.Checkpoints[:len(s.Checkpoints):len(s.Checkpoints)], e)
		}
	case RollingBack:
		if ok = from == PhaseStarted && !s.Pooled() && s.RollingBack == nil && e.Checkpoint != "" && e.Staging != ""; ok {
			x := e
			s.RollingBack = &x
		}
	case RolledBack:
		if ok = s.RollingBack != nil && s.RollingBack.Checkpoint == e.Checkpoint; ok {
			s.LastRollback, s.RollingBack = s.RollingBack, nil
			s.Rollbacks++
		}
	case RollbackAbandoned:
		if ok = s.RollingBack != nil && s.RollingBack.Checkpoint == e.Checkpoint; ok {
			s.LastRollback, s.RollingBack = s.RollingBack, nil
		}
	case Restored:
		if ok = from == PhaseStarted && s.Spec.From == e.Checkpoint && s.Restored == ""; ok {
			s.Restored = e.Checkpoint
		}
	case EgressChanged:
		if ok = from == PhaseStarted && s.Spec.Policy.Network == spec.NetworkAllowlist; ok {
			s.Spec.Policy.Egress = slices.Clone(e.Rules)
			s.RulesVersion = seq
		}
	case EgressReplaced:
		if ok = s.Created != nil && s.Created.Egress != "" && from != PhaseRemoved; ok {
			c := *s.Created
			c.Egress, c.Outside = e.Egress, e.Outside
			s.Created = &c
		}
	case SandboxRemoving:
		// A removing intent may be journaled again by a recovery that
		// finishes an interrupted teardown.
		if ok = from == PhaseExited || from == PhaseRemoving; ok {
			s.Phase = PhaseRemoving
		}
	case SandboxRemoved:
		if ok = from == PhaseRemoving; ok {
			s.Phase = PhaseRemoved
		}
	case Recovered:
		if ok = from != PhaseNone && from != PhaseRemoved; ok {
			s.Recovered = append(s.Recovered[:len(s.Recovered):len(s.Recovered)], e)
		}
	case Adopted:
		if ok = from == PhaseStarted; ok {
			s.Adopted = true
		}
	}
	if !ok {
		return s, illegal("sandbox", s.ID, from, ev)
	}
	s.Seq, s.At = seq, at
	return s, nil
}

// ApplyProcess folds one event into a process's state.
func ApplyProcess(p Process, seq uint64, at time.Time, ev Event) (Process, error) {
	from := p.Phase
	ok := false
	switch e := ev.(type) {
	case ProcessReserved:
		if ok = from == PhaseNone; ok {
			p.Phase, p.Sandbox, p.Spec, p.Deadline, p.Reserved = PhaseReserved, e.Sandbox, e.Spec, e.Deadline, at
		}
	case ExecCreated:
		if ok = from == PhaseReserved && p.ExecID == ""; ok {
			p.ExecID = e.ExecID
		}
	case ProcessStarted:
		if ok = from == PhaseReserved && (p.ExecID != "") != e.ByWarden; ok {
			p.Phase, p.Group, p.PID, p.ByWarden, p.OOMKills = PhaseStarted, e.Group, e.PID, e.ByWarden, -1
			if e.OOMKills != nil {
				p.OOMKills = *e.OOMKills
			}
		}
	case StdinClosed:
		if ok = (from == PhaseStarted || from == PhaseStopping) && !p.StdinClosed; ok {
			p.StdinClosed = true
		}
	case QuotaHit:
		if ok = from == PhaseStarted || from == PhaseStopping; ok {
			p.QuotaHit = true
		}
	case ProcessStopping:
		if ok = from == PhaseStarted; ok {
			p.Phase, p.Stopping = PhaseStopping, e.Reason
		}
	case ProcessExited:
		if ok = from == PhaseReserved || from == PhaseStarted || from == PhaseStopping; ok {
			x := e
			p.Phase, p.Exit = PhaseExited, &x
		}
	case Recovered:
		if ok = from != PhaseNone && from != PhaseExited; ok {
			p.Recovered = append(p.Recovered[:len(p.Recovered):len(p.Recovered)], e)
		}
	case Adopted:
		if ok = from == PhaseStarted || from == PhaseStopping; ok {
			p.Adopted, p.Detached = true, e.Detached
		}
	case OutputGap:
		// Output is lost while the process runs (or before its exit is
		// journaled), never after.
		ok = (from == PhaseStarted || from == PhaseStopping) && e.From >= 0 && e.To > e.From
	}
	if !ok {
		return p, illegal("process", p.ID, from, ev)
	}
	p.Seq, p.At = seq, at
	return p, nil
}
