// Package apiconv converts between the API's Go types (spec, lifecycle,
// egress) and stockade.v1's messages, one function each way, for the
// server and the client alike: what one side sends, the other decodes into
// the very value the embedded runtime returns (a round-trip test holds
// every field to it).
package apiconv

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	stockadev1 "github.com/stockade/stockade/api/stockade/v1"
	"github.com/stockade/stockade/egress"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// Stamp is t on the wire; the zero time is unset. (The server and the
// client convert the host shapes themselves with it: apiconv may not
// import host.)
func Stamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// Unstamp is Stamp's inverse.
func Unstamp(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}

func duration(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}

func unduration(d *durationpb.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.AsDuration()
}

// OptInt is an optional int on the wire.
func OptInt(p *int) *int64 {
	if p == nil {
		return nil
	}
	v := int64(*p)
	return &v
}

// UnoptInt is OptInt's inverse.
func UnoptInt(p *int64) *int {
	if p == nil {
		return nil
	}
	v := int(*p)
	return &v
}

// Policy is p on the wire.
func Policy(p spec.Policy) *stockadev1.Policy {
	w := &stockadev1.Policy{Cpus: p.CPUs, MemoryBytes: p.MemoryBytes, Pids: p.Pids, HomeBytes: p.HomeBytes, TmpBytes: p.TmpBytes,
		Network: string(p.Network), User: &stockadev1.User{Uid: p.User.UID, Gid: p.User.GID}}
	for _, r := range p.Egress {
		w.Egress = append(w.Egress, r.String())
	}
	return w
}

// FromPolicy is Policy's inverse; a rule that does not parse is
// invalid_argument, naming it.
func FromPolicy(w *stockadev1.Policy) (spec.Policy, error) {
	if w == nil {
		return spec.Policy{}, nil
	}
	p := spec.Policy{CPUs: w.Cpus, MemoryBytes: w.MemoryBytes, Pids: w.Pids, HomeBytes: w.HomeBytes, TmpBytes: w.TmpBytes, Network: spec.NetworkKind(w.Network)}
	if w.User != nil {
		p.User = spec.User{UID: w.User.Uid, GID: w.User.Gid}
	}
	for _, s := range w.Egress {
		r, err := spec.ParseEgressRule(s)
		if err != nil {
			return p, err
		}
		p.Egress = append(p.Egress, r)
	}
	return p, nil
}

// Datasets is ds on the wire.
func Datasets(ds []spec.Dataset) []*stockadev1.Dataset {
	var out []*stockadev1.Dataset
	for _, d := range ds {
		out = append(out, &stockadev1.Dataset{Image: d.Image, Target: d.Target})
	}
	return out
}

// FromDatasets is Datasets' inverse.
func FromDatasets(ws []*stockadev1.Dataset) []spec.Dataset {
	var out []spec.Dataset
	for _, w := range ws {
		out = append(out, spec.Dataset{Image: w.Image, Target: w.Target})
	}
	return out
}

// SandboxSpec is s on the wire, as a state shows it: its secrets' names
// and refs, never their values.
func SandboxSpec(s spec.Sandbox) *stockadev1.SandboxSpec {
	return &stockadev1.SandboxSpec{Image: s.Image, Policy: Policy(s.Policy), Datasets: Datasets(s.Datasets), Lifetime: string(s.Lifetime),
		Ttl: duration(s.TTL), Env: s.Env, Dir: s.Dir, Labels: s.Labels, From: s.From, Secrets: SecretVars(spec.WithoutSecretValues(s.Secrets))}
}

// SecretVars is vars on the wire, values included: a create's and a
// SetSecrets' (a state's are stripped first).
func SecretVars(vars []spec.SecretVar) []*stockadev1.SecretVar {
	var out []*stockadev1.SecretVar
	for _, v := range vars {
		out = append(out, &stockadev1.SecretVar{Name: v.Name, Ref: v.Ref, Value: v.Value})
	}
	return out
}

// FromSecretVars is SecretVars' inverse.
func FromSecretVars(ws []*stockadev1.SecretVar) []spec.SecretVar {
	var out []spec.SecretVar
	for _, w := range ws {
		out = append(out, spec.SecretVar{Name: w.Name, Ref: w.Ref, Value: w.Value})
	}
	return out
}

// FromSandboxSpec is SandboxSpec's inverse.
func FromSandboxSpec(w *stockadev1.SandboxSpec) (spec.Sandbox, error) {
	if w == nil {
		return spec.Sandbox{}, nil
	}
	p, err := FromPolicy(w.Policy)
	s := spec.Sandbox{Image: w.Image, Policy: p, Datasets: FromDatasets(w.Datasets), Lifetime: spec.Lifetime(w.Lifetime),
		TTL: unduration(w.Ttl), Env: w.Env, Dir: w.Dir, Labels: w.Labels, From: w.From, Secrets: spec.WithoutSecretValues(FromSecretVars(w.Secrets))}
	return s, err
}

func recovered(rs []lifecycle.Recovered) []*stockadev1.Recovered {
	var out []*stockadev1.Recovered
	for _, r := range rs {
		out = append(out, &stockadev1.Recovered{Decision: r.Decision, Observed: r.Observed})
	}
	return out
}

func fromRecovered(ws []*stockadev1.Recovered) []lifecycle.Recovered {
	var out []lifecycle.Recovered
	for _, w := range ws {
		out = append(out, lifecycle.Recovered{Decision: w.Decision, Observed: w.Observed})
	}
	return out
}

func rollingBack(r *lifecycle.RollingBack) *stockadev1.RollingBack {
	if r == nil {
		return nil
	}
	return &stockadev1.RollingBack{Checkpoint: r.Checkpoint, Staging: r.Staging, Marker: r.Marker}
}

func fromRollingBack(w *stockadev1.RollingBack) *lifecycle.RollingBack {
	if w == nil {
		return nil
	}
	return &lifecycle.RollingBack{Checkpoint: w.Checkpoint, Staging: w.Staging, Marker: w.Marker}
}

// SandboxState is st on the wire.
func SandboxState(st lifecycle.Sandbox) *stockadev1.SandboxState {
	w := &stockadev1.SandboxState{Id: st.ID, Phase: string(st.Phase), Owner: st.Owner, Spec: SandboxSpec(st.Spec), Profile: st.Profile,
		Revision: st.Revision, Deadline: Stamp(st.Deadline), Started: st.Started, Stopping: string(st.Stopping), Paused: st.Paused,
		Recovered: recovered(st.Recovered), Adopted: st.Adopted, RulesVersion: st.RulesVersion, Pool: st.Pool, Claimed: st.Claimed,
		RollingBack: rollingBack(st.RollingBack), Rollbacks: int64(st.Rollbacks), Restored: st.Restored, LastRollback: rollingBack(st.LastRollback),
		Seq: st.Seq, Reserved: Stamp(st.Reserved), At: Stamp(st.At), Usage: usageSampled(st.Usage)}
	if c := st.Created; c != nil {
		w.Created = &stockadev1.SandboxCreated{Workload: c.Workload, Export: c.Export, Volume: c.Volume, Network: c.Network, Egress: c.Egress,
			Outside: c.Outside, Proxy: c.Proxy}
	}
	if e := st.Exit; e != nil {
		w.Exit = &stockadev1.SandboxExited{Reason: string(e.Reason), ExitCode: OptInt(e.ExitCode), Oom: e.OOM, Error: string(e.Error), Message: e.Message}
	}
	if wd := st.Warden; wd != nil {
		w.Warden = &stockadev1.WardenStarted{Pid: int64(wd.PID), Socket: wd.Socket, Secret: wd.Secret, Version: wd.Version}
	}
	for _, c := range st.Checkpoints {
		w.Checkpoints = append(w.Checkpoints, &stockadev1.Checkpointed{Id: c.ID, Name: c.Name, Files: int64(c.Files), Bytes: c.Bytes})
	}
	return w
}

// FromSandboxState is SandboxState's inverse.
func FromSandboxState(w *stockadev1.SandboxState) (lifecycle.Sandbox, error) {
	if w == nil {
		return lifecycle.Sandbox{}, nil
	}
	sp, err := FromSandboxSpec(w.Spec)
	st := lifecycle.Sandbox{ID: w.Id, Phase: lifecycle.Phase(w.Phase), Owner: w.Owner, Spec: sp, Profile: w.Profile, Revision: w.Revision,
		Deadline: Unstamp(w.Deadline), Started: w.Started, Stopping: lifecycle.Reason(w.Stopping), Paused: w.Paused,
		Recovered: fromRecovered(w.Recovered), Adopted: w.Adopted, RulesVersion: w.RulesVersion, Pool: w.Pool, Claimed: w.Claimed,
		RollingBack: fromRollingBack(w.RollingBack), Rollbacks: int(w.Rollbacks), Restored: w.Restored, LastRollback: fromRollingBack(w.LastRollback),
		Seq: w.Seq, Reserved: Unstamp(w.Reserved), At: Unstamp(w.At), Usage: fromUsageSampled(w.Usage)}
	if c := w.Created; c != nil {
		st.Created = &lifecycle.SandboxCreated{Workload: c.Workload, Export: c.Export, Volume: c.Volume, Network: c.Network, Egress: c.Egress,
			Outside: c.Outside, Proxy: c.Proxy}
	}
	if e := w.Exit; e != nil {
		st.Exit = &lifecycle.SandboxExited{Reason: lifecycle.Reason(e.Reason), ExitCode: UnoptInt(e.ExitCode), OOM: e.Oom, Error: spec.Code(e.Error), Message: e.Message}
	}
	if wd := w.Warden; wd != nil {
		st.Warden = &lifecycle.WardenStarted{PID: int(wd.Pid), Socket: wd.Socket, Secret: wd.Secret, Version: wd.Version}
	}
	for _, c := range w.Checkpoints {
		st.Checkpoints = append(st.Checkpoints, lifecycle.Checkpointed{ID: c.Id, Name: c.Name, Files: int(c.Files), Bytes: c.Bytes})
	}
	return st, err
}

// ProcessSpec is p on the wire.
func ProcessSpec(p spec.Process) *stockadev1.ProcessSpec {
	return &stockadev1.ProcessSpec{Argv: p.Argv, Env: p.Env, Dir: p.Dir, Stdin: p.Stdin, Stdout: string(p.Stdout), Stderr: string(p.Stderr),
		Timeout: duration(p.Timeout), OutputQuota: p.OutputQuota, Record: &stockadev1.Record{Off: p.Record.Off, Head: p.Record.Head, Tail: p.Record.Tail},
		Tty: p.TTY, Rows: uint32(p.Rows), Cols: uint32(p.Cols), NoChanges: p.NoChanges, StopWithCaller: p.StopWithCaller}
}

// FromProcessSpec is ProcessSpec's inverse.
func FromProcessSpec(w *stockadev1.ProcessSpec) spec.Process {
	if w == nil {
		return spec.Process{}
	}
	p := spec.Process{Argv: w.Argv, Env: w.Env, Dir: w.Dir, Stdin: w.Stdin, Stdout: spec.StreamMode(w.Stdout), Stderr: spec.StreamMode(w.Stderr),
		Timeout: unduration(w.Timeout), OutputQuota: w.OutputQuota, TTY: w.Tty, Rows: uint16(min(w.Rows, 65535)), Cols: uint16(min(w.Cols, 65535)),
		NoChanges: w.NoChanges, StopWithCaller: w.StopWithCaller}
	if r := w.Record; r != nil {
		p.Record = spec.Record{Off: r.Off, Head: r.Head, Tail: r.Tail}
	}
	return p
}

// Changes is c on the wire (nil: nil).
func Changes(c *lifecycle.Changes) *stockadev1.Changes {
	if c == nil {
		return nil
	}
	w := &stockadev1.Changes{Untracked: c.Untracked, Incomplete: c.Incomplete, Created: int64(c.Created), Modified: int64(c.Modified),
		Deleted: int64(c.Deleted), Renamed: int64(c.Renamed), Omitted: int64(c.Omitted)}
	for _, e := range c.Entries {
		w.Entries = append(w.Entries, &stockadev1.Change{Op: e.Op, Path: e.Path, From: e.From, Kind: e.Kind, Size: e.Size, Mode: e.Mode,
			Sha256: e.SHA256, Unhashed: e.Unhashed, Text: e.Text})
	}
	return w
}

// FromChanges is Changes' inverse.
func FromChanges(w *stockadev1.Changes) *lifecycle.Changes {
	if w == nil {
		return nil
	}
	c := &lifecycle.Changes{Untracked: w.Untracked, Incomplete: w.Incomplete, Created: int(w.Created), Modified: int(w.Modified),
		Deleted: int(w.Deleted), Renamed: int(w.Renamed), Omitted: int(w.Omitted)}
	for _, e := range w.Entries {
		c.Entries = append(c.Entries, lifecycle.Change{Op: e.Op, Path: e.Path, From: e.From, Kind: e.Kind, Size: e.Size, Mode: e.Mode,
			SHA256: e.Sha256, Unhashed: e.Unhashed, Text: e.Text})
	}
	return c
}

// ProcessState is st on the wire.
func ProcessState(st lifecycle.Process) *stockadev1.ProcessState {
	w := &stockadev1.ProcessState{Id: st.ID, Phase: string(st.Phase), SandboxId: st.Sandbox, Spec: ProcessSpec(st.Spec), Deadline: Stamp(st.Deadline),
		ExecId: st.ExecID, Group: int64(st.Group), Pid: int64(st.PID), ByWarden: st.ByWarden, OomKills: st.OOMKills, StdinClosed: st.StdinClosed,
		QuotaHit: st.QuotaHit, Stopping: string(st.Stopping), Recovered: recovered(st.Recovered), Adopted: st.Adopted, Detached: st.Detached,
		Seq: st.Seq, Reserved: Stamp(st.Reserved), At: Stamp(st.At)}
	if e := st.Exit; e != nil {
		w.Exit = &stockadev1.ProcessExited{Reason: string(e.Reason), ExitCode: OptInt(e.ExitCode), Error: string(e.Error), Message: e.Message,
			StdoutBytes: e.StdoutBytes, StderrBytes: e.StderrBytes, Changes: Changes(e.Changes), Usage: ProcessUsage(e.Usage)}
	}
	return w
}

// FromProcessState is ProcessState's inverse.
func FromProcessState(w *stockadev1.ProcessState) lifecycle.Process {
	if w == nil {
		return lifecycle.Process{}
	}
	st := lifecycle.Process{ID: w.Id, Phase: lifecycle.Phase(w.Phase), Sandbox: w.SandboxId, Spec: FromProcessSpec(w.Spec), Deadline: Unstamp(w.Deadline),
		ExecID: w.ExecId, Group: int(w.Group), PID: int(w.Pid), ByWarden: w.ByWarden, OOMKills: w.OomKills, StdinClosed: w.StdinClosed,
		QuotaHit: w.QuotaHit, Stopping: lifecycle.Reason(w.Stopping), Recovered: fromRecovered(w.Recovered), Adopted: w.Adopted, Detached: w.Detached,
		Seq: w.Seq, Reserved: Unstamp(w.Reserved), At: Unstamp(w.At)}
	if e := w.Exit; e != nil {
		st.Exit = &lifecycle.ProcessExited{Reason: lifecycle.Reason(e.Reason), ExitCode: UnoptInt(e.ExitCode), Error: spec.Code(e.Error), Message: e.Message,
			StdoutBytes: e.StdoutBytes, StderrBytes: e.StderrBytes, Changes: FromChanges(e.Changes), Usage: FromProcessUsage(e.Usage)}
	}
	return st
}

// Decisions is ds on the wire.
func Decisions(ds []egress.Decision) []*stockadev1.EgressDecision {
	out := make([]*stockadev1.EgressDecision, 0, len(ds))
	for _, d := range ds {
		out = append(out, &stockadev1.EgressDecision{Seq: d.Seq, Time: Stamp(d.Time), Process: d.Process, Client: d.Client, Method: d.Method,
			Host: d.Host, Port: uint32(d.Port), Addr: d.Addr, Verdict: d.Verdict, Rule: d.Rule, Reason: d.Reason, Up: d.Up, Down: d.Down, Millis: d.Millis})
	}
	return out
}

// FromDecisions is Decisions' inverse.
func FromDecisions(ws []*stockadev1.EgressDecision) []egress.Decision {
	out := make([]egress.Decision, 0, len(ws))
	for _, w := range ws {
		out = append(out, egress.Decision{Seq: w.Seq, Time: Unstamp(w.Time), Process: w.Process, Client: w.Client, Method: w.Method,
			Host: w.Host, Port: uint16(min(w.Port, 65535)), Addr: w.Addr, Verdict: w.Verdict, Rule: w.Rule, Reason: w.Reason, Up: w.Up, Down: w.Down, Millis: w.Millis})
	}
	return out
}

// ProcessUsage is u on the wire (nil: nil).
func ProcessUsage(u *spec.ProcessUsage) *stockadev1.ProcessUsage {
	if u == nil {
		return nil
	}
	return &stockadev1.ProcessUsage{Source: string(u.Source), WallNs: int64(u.Wall), UserNs: int64(u.User), SysNs: int64(u.System),
		MaxRss: u.MaxRSS, ReadBytes: u.ReadBytes, WriteBytes: u.WriteBytes}
}

// FromProcessUsage is ProcessUsage's inverse.
func FromProcessUsage(w *stockadev1.ProcessUsage) *spec.ProcessUsage {
	if w == nil {
		return nil
	}
	return &spec.ProcessUsage{Source: spec.UsageSource(w.Source), Wall: time.Duration(w.WallNs), User: time.Duration(w.UserNs),
		System: time.Duration(w.SysNs), MaxRSS: w.MaxRss, ReadBytes: w.ReadBytes, WriteBytes: w.WriteBytes}
}

// WorkloadUsage is u on the wire.
func WorkloadUsage(u spec.WorkloadUsage) *stockadev1.WorkloadUsage {
	return &stockadev1.WorkloadUsage{At: Stamp(u.At), CpuNs: int64(u.CPU), MemoryPeak: u.MemoryPeak, MemoryGibS: u.MemoryGiBSeconds,
		PidsPeak: u.PidsPeak, Samples: u.Samples, BridgedNs: int64(u.Bridged), UnsampledNs: int64(u.Unsampled)}
}

// FromWorkloadUsage is WorkloadUsage's inverse.
func FromWorkloadUsage(w *stockadev1.WorkloadUsage) spec.WorkloadUsage {
	if w == nil {
		return spec.WorkloadUsage{}
	}
	return spec.WorkloadUsage{At: Unstamp(w.At), CPU: time.Duration(w.CpuNs), MemoryPeak: w.MemoryPeak, MemoryGiBSeconds: w.MemoryGibS,
		PidsPeak: w.PidsPeak, Samples: w.Samples, Bridged: time.Duration(w.BridgedNs), Unsampled: time.Duration(w.UnsampledNs)}
}

func usageSampled(u *lifecycle.UsageSampled) *stockadev1.UsageSampled {
	if u == nil {
		return nil
	}
	return &stockadev1.UsageSampled{Usage: WorkloadUsage(u.Usage), RunCpuNs: int64(u.RunCPU), RunMemory: u.RunMemory, RunEnded: u.RunEnded, Final: u.Final}
}

func fromUsageSampled(w *stockadev1.UsageSampled) *lifecycle.UsageSampled {
	if w == nil {
		return nil
	}
	return &lifecycle.UsageSampled{Usage: FromWorkloadUsage(w.Usage), RunCPU: time.Duration(w.RunCpuNs), RunMemory: w.RunMemory, RunEnded: w.RunEnded, Final: w.Final}
}
