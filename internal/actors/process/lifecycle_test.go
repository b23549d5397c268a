package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/internal/actors"
	"github.com/stockade/stockade/journal"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// waitLimit bounds every wait of these tests: generous, it only turns a
// hang into a failure (nothing here asserts a duration).
const waitLimit = 30 * time.Second

// TestLifecycle drives one process actor through its lifecycle over a fake
// transport and a recording journal. The log interleaves, in the order
// they happened, the journal's appends, the transport's calls and what
// the test reported as the transport: write-ahead order is read off it
// (reserved before the launch, started only after the transport reported
// the start, stopping before any signal, exited only after the exit).
func TestLifecycle(t *testing.T) {
	tests := []struct {
		name     string
		grace    time.Duration // the stop's grace (0: an hour, so no KILL comes)
		deadline bool          // the process's deadline has passed already
		refuse   string        // the journal refuses appends of this type
		steps    []step
		wantLog  []string
		// wantParent is what the parent hears before the actor ends:
		// "exited", "abandoned" or "" (nothing).
		wantParent string
		// wantLaunchErr is the launch's error code ("" : it ran).
		wantLaunchErr spec.Code
		wantResult    wantResult
	}{
		{
			name:  "runs and exits",
			steps: []step{awaitLog("transport launch"), reportStarted, awaitLaunch, endOutput, reportExit(3)},
			wantLog: []string{
				"journal process.reserved", "transport launch",
				"report started", "journal process.started",
				"report output end", "report exit 3", "journal process.exited exited 3",
			},
			wantParent: "exited",
			wantResult: wantResult{code: 3, reason: lifecycle.ReasonExited},
		},
		{
			name:  "stop: TERM, KILL after the grace",
			grace: time.Millisecond,
			steps: []step{awaitLog("transport launch"), reportStarted, awaitLaunch, stop(""), awaitLog("transport killed 1"), endOutput, reportExit(137)},
			wantLog: []string{
				"journal process.reserved", "transport launch",
				"report started", "journal process.started",
				"journal process.stopping signaled", "transport signal TERM", "transport signal KILL", "transport killed 1",
				"report output end", "report exit 137", "journal process.exited signaled 137",
			},
			wantParent: "exited",
			wantResult: wantResult{code: 137, reason: lifecycle.ReasonSignaled},
		},
		{
			name:  "stop: the process ends on TERM, no KILL",
			steps: []step{awaitLog("transport launch"), reportStarted, awaitLaunch, stop(""), awaitLog("transport signal TERM"), endOutput, reportExit(143)},
			wantLog: []string{
				"journal process.reserved", "transport launch",
				"report started", "journal process.started",
				"journal process.stopping signaled", "transport signal TERM",
				"report output end", "report exit 143", "journal process.exited signaled 143",
			},
			wantParent: "exited",
			wantResult: wantResult{code: 143, reason: lifecycle.ReasonSignaled},
		},
		{
			// The deadline may hit before the start is reported or after:
			// either way the stop is journaled once the process runs, and
			// before its TERM.
			name:     "deadline",
			deadline: true,
			steps:    []step{awaitLog("transport launch"), reportStarted, awaitLaunch, awaitLog("transport signal TERM"), endOutput, reportExit(143)},
			wantLog: []string{
				"journal process.reserved", "transport launch",
				"report started", "journal process.started",
				"journal process.stopping timeout", "transport signal TERM",
				"report output end", "report exit 143", "journal process.exited timeout 143",
			},
			wantParent: "exited",
			wantResult: wantResult{code: 143, reason: lifecycle.ReasonTimeout, err: spec.CodeTimeout},
		},
		{
			name:  "lost: no exit code invented",
			steps: []step{awaitLog("transport launch"), reportStarted, awaitLaunch, endOutput, reportLost},
			wantLog: []string{
				"journal process.reserved", "transport launch",
				"report started", "journal process.started",
				"report output end", "report lost", "journal process.exited lost -",
			},
			wantParent: "exited",
			wantResult: wantResult{code: -1, reason: lifecycle.ReasonLost, err: spec.CodeEngine},
		},
		{
			name:          "journal refuses reserved: nothing launched",
			refuse:        "process.reserved",
			steps:         []step{awaitLaunch},
			wantLog:       []string{"journal process.reserved refused"},
			wantLaunchErr: spec.CodeJournal,
		},
		{
			name:   "journal refuses started: abandoned, no signal",
			refuse: "process.started",
			steps:  []step{awaitLog("transport launch"), reportStarted, awaitLaunch},
			wantLog: []string{
				"journal process.reserved", "transport launch",
				"report started", "journal process.started refused",
			},
			wantParent:    "abandoned",
			wantLaunchErr: spec.CodeJournal,
		},
		{
			name:   "journal refuses stopping: no signal, the stop fails",
			refuse: "process.stopping",
			steps:  []step{awaitLog("transport launch"), reportStarted, awaitLaunch, stop(spec.CodeJournal)},
			wantLog: []string{
				"journal process.reserved", "transport launch",
				"report started", "journal process.started",
				"journal process.stopping refused",
			},
			wantParent: "abandoned",
			wantResult: wantResult{code: -1, reason: lifecycle.ReasonFailed, err: spec.CodeJournal},
		},
		{
			name:   "journal refuses exited: not reported done",
			refuse: "process.exited",
			steps:  []step{awaitLog("transport launch"), reportStarted, awaitLaunch, endOutput, reportExit(0)},
			wantLog: []string{
				"journal process.reserved", "transport launch",
				"report started", "journal process.started",
				"report output end", "report exit 0", "journal process.exited refused",
			},
			wantParent: "abandoned",
			wantResult: wantResult{code: -1, reason: lifecycle.ReasonFailed, err: spec.CodeJournal},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			grace := tc.grace
			if grace == 0 {
				grace = time.Hour
			}
			var deadline time.Time
			if tc.deadline {
				deadline = time.Now()
			}
			h := newHarness(t, grace, deadline, tc.refuse)
			for _, s := range tc.steps {
				s(h)
			}
			heard := h.awaitEnd()

			if got := h.log.all(); !slices.Equal(got, tc.wantLog) {
				t.Errorf("log:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tc.wantLog, "\n  "))
			}
			var parent string
			var exited *Exited
			for _, m := range heard {
				switch m := m.(type) {
				case Exited:
					parent, exited = "exited", &m
				case Abandoned:
					parent = "abandoned"
				}
			}
			if parent != tc.wantParent {
				t.Errorf("the parent heard %q, want %q (all: %v)", parent, tc.wantParent, heard)
			}
			if got := spec.CodeOf(h.launch.Err); got != tc.wantLaunchErr || (h.launch.Err == nil) != (h.launch.Handle != nil) {
				t.Fatalf("launch: handle %v, error %v (code %q), want code %q", h.launch.Handle != nil, h.launch.Err, got, tc.wantLaunchErr)
			}
			if h.launch.Handle == nil {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			res, err := h.launch.Handle.Wait(ctx)
			tc.wantResult.check(t, res, err)
			if exited != nil {
				tc.wantResult.check(t, exited.Result, exited.Result.Err)
			}
		})
	}
}

type wantResult struct {
	code   int
	reason lifecycle.Reason
	err    spec.Code // "": no error
}

func (w wantResult) check(t *testing.T, res spec.Result, err error) {
	t.Helper()
	if res.ExitCode != w.code || res.Reason != string(w.reason) || spec.CodeOf(err) != w.err || (err == nil) != (w.err == "") {
		t.Errorf("result: exit %d, reason %q, error %v; want exit %d, reason %q, error code %q", res.ExitCode, res.Reason, err, w.code, w.reason, w.err)
	}
}

// A step is what the test does next, as the transport or the caller.
type step func(h *harness)

func awaitLog(entry string) step { return func(h *harness) { h.log.await(h.t, entry) } }

func reportStarted(h *harness) { h.report("report started", fakeStarted{}) }

func reportExit(code int) step {
	return func(h *harness) { h.report(fmt.Sprintf("report exit %d", code), fakeExit{code: code}) }
}

func reportLost(h *harness) { h.report("report lost", fakeLost{}) }

// endOutput ends the process's output (its attachment reads EOF).
func endOutput(h *harness) {
	h.log.add("report output end")
	close(h.att.eof)
}

// awaitLaunch waits for the launch's answer.
func awaitLaunch(h *harness) {
	select {
	case h.launch = <-h.launched:
	case <-time.After(waitLimit):
		h.t.Fatalf("no launch answer; log %v", h.log.all())
	}
}

// stop stops the process through its handle; want is the code its error
// must carry ("": none).
func stop(want spec.Code) step {
	return func(h *harness) {
		if h.launch.Handle == nil {
			h.t.Fatalf("no handle to stop: %v", h.launch.Err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := h.launch.Handle.Stop(ctx); spec.CodeOf(err) != want || (err == nil) != (want == "") {
			h.t.Fatalf("Stop: %v, want code %q", err, want)
		}
	}
}

// harness is one process actor under a parent that reports what it hears.
type harness struct {
	t        *testing.T
	sys      *actor.ActorSystem
	pid      *actor.PID
	log      *callLog
	att      *fakeAttachment
	launched chan Launch
	launch   Launch
	heard    chan any
	deps     *actors.Deps
}

func newHarness(t *testing.T, grace time.Duration, deadline time.Time, refuse string) *harness {
	h := &harness{
		t:        t,
		log:      newCallLog(),
		att:      &fakeAttachment{eof: make(chan struct{}), closed: make(chan struct{})},
		launched: make(chan Launch, 1),
		heard:    make(chan any, 16),
	}
	d := actors.Deps{Journal: &fakeJournal{log: h.log, refuse: refuse}, Config: actors.Config{StopGrace: grace}}.WithDefaults()
	h.deps = &d
	p := Params{
		ID:       "p1",
		Sandbox:  dockerio.Sandbox{ID: "s1"},
		Deadline: deadline,
		Launched: h.launched,
		testTransport: func(a *processActor) transport {
			return &fakeTransport{a: a, log: h.log, att: h.att}
		},
	}
	h.sys = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	pids := make(chan *actor.PID, 1)
	parent := actor.PropsFromFunc(func(ctx actor.Context) {
		switch m := ctx.Message().(type) {
		case *actor.Started:
			pids <- ctx.Spawn(Props(h.deps, p))
		case Exited, Abandoned:
			h.heard <- m
		case *actor.Terminated:
			// A system message, so it may overtake what the child sent
			// before it stopped: a message to itself queues behind that.
			ctx.Send(ctx.Self(), childEnded{})
		case childEnded:
			h.heard <- m
		}
	})
	h.sys.Root.Spawn(parent)
	h.pid = <-pids
	t.Cleanup(func() {
		h.sys.Root.Stop(h.pid) // a test that failed midway leaves it running
		loops := make(chan struct{})
		go func() {
			h.deps.Loops.Wait()
			close(loops)
		}()
		select {
		case <-loops:
		case <-time.After(waitLimit):
			t.Errorf("the output read loop did not end")
		}
		h.sys.Shutdown()
	})
	return h
}

// report posts msg to the actor as its transport would, after logging
// entry: whatever the actor journals because of it comes after it in the
// log.
func (h *harness) report(entry string, msg any) {
	h.log.add(entry)
	h.sys.Root.Send(h.pid, msg)
}

// childEnded marks, in the parent's mailbox, the end of the process
// actor, after all it sent.
type childEnded struct{}

// awaitEnd waits for the actor to stop and returns what its parent heard
// (childEnded last).
func (h *harness) awaitEnd() []any {
	var heard []any
	for {
		select {
		case m := <-h.heard:
			heard = append(heard, m)
			if _, ok := m.(childEnded); ok {
				return heard
			}
		case <-time.After(waitLimit):
			h.t.Fatalf("the process actor did not end; the parent heard %v; log %v", heard, h.log.all())
		}
	}
}

// callLog is the ordered record of the journal's appends, the transport's
// calls and the test's reports; await reads it as it grows.
type callLog struct {
	mu      sync.Mutex
	entries []string
	grew    chan struct{} // closed and replaced at each add
	read    int           // entries await has gone past
}

func newCallLog() *callLog { return &callLog{grew: make(chan struct{})} }

func (l *callLog) add(e string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, e)
	close(l.grew)
	l.grew = make(chan struct{})
}

func (l *callLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.entries)
}

// await waits until entry is logged after the entries an earlier await
// went past.
func (l *callLog) await(t *testing.T, entry string) {
	t.Helper()
	timeout := time.After(waitLimit)
	for {
		l.mu.Lock()
		for ; l.read < len(l.entries); l.read++ {
			if l.entries[l.read] == entry {
				l.read++
				l.mu.Unlock()
				return
			}
		}
		grew := l.grew
		l.mu.Unlock()
		select {
		case <-grew:
		case <-timeout:
			t.Fatalf("%q never logged; log %v", entry, l.all())
		}
	}
}

// fakeJournal keeps each stream in memory (sequenced appends as the
// journal checks them) and logs every append; it refuses those of type
// refuse.
type fakeJournal struct {
	log    *callLog
	refuse string
	mu     sync.Mutex
	events map[journal.Key][]journal.Event
}

var _ actors.Journal = (*fakeJournal)(nil)

func (j *fakeJournal) Append(_ context.Context, recs ...journal.Record) ([]journal.Event, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.events == nil {
		j.events = map[journal.Key][]journal.Event{}
	}
	var out []journal.Event
	for _, r := range recs {
		if r.Type == j.refuse {
			j.log.add("journal " + r.Type + " refused")
			return nil, spec.Errorf(spec.CodeJournal, "journal.append", "the disk is full")
		}
		stream := j.events[r.Key]
		if r.Sequenced && r.After != uint64(len(stream)) {
			return nil, spec.Wrap(spec.CodeConflict, "journal.append", journal.ErrSequence, "stream %v is at %d, not %d", r.Key, len(stream), r.After)
		}
		e := journal.Event{Key: r.Key, Seq: uint64(len(stream)) + 1, Type: r.Type, Time: time.Now().UTC(), Payload: r.Payload, Terminal: r.Terminal}
		j.events[r.Key] = append(stream, e)
		j.log.add("journal " + describe(r.Type, r.Payload))
		out = append(out, e)
	}
	return out, nil
}

func (j *fakeJournal) Read(key journal.Key, from, to uint64, fn func(journal.Event) error) error {
	j.mu.Lock()
	stream := slices.Clone(j.events[key])
	j.mu.Unlock()
	for _, e := range stream {
		if e.Seq >= from && (to == 0 || e.Seq <= to) {
			if err := fn(e); err != nil {
				return err
			}
		}
	}
	return nil
}

// describe names an event as the log shows it: a stop with its reason, an
// exit with its reason and code ("-": none).
func describe(typ string, payload []byte) string {
	ev, err := lifecycle.Decode(typ, payload)
	if err != nil {
		return typ + " (undecodable: " + err.Error() + ")"
	}
	switch e := ev.(type) {
	case lifecycle.ProcessStopping:
		return fmt.Sprintf("%s %s", typ, e.Reason)
	case lifecycle.ProcessExited:
		code := "-"
		if e.ExitCode != nil {
			code = fmt.Sprint(*e.ExitCode)
		}
		return fmt.Sprintf("%s %s %s", typ, e.Reason, code)
	}
	return typ
}

// What the test reports as the transport, through the actor's mailbox.
type (
	fakeStarted struct{}
	fakeExit    struct{ code int }
	fakeLost    struct{}
)

// fakeTransport logs the lifecycle's calls and turns the test's reports
// into what a transport tells its actor: the attachment of a running
// process, its end, or an end nobody can tell.
type fakeTransport struct {
	a   *processActor
	log *callLog
	att *fakeAttachment
}

var _ transport = (*fakeTransport)(nil)

func (f *fakeTransport) launch()  { f.log.add("transport launch") }
func (f *fakeTransport) proceed() {}
func (f *fakeTransport) adopt()   {}

func (f *fakeTransport) receive(ctx actor.Context, msg any) {
	a := f.a
	switch m := msg.(type) {
	case fakeStarted:
		a.running(ctx, f.att, lifecycle.ProcessStarted{ByWarden: true, PID: fakeGroup})
	case fakeExit:
		a.exit.state = &dockerio.ExecState{Known: true, Pid: fakeGroup, ExitCode: m.code}
		a.maybeFinish()
	case fakeLost:
		a.exit.state = &dockerio.ExecState{Known: false}
		a.maybeFinish()
	}
}

func (f *fakeTransport) signal(sig syscall.Signal, reply chan<- error) {
	name := map[syscall.Signal]string{syscall.SIGTERM: "TERM", syscall.SIGKILL: "KILL"}[sig]
	if name == "" {
		name = fmt.Sprint(int(sig))
	}
	f.log.add("transport signal " + name)
	if reply != nil {
		f.a.send(signalled{reply: reply})
	}
}

func (f *fakeTransport) killed(gen int) { f.log.add(fmt.Sprintf("transport killed %d", gen)) }

func (f *fakeTransport) awaitExit()                       {}
func (f *fakeTransport) resize(m Resize)                  { m.Reply <- f.a.notRunning() }
func (f *fakeTransport) closing(error) bool               { return false }
func (f *fakeTransport) streamFailed(err error)           { f.a.fail(err) }
func (f *fakeTransport) exitHeld() bool                   { return false }
func (f *fakeTransport) startFailure(int, []byte) error   { return nil }
func (f *fakeTransport) exiting(*lifecycle.ProcessExited) {}
func (f *fakeTransport) exited()                          {}

const fakeGroup = 4242

// fakeAttachment is a running process's output: nothing until eof is
// closed (a clean end), or an error once closed.
type fakeAttachment struct {
	eof, closed chan struct{}
	once        sync.Once
}

var errAttachmentClosed = errors.New("the attachment was closed")

func (f *fakeAttachment) Next() (framing.StreamID, []byte, error) {
	select { // the end the test reported wins over a close of ours
	case <-f.eof:
		return 0, nil, io.EOF
	default:
	}
	select {
	case <-f.eof:
		return 0, nil, io.EOF
	case <-f.closed:
		return 0, nil, errAttachmentClosed
	}
}

func (f *fakeAttachment) Stdin() io.Writer  { return nil }
func (f *fakeAttachment) CloseStdin() error { return nil }
func (f *fakeAttachment) Group() int        { return fakeGroup }
func (f *fakeAttachment) OOMKills() int64   { return 0 }

func (f *fakeAttachment) Close() error {
	f.once.Do(func() { close(f.closed) })
	return nil
}
