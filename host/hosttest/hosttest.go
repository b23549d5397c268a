// Package hosttest is the conformance suite of host.Runtime: what every way
// of reaching a runtime (embedded, Runtime.Host; served, the client) must
// do, and do identically. Run is given the ways, all reaching one runtime,
// and runs each case through every way: results, errors (codes and
// messages, word for word), validation and ordering must be the same, and a
// case fails on the first difference, naming both answers.
//
// The suite runs against the Fake (server's unit tests; Script models the
// commands it runs) and against a real daemon (test/serve: the sandbox
// image's busybox runs them). Every sandbox a case makes it removes, pass
// or fail.
package hosttest

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/spec"
)

// Way is one way of reaching the runtime under test.
type Way struct {
	Name    string
	Runtime host.Runtime
}

// Target is what Run needs: the ways (at least two, one runtime behind
// them) and an image they can make sandboxes of.
type Target struct {
	Ways  []Way
	Image string
	// TracksChanges: the engine tracks what processes change (a real
	// warden; the Fake's scripted processes change nothing).
	TracksChanges bool
	// Doctor: every way's Doctor asks the same daemon (a real one; the
	// server's tests give their Fake runtime's server a doctor of its own).
	Doctor bool
	// RunsCommands: the sandboxes run real programs (rm and mv, which
	// Files' Remove and Rename run); the Fake's are scripted.
	RunsCommands bool
}

// The commands the suite runs. A real sandbox image runs them with its
// shell; Script models them for the Fake.
var (
	// gated writes "early\n" to stdout and "err\n" to stderr, waits for
	// its stdin to end, then writes "late\n" and exits 3.
	gated = []string{"/bin/sh", "-c", "echo early; echo err >&2; cat >/dev/null; echo late; exit 3"}
	// hello writes "hello\n".
	hello = []string{"echo", "hello"}
	// echoSecret prints a secret variable and a plain one.
	echoSecret = []string{"/bin/sh", "-c", `echo "$TOKEN $MODE"`}
	// writer makes /workspace/work/note.txt.
	writer = []string{"/bin/sh", "-c", "echo noted > /workspace/work/note.txt"}
)

// Script is a dockerio.Fake Script that models the suite's commands; any
// other command exits 0 with no output.
func Script(_ dockerio.Sandbox, req dockerio.ExecRequest) dockerio.FakeRun {
	switch strings.Join(req.Spec.Argv, " ") {
	case strings.Join(gated, " "):
		return dockerio.FakeRun{
			Frames:   []dockerio.FakeFrame{{Stream: framing.Stdout, Data: []byte("early\n")}, {Stream: framing.Stderr, Data: []byte("err\n")}},
			After:    []dockerio.FakeFrame{{Stream: framing.Stdout, Data: []byte("late\n")}},
			ExitCode: 3,
		}
	case strings.Join(hello, " "):
		return dockerio.FakeRun{Frames: []dockerio.FakeFrame{{Stream: framing.Stdout, Data: []byte("hello\n")}}}
	case strings.Join(echoSecret, " "):
		// As the shell would: the variables from the process's env.
		vars := map[string]string{}
		for _, e := range req.Spec.Env {
			k, v, _ := strings.Cut(e, "=")
			if _, set := vars[k]; !set {
				vars[k] = v
			}
		}
		return dockerio.FakeRun{Frames: []dockerio.FakeFrame{{Stream: framing.Stdout, Data: []byte(vars["TOKEN"] + " " + vars["MODE"] + "\n")}}}
	}
	return dockerio.FakeRun{}
}

// Run runs every case through every way of tg.
func Run(t *testing.T, tg Target) {
	if len(tg.Ways) < 2 {
		t.Fatalf("hosttest: %d ways given; the suite compares at least two", len(tg.Ways))
	}
	for _, c := range []struct {
		name string
		run  func(*testing.T, Target)
	}{
		{"Refusals", refusals},
		{"Exec", execCase},
		{"Attach", attachCase},
		{"Changes", changesCase},
		{"Doctor", doctorCase},
		{"Files", filesCase},
		{"Secrets", secretsCase},
		{"Usage", usageCase},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, tg) })
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// same fails t unless every way's answer is the same; it returns it.
func same(t *testing.T, what string, ways []Way, answers []string) string {
	t.Helper()
	for i := 1; i < len(answers); i++ {
		if answers[i] != answers[0] {
			t.Fatalf("%s differs:\n%s: %s\n%s: %s", what, ways[0].Name, answers[0], ways[i].Name, answers[i])
		}
	}
	return answers[0]
}

// errText is an error as compared: its code and message.
func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return string(spec.CodeOf(err)) + ": " + err.Error()
}

// sandbox makes a sandbox through rt, removed when the test ends.
func sandbox(t *testing.T, rt host.Runtime, image string) host.Sandbox {
	t.Helper()
	sb, err := rt.CreateSandbox(ctxFor(t), spec.Sandbox{Image: image})
	if err != nil {
		t.Fatalf("creating a sandbox: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sb.Remove(ctx); err != nil && !spec.IsCode(err, spec.CodeNotFound) {
			t.Errorf("removing sandbox %s: %v", sb.ID(), err)
		}
	})
	return sb
}

// created is CreateSandbox's error; a sandbox it made (a refusal that
// failed) is removed.
func created(ctx context.Context, rt host.Runtime, s spec.Sandbox) error {
	sb, err := rt.CreateSandbox(ctx, s)
	if sb != nil {
		_ = sb.Remove(ctx) // the test fails on the nil error anyway
	}
	return err
}

// refusals: the same bad inputs are refused with the same code and words.
func refusals(t *testing.T, tg Target) {
	ctx := ctxFor(t)
	sbs := make([]host.Sandbox, len(tg.Ways))
	gone := make([]string, len(tg.Ways)) // a sandbox removed, by way
	for i, w := range tg.Ways {
		sbs[i] = sandbox(t, w.Runtime, tg.Image)
		g, err := w.Runtime.CreateSandbox(ctx, spec.Sandbox{Image: tg.Image})
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Remove(ctx); err != nil {
			t.Fatal(err)
		}
		gone[i] = g.ID()
	}
	cases := []struct {
		name string
		do   func(i int, rt host.Runtime) error
		code spec.Code
	}{
		{"an image reference in upper case", func(_ int, rt host.Runtime) error {
			return created(ctx, rt, spec.Sandbox{Image: "Busybox:Latest"})
		}, spec.CodeInvalidArgument},
		{"an egress rule that is a URL", func(_ int, rt host.Runtime) error {
			return created(ctx, rt, spec.Sandbox{Image: tg.Image, Policy: spec.Policy{Network: spec.NetworkAllowlist, Egress: []spec.EgressRule{{Host: "https://example.com"}}}})
		}, spec.CodeInvalidArgument},
		{"an unknown sandbox", func(_ int, rt host.Runtime) error {
			_, err := rt.Sandbox(ctx, "sb-nosuchsandbox")
			return err
		}, spec.CodeNotFound},
		{"a removed sandbox", func(i int, rt host.Runtime) error {
			_, err := rt.Sandbox(ctx, gone[i])
			return err
		}, spec.CodeNotFound},
		{"an unknown process", func(_ int, rt host.Runtime) error {
			_, err := rt.Process(ctx, "nosuchprocess")
			return err
		}, spec.CodeNotFound},
		{"the logs of an unknown process", func(_ int, rt host.Runtime) error {
			_, err := rt.Logs(ctx, "nosuchprocess", func(host.OutputChunk) error { return nil })
			return err
		}, spec.CodeNotFound},
		{"an empty argv", func(i int, _ host.Runtime) error {
			_, err := sbs[i].Start(ctx, spec.Process{})
			return err
		}, spec.CodeInvalidArgument},
		{"a stream mode that is not one", func(i int, _ host.Runtime) error {
			_, err := sbs[i].Start(ctx, spec.Process{Argv: hello, Stdout: "tty"})
			return err
		}, spec.CodeInvalidArgument},
		{"a relative working directory that leaves the workspace", func(i int, _ host.Runtime) error {
			_, err := sbs[i].Start(ctx, spec.Process{Argv: hello, Dir: "../etc"})
			return err
		}, spec.CodeInvalidArgument},
		{"a put that leaves the workspace", func(i int, _ host.Runtime) error {
			return sbs[i].Put(ctx, "../etc", bytes.NewReader(nil))
		}, spec.CodeInvalidArgument},
		{"a put into a directory that does not exist", func(i int, _ host.Runtime) error {
			return sbs[i].Put(ctx, "work/missing", bytes.NewReader(emptyTar()))
		}, spec.CodeNotFound},
		{"a get of nothing", func(i int, _ host.Runtime) error {
			_, _, err := sbs[i].Get(ctx, "work/missing", false)
			return err
		}, spec.CodeNotFound},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var answers []string
			for i, w := range tg.Ways {
				err := c.do(i, w.Runtime)
				if !spec.IsCode(err, c.code) {
					t.Fatalf("%s: %v, want %s", w.Name, err, c.code)
				}
				if strings.Contains(err.Error(), "container") {
					t.Fatalf("%s: %v: the words name Docker's containers, not what the caller gave", w.Name, err)
				}
				// Sandbox ids differ between the ways' sandboxes.
				answers = append(answers, strings.ReplaceAll(strings.ReplaceAll(errText(err), sbs[i].ID(), "SANDBOX"), gone[i], "GONE"))
			}
			same(t, c.name, tg.Ways, answers)
		})
	}
}

// execCase: a process started through each way gives the same output and
// result.
func execCase(t *testing.T, tg Target) {
	ctx := ctxFor(t)
	var answers []string
	for _, w := range tg.Ways {
		sb := sandbox(t, w.Runtime, tg.Image)
		p, err := sb.Start(ctx, spec.Process{Argv: hello})
		if err != nil {
			t.Fatalf("%s: %v", w.Name, err)
		}
		var out, errb bytes.Buffer
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = errb.ReadFrom(p.Stderr())
		}()
		_, rerr := out.ReadFrom(p.Stdout())
		wg.Wait()
		res, err := p.Wait(ctx)
		answers = append(answers, fmt.Sprintf("stdout %q (%v) stderr %q exit %d %s bytes %d/%d err %s",
			out.String(), rerr, errb.String(), res.ExitCode, res.Reason, res.StdoutBytes, res.StderrBytes, errText(err)))
	}
	got := same(t, "a process's output and result", tg.Ways, answers)
	if !strings.HasPrefix(got, `stdout "hello\n" (<nil>) stderr "" exit 0 exited bytes 6/0`) {
		t.Fatalf("got %s", got)
	}
}

// secretsCase: a sandbox's secret variable reaches its processes, its
// state shows the name and ref only, and SetSecrets refuses and takes
// values the same way everywhere.
func secretsCase(t *testing.T, tg Target) {
	ctx := ctxFor(t)
	const value = "s3cret-conformance"
	var answers []string
	for _, w := range tg.Ways {
		sb, err := w.Runtime.CreateSandbox(ctx, spec.Sandbox{Image: tg.Image, Env: []string{"MODE=fast"},
			Secrets: []spec.SecretVar{{Name: "TOKEN", Ref: "secret ns/creds key token", Value: value}}})
		if err != nil {
			t.Fatalf("%s: %v", w.Name, err)
		}
		t.Cleanup(func() { _ = sb.Remove(context.Background()) })
		run := func() string {
			p, err := sb.Start(ctx, spec.Process{Argv: echoSecret, Stderr: spec.Discard})
			if err != nil {
				return errText(err)
			}
			out, _ := io.ReadAll(p.Stdout())
			_, _ = p.Wait(ctx)
			return string(out)
		}
		first := run()
		st, err := sb.State(ctx)
		if err != nil {
			t.Fatalf("%s: %v", w.Name, err)
		}
		refused := errText(sb.SetSecrets(ctx, []spec.SecretVar{{Name: "OTHER", Value: "x"}}))
		given := errText(sb.SetSecrets(ctx, []spec.SecretVar{{Name: "TOKEN", Value: "again"}}))
		answers = append(answers, strings.ReplaceAll(fmt.Sprintf("first %q state %+v refused %s given %s then %q", first, st.Spec.Secrets, refused, given, run()), sb.ID(), "SANDBOX"))
	}
	got := same(t, "secret variables", tg.Ways, answers)
	want := `first "s3cret-conformance fast\n" state [TOKEN (secret ns/creds key token)] refused invalid_argument: `
	if !strings.HasPrefix(got, want) || !strings.HasSuffix(got, `given <nil> then "again fast\n"`) {
		t.Fatalf("got %s\nwant it to begin %s and end with the value given again", got, want)
	}
}

// chunkText is a chunk as compared.
func chunkText(c host.OutputChunk) string {
	if c.Stream == "" {
		return fmt.Sprintf("gap@%d+%d", c.Offset, c.Gap)
	}
	return fmt.Sprintf("%s@%d:%q", c.Stream, c.Offset, c.Data)
}

// attachCase: one process, found by id through every way, attached to
// while it runs (recorded bytes, then live ones, then the end) and after it
// ended, from the start and from inside a chunk: the same chunks, offsets
// and end everywhere, every byte once.
func attachCase(t *testing.T, tg Target) {
	ctx := ctxFor(t)
	owner := tg.Ways[0].Runtime
	sb := sandbox(t, owner, tg.Image)
	p, err := sb.Start(ctx, spec.Process{Argv: gated, Stdin: true, Stdout: spec.Discard, Stderr: spec.Discard})
	if err != nil {
		t.Fatal(err)
	}
	type attached struct {
		chunks []string
		early  chan struct{}
		end    string
	}
	live := make([]*attached, len(tg.Ways))
	var wg sync.WaitGroup
	for i, w := range tg.Ways {
		a := &attached{early: make(chan struct{})}
		live[i] = a
		found, err := w.Runtime.Process(ctx, p.ID())
		if err != nil {
			t.Fatalf("%s: %v", w.Name, err)
		}
		if found.Stdout() != nil || found.Stderr() != nil || found.Stdin() != nil {
			t.Fatalf("%s: a process found by id has streams: they are its starter's", w.Name)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var once sync.Once
			seen := 0
			end, err := found.Attach(ctx, host.AttachOptions{}, func(c host.OutputChunk) error {
				a.chunks = append(a.chunks, chunkText(c))
				if seen += len(c.Data); seen >= len("early\nerr\n") {
					once.Do(func() { close(a.early) })
				}
				return nil
			})
			once.Do(func() { close(a.early) })
			a.end = fmt.Sprintf("%+v exit %d %s err %s", end.Output, end.Result.ExitCode, end.Result.Reason, errText(err))
		}()
	}
	// Every way has the recorded part before the process goes on: what
	// follows is live.
	for _, a := range live {
		select {
		case <-a.early:
		case <-ctx.Done():
			t.Fatal("an attach never saw the first output")
		}
	}
	if err := p.Stdin().Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	var answers []string
	for _, a := range live {
		answers = append(answers, strings.Join(a.chunks, " ")+" | "+a.end)
	}
	got := same(t, "a live attach", tg.Ways, answers)
	// early and err come in either order (a warden reads the two pipes
	// apart); late comes after both.
	for _, want := range []string{`:"early\n"`, `stderr@`, `:"err\n"`, `stdout@10:"late\n"`, "Complete:true", "StdoutBytes:11 StderrBytes:4", "Recorded:15", "exit 3 exited err <nil>"} {
		if !strings.Contains(got, want) {
			t.Fatalf("live attach: %s\nwant %s in it", got, want)
		}
	}

	// The caller's deadline ends an attach the same way everywhere:
	// cancelled, with the context's error, never a process's timeout.
	for _, w := range tg.Ways {
		found, err := w.Runtime.Process(ctx, p.ID())
		if err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, time.Millisecond)
		<-short.Done()
		_, err = found.Attach(short, host.AttachOptions{}, func(host.OutputChunk) error { return nil })
		cancel()
		if !spec.IsCode(err, spec.CodeCancelled) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: an attach past its deadline: %v, want cancelled with context.DeadlineExceeded", w.Name, err)
		}
	}

	// Ended: from the start, from inside the first chunk, at the end and
	// past it.
	for _, from := range []int64{0, 3, 15, 40} {
		var answers []string
		for _, w := range tg.Ways {
			found, err := w.Runtime.Process(ctx, p.ID())
			if err != nil {
				t.Fatalf("%s: %v", w.Name, err)
			}
			var chunks []string
			var data bytes.Buffer
			end, err := found.Attach(ctx, host.AttachOptions{From: from}, func(c host.OutputChunk) error {
				chunks = append(chunks, chunkText(c))
				data.Write(c.Data)
				return nil
			})
			if want := max(0, 15-from); int64(data.Len()) != want {
				t.Fatalf("%s: attach from %d handed out %d bytes, want %d", w.Name, from, data.Len(), want)
			}
			answers = append(answers, strings.Join(chunks, " ")+fmt.Sprintf(" | %+v exit %d %s err %s", end.Output, end.Result.ExitCode, end.Result.Reason, errText(err)))
		}
		same(t, fmt.Sprintf("an attach from %d after the end", from), tg.Ways, answers)
	}

	// Refused the same way: a negative offset, an unknown process, a
	// process recorded with recording off.
	off, err := sb.Start(ctx, spec.Process{Argv: hello, Stdout: spec.Discard, Stderr: spec.Discard, Record: spec.Record{Off: true}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id   string
		from int64
		code spec.Code
	}{{p.ID(), -1, spec.CodeInvalidArgument}, {off.ID(), 0, spec.CodeUnsupported}} {
		var answers []string
		for _, w := range tg.Ways {
			found, err := w.Runtime.Process(ctx, c.id)
			if err != nil {
				t.Fatalf("%s: %v", w.Name, err)
			}
			_, err = found.Attach(ctx, host.AttachOptions{From: c.from}, func(host.OutputChunk) error { return nil })
			if !spec.IsCode(err, c.code) {
				t.Fatalf("%s: attach to %s from %d: %v, want %s", w.Name, c.id, c.from, err, c.code)
			}
			answers = append(answers, errText(err))
		}
		same(t, "an attach refused", tg.Ways, answers)
	}
	stop := errors.New("enough")
	for _, w := range tg.Ways {
		found, _ := w.Runtime.Process(ctx, p.ID())
		if _, err := found.Attach(ctx, host.AttachOptions{}, func(host.OutputChunk) error { return stop }); err == nil || !strings.Contains(err.Error(), "enough") {
			t.Fatalf("%s: an attach whose fn fails: %v, want fn's error", w.Name, err)
		}
	}
}

// changesCase: a process's changes, asked through every way, are the same
// typed list and diffs; asked of a running process, the same conflict.
func changesCase(t *testing.T, tg Target) {
	ctx := ctxFor(t)
	sb := sandbox(t, tg.Ways[0].Runtime, tg.Image)
	w, err := sb.Start(ctx, spec.Process{Argv: writer, Stdout: spec.Discard, Stderr: spec.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := w.Wait(ctx); err != nil || res.ExitCode != 0 {
		t.Fatalf("the writer: %+v %v", res, err)
	}
	held, err := sb.Start(ctx, spec.Process{Argv: gated, Stdin: true, Stdout: spec.Discard, Stderr: spec.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Stdin().Close() }()
	var answers, refusals, unknown []string
	for _, way := range tg.Ways {
		d, err := way.Runtime.Changes(ctx, w.ID())
		if err != nil {
			t.Fatalf("%s: %v", way.Name, err)
		}
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		answers = append(answers, string(b))
		_, err = way.Runtime.Changes(ctx, held.ID())
		if !spec.IsCode(err, spec.CodeConflict) {
			t.Fatalf("%s: the changes of a running process: %v, want conflict", way.Name, err)
		}
		refusals = append(refusals, errText(err))
		_, err = way.Runtime.Changes(ctx, "nosuchprocess")
		if !spec.IsCode(err, spec.CodeNotFound) {
			t.Fatalf("%s: the changes of an unknown process: %v, want not_found", way.Name, err)
		}
		unknown = append(unknown, errText(err))
	}
	got := same(t, "a process's changes", tg.Ways, answers)
	same(t, "the changes of a running process", tg.Ways, refusals)
	same(t, "the changes of an unknown process", tg.Ways, unknown)
	if tg.TracksChanges {
		d, _ := tg.Ways[0].Runtime.Changes(ctx, w.ID())
		if d.Changes == nil || d.Changes.Created != 1 || len(d.Diffs) != 1 || !strings.Contains(d.Diffs[0].Unified, "+noted") {
			t.Fatalf("the writer's changes: %s; want note.txt created, with its diff", got)
		}
	}
}

// doctorCase: the same checks of the same daemon, every way.
func doctorCase(t *testing.T, tg Target) {
	if !tg.Doctor {
		t.Skip("the ways' doctors ask different daemons here (see Target.Doctor)")
	}
	ctx := ctxFor(t)
	var answers []string
	for _, w := range tg.Ways {
		rep, err := w.Runtime.Doctor(ctx)
		if err != nil {
			t.Fatalf("%s: %v", w.Name, err)
		}
		b, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		answers = append(answers, string(b))
	}
	same(t, "the doctor's report", tg.Ways, answers)
}

// filesCase: Files through every way: a write into directories that do
// not exist, reads, lists, stats, directories, renames and removals, and
// the refusals, with the same answers (times and ids aside).
func filesCase(t *testing.T, tg Target) {
	ctx := ctxFor(t)
	var answers []string
	for _, w := range tg.Ways {
		sb := sandbox(t, w.Runtime, tg.Image)
		fs := sb.Files()
		var log strings.Builder
		say := func(what string, v any, err error) {
			if fi, ok := v.(host.FileInfo); ok {
				fi.ModTime = time.Time{}
				v = fi
			}
			if l, ok := v.(host.Listing); ok {
				for i := range l.Entries {
					l.Entries[i].ModTime = time.Time{}
				}
				v = l
			}
			fmt.Fprintf(&log, "%s: %+v %s\n", what, v, strings.ReplaceAll(errText(err), sb.ID(), "SANDBOX"))
		}
		mustCode := func(what string, err error, code spec.Code) {
			if !spec.IsCode(err, code) {
				t.Fatalf("%s: %s: %v, want %s", w.Name, what, err, code)
			}
			say(what, nil, err)
		}
		if err := fs.WriteFile(ctx, "work/a/b/c.txt", []byte("hello\n"), 0o640); err != nil {
			t.Fatalf("%s: a write into directories that do not exist: %v", w.Name, err)
		}
		st, err := fs.Stat(ctx, "/workspace/work/a/b/c.txt")
		if err != nil || st.Kind != "file" || st.Size != 6 || st.Mode != 0o640 || st.Path != "/workspace/work/a/b/c.txt" {
			t.Fatalf("%s: stat of the file written: %+v %v", w.Name, st, err)
		}
		say("stat", st, err)
		rc, fi, err := fs.Read(ctx, "work/a/b/c.txt")
		if err != nil {
			t.Fatalf("%s: read: %v", w.Name, err)
		}
		body, rerr := io.ReadAll(rc)
		_ = rc.Close()
		if rerr != nil || string(body) != "hello\n" {
			t.Fatalf("%s: read back %q %v", w.Name, body, rerr)
		}
		say("read "+string(body), fi, nil)
		l, err := fs.List(ctx, "work/a")
		if err != nil || len(l.Entries) != 1 || l.Entries[0].Name != "b" || l.Entries[0].Kind != "dir" {
			t.Fatalf("%s: list of work/a: %+v %v", w.Name, l, err)
		}
		say("list", l, err)
		if err := fs.MkdirAll(ctx, "work/x/y", 0); err != nil {
			t.Fatalf("%s: mkdir: %v", w.Name, err)
		}
		if err := fs.MkdirAll(ctx, "work/x/y", 0); err != nil {
			t.Fatalf("%s: mkdir of one that exists: %v", w.Name, err)
		}
		st, err = fs.Stat(ctx, "work/x/y")
		if err != nil || st.Kind != "dir" {
			t.Fatalf("%s: stat of the directory made: %+v %v", w.Name, st, err)
		}
		say("stat", st, err)
		mustCode("a file over a directory", fs.WriteFile(ctx, "work/x", []byte("no"), 0), spec.CodeInvalidArgument)
		_, _, err = fs.Read(ctx, "work/a")
		mustCode("a read of a directory", err, spec.CodeInvalidArgument)
		_, err = fs.Stat(ctx, "work/nothing")
		mustCode("a stat of nothing", err, spec.CodeNotFound)
		_, err = fs.List(ctx, "work/a/b/c.txt")
		mustCode("a list of a file", err, spec.CodeInvalidArgument)
		mustCode("a write that leaves the workspace", fs.WriteFile(ctx, "../etc/passwd", nil, 0), spec.CodeInvalidArgument)
		mustCode("a write of the runtime's directory", fs.WriteFile(ctx, "/workspace/.stockade/x", nil, 0), spec.CodeInvalidArgument)
		mustCode("a write under a file", fs.WriteFile(ctx, "work/a/b/c.txt/d", nil, 0), spec.CodeInvalidArgument)
		mustCode("a short write", fs.Write(ctx, "work/short", strings.NewReader("abc"), 10, 0), spec.CodeInvalidArgument)
		mustCode("a removal of nothing", fs.Remove(ctx, "work/nothing"), spec.CodeNotFound)
		mustCode("a rename onto a file", fs.Rename(ctx, "work/a", "work/a/b/c.txt"), spec.CodeConflict)
		if tg.RunsCommands {
			if err := fs.Rename(ctx, "work/a/b/c.txt", "/workspace/work/x/y/d.txt"); err != nil {
				t.Fatalf("%s: rename: %v", w.Name, err)
			}
			_, err = fs.Stat(ctx, "work/a/b/c.txt")
			mustCode("a stat of what was renamed", err, spec.CodeNotFound)
			st, err = fs.Stat(ctx, "work/x/y/d.txt")
			if err != nil || st.Size != 6 {
				t.Fatalf("%s: stat of the renamed file: %+v %v", w.Name, st, err)
			}
			if err := fs.Remove(ctx, "work/x"); err != nil {
				t.Fatalf("%s: remove: %v", w.Name, err)
			}
			_, err = fs.Stat(ctx, "work/x/y/d.txt")
			mustCode("a stat of what was removed", err, spec.CodeNotFound)
		}
		answers = append(answers, log.String())
	}
	same(t, "files", tg.Ways, answers)
}

// emptyTar is an archive of nothing.
func emptyTar() []byte {
	var b bytes.Buffer
	_ = tar.NewWriter(&b).Close() // into a buffer: no error
	return b.Bytes()
}

// fileTar is a tar of one regular file.
func fileTar(name, content string) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	_ = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}) // into a buffer: no error
	_, _ = tw.Write([]byte(content))
	_ = tw.Close()
	return b.Bytes()
}

// usageCase: a labelled sandbox that ran two processes and stopped has the
// same ledger through every way: by label and by id, each process's use as
// its result gave it, the output counted, the workload's last reading taken
// at the stop, its workspace measured when asked; an unknown sandbox is
// refused alike.
func usageCase(t *testing.T, tg Target) {
	ctx := ctxFor(t)
	var answers []string
	for i, w := range tg.Ways {
		batch := fmt.Sprintf("usage-%d-%d", time.Now().UnixNano(), i)
		sb, err := w.Runtime.CreateSandbox(ctx, spec.Sandbox{Image: tg.Image, Labels: map[string]string{"batch": batch}})
		if err != nil {
			t.Fatalf("%s: %v", w.Name, err)
		}
		t.Cleanup(func() { _ = sb.Remove(context.Background()) })
		var results []spec.Result
		for range 2 {
			p, err := sb.Start(ctx, spec.Process{Argv: hello, Stderr: spec.Discard})
			if err != nil {
				t.Fatalf("%s: %v", w.Name, err)
			}
			_, _ = io.Copy(io.Discard, p.Stdout())
			res, err := p.Wait(ctx)
			if err != nil || res.Usage == nil || res.Usage.Wall <= 0 {
				t.Fatalf("%s: the result gives no usage: %+v, %v", w.Name, res.Usage, err)
			}
			results = append(results, res)
		}
		if err := sb.Put(ctx, "work", bytes.NewReader(fileTar("ledger.txt", "twelve bytes"))); err != nil {
			t.Fatalf("%s: %v", w.Name, err)
		}
		if err := sb.Stop(ctx); err != nil {
			t.Fatalf("%s: %v", w.Name, err)
		}
		measured, err := w.Runtime.Usage(ctx, host.UsageQuery{Sandbox: sb.ID(), Workspace: true})
		if err != nil || len(measured.Sandboxes) != 1 || measured.Sandboxes[0].Workspace == nil {
			t.Fatalf("%s: the workspace measured: %+v %v", w.Name, measured, err)
		}
		space := measured.Sandboxes[0].Workspace
		u, err := w.Runtime.Usage(ctx, host.UsageQuery{Labels: map[string]string{"batch": batch}})
		if err != nil {
			t.Fatalf("%s: %v", w.Name, err)
		}
		byID, err := w.Runtime.Usage(ctx, host.UsageQuery{Sandbox: sb.ID()})
		if err != nil {
			t.Fatalf("%s: %v", w.Name, err)
		}
		if len(u.Sandboxes) != 1 || len(byID.Sandboxes) != 1 || u.Sandboxes[0].ID != sb.ID() || byID.Sandboxes[0].Workload != u.Sandboxes[0].Workload {
			t.Fatalf("%s: by label %+v, by id %+v: want the one sandbox, alike", w.Name, u.Sandboxes, byID.Sandboxes)
		}
		s := u.Sandboxes[0]
		var procs []string
		for j, p := range s.Processes {
			if p.Usage == nil || *p.Usage != *results[0].Usage && *p.Usage != *results[1].Usage {
				t.Errorf("%s: process %s's journaled usage %+v is neither result's (%+v, %+v)", w.Name, p.ID, p.Usage, results[0].Usage, results[1].Usage)
			}
			procs = append(procs, fmt.Sprintf("%d %s %s output %d source %s", j, strings.Join(p.Argv, " "), p.Reason, p.Output, p.Usage.Source))
		}
		wl := s.Workload
		answers = append(answers, fmt.Sprintf("phase %s complete %t labels %v workspace %d bytes %d files (unasked: %v) processes %q output %d total %d/%d cpu>0 %t peak>0 %t samples>0 %t unknown %s",
			s.Phase, s.Complete, s.Labels["batch"] == batch, space.Bytes, space.Files, s.Workspace, procs, s.OutputBytes, u.Total.Sandboxes, u.Total.Processes,
			wl.CPU > 0 && u.Total.CPU == wl.CPU, wl.MemoryPeak > 0, wl.Samples > 0,
			errText(func() error { _, err := w.Runtime.Usage(ctx, host.UsageQuery{Sandbox: "sb-nope"}); return err }())))
	}
	got := same(t, "a usage report", tg.Ways, answers)
	want := `phase exited complete true labels true workspace 12 bytes 1 files (unasked: <nil>) processes ["0 echo hello exited output 6 source rusage" "1 echo hello exited output 6 source rusage"] output 12 total 1/2 cpu>0 true peak>0 true samples>0 true unknown not_found: `
	if !strings.HasPrefix(got, want) {
		t.Fatalf("got %s\nwant it to begin %s", got, want)
	}
}
