package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/spec"
)

// recordedJournal makes a journal at path with one kept sandbox whose
// process printed to both streams, and returns the sandbox and process ids.
// It uses the fake engine: the CLI reads only files.
func recordedJournal(t *testing.T, path string, frames ...dockerio.FakeFrame) (string, string) {
	t.Helper()
	f := testutil.NewFake(t)
	// Execs: one multiplexed stream keeps the order of stdout and stderr
	// that this test reads back (a warden's two pipes do not).
	f.NoWarden = true
	f.Script = func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun {
		return dockerio.FakeRun{Frames: frames, ExitCode: 1}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rt := testutil.OpenFake(t, f, path, func(o *stockade.Options) { o.Record = spec.Record{Head: 4 << 10, Tail: 4 << 10} })
	defer func() { _ = rt.Close() }() // the CLI opens the journal next
	sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: "sha256:" + strings.Repeat("0", 63) + "1"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"x"}, Stdout: spec.Pipe, Stderr: spec.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, p.Stdout()); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	return sb.ID(), p.ID()
}

func TestLogsAndShowOutput(t *testing.T) {
	big := bytes.Repeat([]byte("z"), 20<<10)
	path := filepath.Join(t.TempDir(), "j.db")
	sbID, pID := recordedJournal(t, path,
		dockerio.FakeFrame{Stream: framing.Stdout, Data: []byte("hello\n")},
		dockerio.FakeFrame{Stream: framing.Stderr, Data: []byte("why it failed\n")},
		dockerio.FakeFrame{Stream: framing.Stdout, Data: big},
	)
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := dispatch(context.Background(), append(args, "--journal", path), nil, &out, &errb)
		return code, out.String(), errb.String()
	}
	const head, tail = 4 << 10, 4 << 10
	gapMark := "[" + itoa(6+14+len(big)-head-tail) + " bytes of output not recorded here]"
	for _, tc := range []struct {
		name      string
		args      []string
		stdout    string // want, exactly
		stderrHas []string
	}{
		{"both streams", []string{"logs", pID},
			"hello\n" + string(big[:head-6-14]) + string(big[:tail]), []string{"why it failed\n", gapMark}},
		{"stdout only", []string{"logs", "--stdout", pID},
			"hello\n" + string(big[:head-6-14]) + string(big[:tail]), []string{gapMark}},
		{"stderr only", []string{"logs", pID, "--stderr"}, "", []string{"why it failed\n", gapMark}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, e := run(tc.args...)
			if code != 0 || out != tc.stdout {
				t.Fatalf("exit %d, stdout %.80q (%d bytes), want %d bytes; stderr %q", code, out, len(out), len(tc.stdout), e)
			}
			for _, s := range tc.stderrHas {
				if !strings.Contains(e, s) {
					t.Fatalf("stderr %q lacks %q", e, s)
				}
			}
			if tc.name == "stdout only" && strings.Contains(e, "why it failed") {
				t.Fatalf("--stdout printed stderr: %q", e)
			}
		})
	}
	t.Run("json", func(t *testing.T) {
		code, out, e := run("logs", "--json", pID)
		if code != 0 {
			t.Fatalf("exit %d: %q", code, e)
		}
		var streams []string
		var last outputLine
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var l outputLine
			if err := json.Unmarshal([]byte(line), &l); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			if len(streams) == 0 || streams[len(streams)-1] != l.Stream {
				streams = append(streams, l.Stream)
			}
			last = l
		}
		if want := []string{"stdout", "stderr", "stdout", "gap", "stdout", "end"}; !reflect.DeepEqual(streams, want) {
			t.Fatalf("streams %v, want %v", streams, want)
		}
		if last.Summary == nil || !last.Summary.Complete || last.Summary.StdoutBytes != int64(6+len(big)) || last.Summary.StderrBytes != 14 {
			t.Fatalf("end line %+v", last.Summary)
		}
	})
	t.Run("journal show --output", func(t *testing.T) {
		code, out, e := run("journal", "show", sbID, "--output")
		if code != 0 {
			t.Fatalf("exit %d: %q", code, e)
		}
		exit := strings.Index(out, "process.exited")
		hello := strings.Index(out, "out| hello")
		why := strings.Index(out, "err| why it failed")
		gap := strings.Index(out, "output not recorded here")
		next := strings.Index(out[max(exit, 0):], "\n")
		if exit < 0 || hello < exit+next || why < hello || gap < why {
			t.Fatalf("the output is not under the exit line, in order:\n%s", out)
		}
		if code, plain, _ := run("journal", "show", sbID); code != 0 || strings.Contains(plain, "hello") {
			t.Fatalf("show without --output printed output:\n%s", plain)
		}
		code, out, _ = run("--json", "journal", "show", sbID, "--output")
		if code != 0 || !strings.Contains(out, `"kind":"output","id":"`+pID+`","stream":"stderr"`) || !strings.Contains(out, `"stream":"end"`) {
			t.Fatalf("--json show --output:\n%.2000s", out)
		}
	})
	t.Run("failures", func(t *testing.T) {
		if code, _, e := run("logs", "nosuchprocess"); code != 1 || !strings.Contains(e, "not_found") {
			t.Fatalf("logs of an unknown process: %d %q", code, e)
		}
		if code, out, e := run("logs", "-f", pID); code != 1 || out != "" || !strings.Contains(e, "stockade serve") || strings.Count(e, "\n") > 2 {
			t.Fatalf("logs -f without a server: %d %q %q", code, out, e)
		}
	})
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
