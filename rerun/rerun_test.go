package rerun

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// behaviour is what the fake does for an argv (its words joined by " ").
type behaviour struct {
	stdout, stderr string
	code           int
	changes        *lifecycle.Changes
	echoStdin      bool // stdout is the stdin it was fed
}

// fakeRuntime "runs" processes by a table of behaviours and answers
// History for the original sandbox (given) and the new ones (made up as
// processes exit).
type fakeRuntime struct {
	host.Runtime // only CreateSandbox and History are called
	original     []host.HistoryEvent
	table        map[string]behaviour
	historyErr   error // for the new sandbox's History

	mu      sync.Mutex
	created []spec.Sandbox
	box     *fakeSandbox
}

func (f *fakeRuntime) CreateSandbox(_ context.Context, s spec.Sandbox) (host.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created = append(f.created, s)
	f.box = &fakeSandbox{rt: f, id: fmt.Sprintf("sbnew%d", len(f.created))}
	return f.box, nil
}

func (f *fakeRuntime) History(_ context.Context, id string) ([]host.HistoryEvent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if id == "sborig" {
		return f.original, nil
	}
	if f.box == nil || id != f.box.id {
		return nil, spec.Errorf(spec.CodeNotFound, "fake", "no sandbox %s", id)
	}
	if f.historyErr != nil {
		return nil, f.historyErr
	}
	return f.box.events, nil
}

type fakeSandbox struct {
	host.Sandbox
	rt      *fakeRuntime
	id      string
	n       int
	events  []host.HistoryEvent
	removed bool
	started []spec.Process
	stdins  []string
}

func (s *fakeSandbox) ID() string { return s.id }

func (s *fakeSandbox) Remove(context.Context) error {
	s.rt.mu.Lock()
	defer s.rt.mu.Unlock()
	s.removed = true
	return nil
}

func (s *fakeSandbox) Start(_ context.Context, p spec.Process) (host.Process, error) {
	s.rt.mu.Lock()
	defer s.rt.mu.Unlock()
	b, ok := s.rt.table[strings.Join(p.Argv, " ")]
	if !ok {
		return nil, spec.Errorf(spec.CodeNotFound, "fake", "%s: not found", p.Argv[0])
	}
	s.n++
	s.started = append(s.started, p)
	pr := &fakeProcess{id: fmt.Sprintf("pnew%d", s.n), done: make(chan struct{})}
	var in bytes.Buffer
	var inR *io.PipeReader
	if p.Stdin {
		inR, pr.stdin = io.Pipe()
	}
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	pr.stdout, pr.stderr = outR, errR
	go func() {
		if inR != nil {
			_, _ = io.Copy(&in, inR)
		}
		out := b.stdout
		if b.echoStdin {
			out = in.String()
		}
		_, _ = io.WriteString(outW, out)
		_ = outW.Close()
		_, _ = io.WriteString(errW, b.stderr)
		_ = errW.Close()
		code := b.code
		x := lifecycle.ProcessExited{Reason: lifecycle.ReasonExited, ExitCode: &code, Changes: b.changes}
		payload, _ := json.Marshal(x)
		s.rt.mu.Lock()
		s.stdins = append(s.stdins, in.String())
		s.events = append(s.events, host.HistoryEvent{Kind: "process", ID: pr.id, Type: x.Type(), Payload: payload})
		s.rt.mu.Unlock()
		pr.res = spec.Result{ExitCode: code, Reason: string(lifecycle.ReasonExited)}
		close(pr.done)
	}()
	return pr, nil
}

type fakeProcess struct {
	id             string
	stdout, stderr io.ReadCloser
	stdin          io.WriteCloser
	done           chan struct{}
	res            spec.Result
}

func (p *fakeProcess) ID() string                 { return p.id }
func (p *fakeProcess) Stdout() io.ReadCloser      { return p.stdout }
func (p *fakeProcess) Stderr() io.ReadCloser      { return p.stderr }
func (p *fakeProcess) Stdin() io.WriteCloser      { return p.stdin }
func (p *fakeProcess) Done() <-chan struct{}      { return p.done }
func (p *fakeProcess) Stop(context.Context) error { return nil }
func (p *fakeProcess) Resize(context.Context, uint16, uint16) error {
	return spec.Errorf(spec.CodeUnsupported, "fake", "no tty")
}
func (p *fakeProcess) Signal(context.Context, syscall.Signal) error { return nil }
func (p *fakeProcess) Attach(context.Context, host.AttachOptions, func(host.OutputChunk) error) (host.Attached, error) {
	return host.Attached{}, spec.Errorf(spec.CodeUnsupported, "fake", "a re-run reads its processes' streams, never an attach")
}
func (p *fakeProcess) Wait(ctx context.Context) (spec.Result, error) {
	select {
	case <-p.done:
		return p.res, nil
	case <-ctx.Done():
		return spec.Result{}, ctx.Err()
	}
}

// fakeRecordings holds the recorded output and stdin per process.
type fakeRecordings struct {
	out      map[string][2]string
	notWhole map[string]bool
	stdin    map[string]string
	stdinErr error
}

func (r fakeRecordings) Output(id string) ([]byte, []byte, bool, error) {
	o, ok := r.out[id]
	if !ok {
		return nil, nil, false, spec.Errorf(spec.CodeNotFound, "fake", "no recording of %s", id)
	}
	return []byte(o[0]), []byte(o[1]), !r.notWhole[id], nil
}

func (r fakeRecordings) Stdin(id string) ([]byte, bool, error) {
	if r.stdinErr != nil {
		return nil, false, r.stdinErr
	}
	s, ok := r.stdin[id]
	if !ok {
		return nil, false, spec.Errorf(spec.CodeNotFound, "fake", "no stdin of %s", id)
	}
	return []byte(s), true, nil
}

// proc is one recorded process of a story.
type proc struct {
	id      string
	argv    []string
	stdin   bool
	code    int
	changes *lifecycle.Changes
}

// story is the original sandbox's History: reserved, then each process's
// reserved and exited (positions 2, 3; 4, 5; ...).
func story(t *testing.T, procs ...proc) []host.HistoryEvent {
	t.Helper()
	ev := func(kind, id string, e lifecycle.Event) host.HistoryEvent {
		typ, payload, err := lifecycle.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		return host.HistoryEvent{Kind: kind, ID: id, Type: typ, Payload: payload, Time: time.Unix(0, 0)}
	}
	evs := []host.HistoryEvent{ev("sandbox", "sborig", lifecycle.SandboxReserved{Spec: spec.Sandbox{
		Image: "sha256:" + strings.Repeat("ab", 32), Policy: spec.DefaultPolicy(), Env: []string{"A=1"}, Dir: "/workspace/work/sub",
		Datasets: []spec.Dataset{{Image: "sha256:" + strings.Repeat("cd", 32), Target: "/data"}},
	}})}
	for _, p := range procs {
		code := p.code
		evs = append(evs,
			ev("process", p.id, lifecycle.ProcessReserved{Sandbox: "sborig", Spec: spec.Process{Argv: p.argv, Stdin: p.stdin, Stdout: spec.Pipe, Stderr: spec.Discard}}),
			ev("process", p.id, lifecycle.ProcessExited{Reason: lifecycle.ReasonExited, ExitCode: &code, Changes: p.changes}))
	}
	return evs
}

func created(path, sha string) lifecycle.Change {
	return lifecycle.Change{Op: "created", Path: path, Kind: "file", Size: 3, SHA256: sha}
}

func TestRun(t *testing.T) {
	oneFile := &lifecycle.Changes{Created: 1, Entries: []lifecycle.Change{created("work/a.txt", "aa")}}
	otherFile := &lifecycle.Changes{Created: 1, Entries: []lifecycle.Change{created("work/b.txt", "aa")}}
	otherSum := &lifecycle.Changes{Created: 1, Entries: []lifecycle.Change{created("work/a.txt", "bb")}}
	base := []proc{
		{id: "p1", argv: []string{"echo", "hi"}},
		{id: "p2", argv: []string{"sh", "-c", "seq 3"}, changes: oneFile},
		{id: "p3", argv: []string{"cat"}, stdin: true},
	}
	recorded := fakeRecordings{
		out:   map[string][2]string{"p1": {"hi\n", ""}, "p2": {"1\n2\n3\n", "warn\n"}, "p3": {"fed\n", ""}},
		stdin: map[string]string{"p3": "fed\n"},
	}
	same := map[string]behaviour{
		"echo hi":     {stdout: "hi\n"},
		"sh -c seq 3": {stdout: "1\n2\n3\n", stderr: "warn\n", changes: oneFile},
		"cat":         {echoStdin: true},
	}
	with := func(key string, b behaviour) map[string]behaviour {
		m := map[string]behaviour{}
		for k, v := range same {
			m[k] = v
		}
		m[key] = b
		return m
	}
	for _, tc := range []struct {
		name     string
		table    map[string]behaviour
		opts     Options
		rec      fakeRecordings
		diverged string // the first divergence; "" none
		flagged  []string
		check    func(t *testing.T, rep Report)
	}{
		{name: "identical session", table: same, rec: recorded},
		{name: "one changed output", table: with("sh -c seq 3", behaviour{stdout: "1\n2\nthree\n", stderr: "warn\n", changes: oneFile}), rec: recorded,
			diverged: "p2", flagged: []string{"p2"}, check: func(t *testing.T, rep Report) {
				s := rep.Processes[1].Stdout
				if s.Same || s.Line != 3 || s.RecordedLine == nil || *s.RecordedLine != "3\n" || s.RerunLine == nil || *s.RerunLine != "three\n" {
					t.Errorf("stdout comparison: %+v", s)
				}
				if !strings.Contains(s.Diff, "--- a/output\n+++ b/output\n@@ -1,3 +1,3 @@\n 1\n 2\n-3\n+three\n") {
					t.Errorf("stdout diff:\n%s", s.Diff)
				}
				if !rep.Processes[1].Stderr.Same || !rep.Processes[1].Exit.Same || !rep.Processes[1].Changes.Same {
					t.Errorf("more than stdout flagged: %+v", rep.Processes[1])
				}
			}},
		{name: "output ends early", table: with("sh -c seq 3", behaviour{stdout: "1\n2\n", stderr: "warn\n", changes: oneFile}), rec: recorded,
			diverged: "p2", flagged: []string{"p2"}, check: func(t *testing.T, rep Report) {
				s := rep.Processes[1].Stdout
				if s.Line != 3 || s.RecordedLine == nil || s.RerunLine != nil {
					t.Errorf("stdout comparison: %+v", s)
				}
			}},
		{name: "exit code diverges", table: with("echo hi", behaviour{stdout: "hi\n", code: 3}), rec: recorded,
			diverged: "p1", flagged: []string{"p1"}, check: func(t *testing.T, rep Report) {
				e := rep.Processes[0].Exit
				if e.Same || *e.Recorded.ExitCode != 0 || *e.Rerun.ExitCode != 3 || e.Rerun.String() != "exited 3" {
					t.Errorf("exit comparison: %+v", e)
				}
			}},
		{name: "changes diverge: other path", table: with("sh -c seq 3", behaviour{stdout: "1\n2\n3\n", stderr: "warn\n", changes: otherFile}), rec: recorded,
			diverged: "p2", flagged: []string{"p2"}, check: func(t *testing.T, rep Report) {
				c := rep.Processes[1].Changes
				if c.Same || !c.Compared || len(c.Missing) != 1 || c.Missing[0].Path != "work/a.txt" || len(c.Extra) != 1 || c.Extra[0].Path != "work/b.txt" || len(c.Different) != 0 {
					t.Errorf("changes comparison: %+v", c)
				}
			}},
		{name: "changes diverge: other content", table: with("sh -c seq 3", behaviour{stdout: "1\n2\n3\n", stderr: "warn\n", changes: otherSum}), rec: recorded,
			diverged: "p2", flagged: []string{"p2"}, check: func(t *testing.T, rep Report) {
				c := rep.Processes[1].Changes
				if len(c.Different) != 1 || c.Different[0].Rerun.SHA256 != "bb" || len(c.Missing)+len(c.Extra) != 0 {
					t.Errorf("changes comparison: %+v", c)
				}
			}},
		{name: "stdin is fed", table: with("cat", behaviour{echoStdin: true}),
			rec:      fakeRecordings{out: recorded.out, stdin: map[string]string{"p3": "other\n"}},
			diverged: "p3", flagged: []string{"p3"}, check: func(t *testing.T, rep Report) {
				if s := rep.Processes[2].Stdout; s.RerunLine == nil || *s.RerunLine != "other\n" {
					t.Errorf("stdout of cat: %+v", s)
				}
			}},
		{name: "until limits the range", table: same, rec: recorded, opts: Options{Until: 4}, check: func(t *testing.T, rep Report) {
			if len(rep.Processes) != 2 || rep.Processes[1].Original != "p2" || rep.Processes[1].Position != 4 {
				t.Errorf("processes: %+v", rep.Processes)
			}
		}},
		{name: "until before every process", table: same, rec: recorded, opts: Options{Until: 1}, check: func(t *testing.T, rep Report) {
			if len(rep.Processes) != 0 {
				t.Errorf("processes: %+v", rep.Processes)
			}
		}},
		{name: "recording not whole: compared with a note", table: same,
			rec: fakeRecordings{out: recorded.out, stdin: recorded.stdin, notWhole: map[string]bool{"p1": true}}, check: func(t *testing.T, rep Report) {
				if p := rep.Processes[0]; !p.Same || p.Stdout.Note == "" || len(p.Notes) == 0 {
					t.Errorf("p1: %+v", p)
				}
			}},
		{name: "no recording: not compared", table: same,
			rec: fakeRecordings{out: map[string][2]string{"p2": recorded.out["p2"], "p3": recorded.out["p3"]}, stdin: recorded.stdin}, check: func(t *testing.T, rep Report) {
				if p := rep.Processes[0]; !p.Same || p.Stdout.Compared || p.Stdout.Note == "" {
					t.Errorf("p1: %+v", p)
				}
			}},
		{name: "kept", table: same, rec: recorded, opts: Options{KeepSandbox: true}, check: func(t *testing.T, rep Report) {
			if !rep.Kept {
				t.Error("not kept")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := &fakeRuntime{original: story(t, base...), table: tc.table}
			rep, err := Run(context.Background(), rt, "sborig", tc.rec, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if rep.FirstDivergence != tc.diverged || rep.Diverged != (tc.diverged != "") {
				t.Errorf("first divergence %q (diverged %v), want %q", rep.FirstDivergence, rep.Diverged, tc.diverged)
			}
			var flagged []string
			for _, p := range rep.Processes {
				if !p.Same {
					flagged = append(flagged, p.Original)
				}
			}
			if strings.Join(flagged, ",") != strings.Join(tc.flagged, ",") {
				t.Errorf("flagged %v, want %v", flagged, tc.flagged)
			}
			if rt.box.removed == tc.opts.KeepSandbox {
				t.Errorf("removed %v with KeepSandbox %v", rt.box.removed, tc.opts.KeepSandbox)
			}
			// The new sandbox has the original's spec.
			s := rt.created[0]
			if s.Image != "sha256:"+strings.Repeat("ab", 32) || s.Dir != "/workspace/work/sub" || len(s.Env) != 1 || len(s.Datasets) != 1 || s.Labels[LabelRerunOf] != "sborig" {
				t.Errorf("new sandbox spec: %+v", s)
			}
			if tc.check != nil {
				tc.check(t, rep)
			}
		})
	}
}

// TestStdinFed: the recorded stdin is written and closed; the process's
// other fields are the recorded ones.
func TestStdinFed(t *testing.T) {
	rt := &fakeRuntime{original: story(t, proc{id: "p1", argv: []string{"cat"}, stdin: true}), table: map[string]behaviour{"cat": {echoStdin: true}}}
	rep, err := Run(context.Background(), rt, "sborig", fakeRecordings{out: map[string][2]string{"p1": {"in\n", ""}}, stdin: map[string]string{"p1": "in\n"}}, Options{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if rt.box.stdins[0] != "in\n" || !rep.Processes[0].Same {
		t.Errorf("stdin %q, report %+v", rt.box.stdins[0], rep.Processes[0])
	}
	if p := rt.box.started[0]; !p.Stdin || p.Stderr != spec.Pipe || p.Timeout != time.Minute {
		t.Errorf("started %+v", p)
	}
}

// TestRemovedOnError: Run's own failures still remove the new sandbox.
func TestRemovedOnError(t *testing.T) {
	for _, tc := range []struct {
		name string
		rt   func(*fakeRuntime)
		rec  fakeRecordings
	}{
		{"stdin unreadable", nil, fakeRecordings{stdinErr: spec.Errorf(spec.CodeJournal, "fake", "disk on fire")}},
		{"new history unreadable", func(f *fakeRuntime) { f.historyErr = spec.Errorf(spec.CodeJournal, "fake", "gone") }, fakeRecordings{stdin: map[string]string{"p1": ""}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := &fakeRuntime{original: story(t, proc{id: "p1", argv: []string{"cat"}, stdin: true}), table: map[string]behaviour{"cat": {echoStdin: true}}}
			if tc.rt != nil {
				tc.rt(rt)
			}
			rep, err := Run(context.Background(), rt, "sborig", tc.rec, Options{})
			if !spec.IsCode(err, spec.CodeJournal) {
				t.Fatalf("err %v, want journal", err)
			}
			if !rt.box.removed || rep.Rerun != rt.box.id {
				t.Errorf("removed %v, rerun %q", rt.box.removed, rep.Rerun)
			}
		})
	}
}

// TestNotStarted: a process the re-run cannot start is a divergence, not
// an error; the re-run goes on.
func TestNotStarted(t *testing.T) {
	rt := &fakeRuntime{original: story(t, proc{id: "p1", argv: []string{"nope"}}, proc{id: "p2", argv: []string{"echo", "hi"}}),
		table: map[string]behaviour{"echo hi": {stdout: "hi\n"}}}
	rep, err := Run(context.Background(), rt, "sborig", fakeRecordings{out: map[string][2]string{"p1": {}, "p2": {"hi\n", ""}}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.FirstDivergence != "p1" || rep.Processes[0].Exit.Rerun.Error != spec.CodeNotFound || !rep.Processes[1].Same {
		t.Errorf("report %+v", rep)
	}
}

func TestNoSuchSandbox(t *testing.T) {
	rt := &fakeRuntime{}
	rt.original = nil
	if _, err := Run(context.Background(), rt, "sbnone", fakeRecordings{}, Options{}); !spec.IsCode(err, spec.CodeNotFound) {
		t.Fatalf("err %v", err)
	}
	if len(rt.created) != 0 {
		t.Error("a sandbox was made")
	}
}

// TestSessionNotes: what the re-run does not reproduce is noted: processes
// that overlapped, egress rules changed mid-session.
func TestSessionNotes(t *testing.T) {
	evs := story(t, proc{id: "p1", argv: []string{"echo", "hi"}}, proc{id: "p2", argv: []string{"echo", "hi"}})
	if rep, err := Run(context.Background(), &fakeRuntime{original: evs, table: map[string]behaviour{"echo hi": {stdout: "hi\n"}}}, "sborig",
		fakeRecordings{out: map[string][2]string{"p1": {"hi\n", ""}, "p2": {"hi\n", ""}}}, Options{}); err != nil || len(rep.Notes) != 0 || rep.Diverged {
		t.Fatalf("sequential session: %+v, %v", rep, err)
	}
	// p2 reserved before p1 exited; the rules changed.
	evs[2], evs[3] = evs[3], evs[2]
	typ, payload, _ := lifecycle.Encode(lifecycle.EgressChanged{})
	evs = append(evs, host.HistoryEvent{Kind: "sandbox", ID: "sborig", Type: typ, Payload: payload})
	rep, err := Run(context.Background(), &fakeRuntime{original: evs, table: map[string]behaviour{"echo hi": {stdout: "hi\n"}}}, "sborig",
		fakeRecordings{out: map[string][2]string{"p1": {"hi\n", ""}, "p2": {"hi\n", ""}}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Notes) != 2 || !strings.Contains(rep.Notes[0], "same time") || !strings.Contains(rep.Notes[1], "egress") {
		t.Errorf("notes %q", rep.Notes)
	}
}

// A re-run of a sandbox that had secret variables needs every value given
// (the journal keeps names and refs only), and no other.
func TestSecretsFor(t *testing.T) {
	journaled := []spec.SecretVar{{Name: "TOKEN", Ref: "secret ns/creds key token"}, {Name: "KEY", Ref: "r2"}}
	got, err := secretsFor("sb", journaled, []spec.SecretVar{{Name: "KEY", Value: "k"}, {Name: "TOKEN", Value: "t"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []spec.SecretVar{{Name: "TOKEN", Ref: "secret ns/creds key token", Value: "t"}, {Name: "KEY", Ref: "r2", Value: "k"}}; !slices.Equal(got, want) {
		t.Fatalf("%+v, want %+v", got, want)
	}
	if _, err := secretsFor("sb", journaled, []spec.SecretVar{{Name: "KEY", Value: "k"}}); !spec.IsCode(err, spec.CodeInvalidArgument) || !strings.Contains(err.Error(), "TOKEN (secret ns/creds key token)") {
		t.Fatalf("a missing value: %v", err)
	}
	if _, err := secretsFor("sb", nil, []spec.SecretVar{{Name: "X", Value: "x"}}); !spec.IsCode(err, spec.CodeInvalidArgument) {
		t.Fatalf("a value for no secret: %v", err)
	}
	if got, err := secretsFor("sb", nil, nil); err != nil || got != nil {
		t.Fatalf("no secrets: %v %v", got, err)
	}
}
