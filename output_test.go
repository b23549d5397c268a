package stockade_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/spec"
)

// recorded is a recording read back: "stdout:" and "stderr:" prefix each
// chunk's stream, "gap N" marks a gap.
func recorded(t *testing.T, read func(func(stockade.OutputChunk) error) (stockade.OutputSummary, error)) (string, stockade.OutputSummary, error) {
	t.Helper()
	var b bytes.Buffer
	var last string
	sum, err := read(func(c stockade.OutputChunk) error {
		switch c.Stream {
		case "":
			fmt.Fprintf(&b, "[gap %d]", c.Gap)
		case last:
			b.Truncate(b.Len() - 1) // chunking is the transport's: merge
			fmt.Fprintf(&b, "%s|", c.Data)
		default:
			fmt.Fprintf(&b, "%s:%s|", c.Stream, c.Data)
		}
		last = c.Stream
		return nil
	})
	return b.String(), sum, err
}

// TestFakeOutputRecorded: a process's output, both streams in arrival order
// (a discarded stream too), is on disk with its end record when Wait
// returns: synced before the exit was journaled. It reads through the
// runtime, from the journal's path, and after a restart.
func TestFakeOutputRecorded(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 70<<10)
	cases := []struct {
		name    string
		runtime spec.Record
		process spec.Record
		stderr  spec.StreamMode
		frames  []dockerio.FakeFrame
		want    string // "" with found false: no recording
		found   bool
	}{
		{"default", spec.Record{}, spec.Record{}, spec.Pipe,
			[]dockerio.FakeFrame{{Stream: framing.Stdout, Data: []byte("out ")}, {Stream: framing.Stderr, Data: []byte("err")}, {Stream: framing.Stdout, Data: []byte("more")}},
			"stdout:out |stderr:err|stdout:more|", true},
		{"a discarded stream is recorded", spec.Record{}, spec.Record{}, spec.Discard,
			[]dockerio.FakeFrame{{Stream: framing.Stderr, Data: []byte("hidden")}, {Stream: framing.Stdout, Data: []byte("shown")}},
			"stderr:hidden|stdout:shown|", true},
		{"nothing printed", spec.Record{}, spec.Record{}, spec.Pipe, nil, "", true},
		{"process off", spec.Record{}, spec.Record{Off: true}, spec.Pipe,
			[]dockerio.FakeFrame{{Stream: framing.Stdout, Data: []byte("x")}}, "", false},
		{"runtime off", spec.Record{Off: true}, spec.Record{}, spec.Pipe,
			[]dockerio.FakeFrame{{Stream: framing.Stdout, Data: []byte("x")}}, "", false},
		{"runtime bounds", spec.Record{Head: 4 << 10, Tail: 4 << 10}, spec.Record{}, spec.Pipe,
			[]dockerio.FakeFrame{{Stream: framing.Stdout, Data: big}},
			"stdout:" + string(big[:4<<10]) + "|[gap 63488]stdout:" + string(big[:4<<10]) + "|", true},
		{"process bounds over the runtime's", spec.Record{Head: 4 << 10, Tail: 4 << 10}, spec.Record{Head: 128 << 10}, spec.Pipe,
			[]dockerio.FakeFrame{{Stream: framing.Stdout, Data: big}},
			"stdout:" + string(big) + "|", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newExecFake(t)
			f.Script = script(tc.frames...)
			path := filepath.Join(t.TempDir(), "journal.db")
			rt := testutil.OpenFake(t, f, path, func(o *stockade.Options) { o.Record = tc.runtime })
			ctx := context.Background()
			sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage})
			if err != nil {
				t.Fatal(err)
			}
			p, err := sb.Start(ctx, spec.Process{Argv: []string{"x"}, Stdout: spec.Pipe, Stderr: tc.stderr, Record: tc.process})
			if err != nil {
				t.Fatal(err)
			}
			drain(p)
			if _, err := p.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			// Wait returned: the exit is journaled, so the recording must
			// be whole, end record included.
			reads := map[string]func(func(stockade.OutputChunk) error) (stockade.OutputSummary, error){
				"runtime": func(fn func(stockade.OutputChunk) error) (stockade.OutputSummary, error) {
					return rt.Logs(ctx, p.ID(), fn)
				},
				"path": func(fn func(stockade.OutputChunk) error) (stockade.OutputSummary, error) {
					return stockade.ReadOutput(path, p.ID(), fn)
				},
			}
			for name, read := range reads {
				got, sum, err := recorded(t, read)
				if !tc.found {
					if !spec.IsCode(err, spec.CodeNotFound) {
						t.Fatalf("%s: %v, want not_found", name, err)
					}
					continue
				}
				if err != nil || got != tc.want || !sum.Complete || sum.Torn {
					t.Fatalf("%s: got %.200q %+v %v\nwant %.200q, complete", name, got, sum, err, tc.want)
				}
			}
			if !tc.found {
				return
			}
			if err := rt.Close(); err != nil {
				t.Fatal(err)
			}
			rt2 := testutil.OpenFake(t, f, path)
			got, sum, err := recorded(t, func(fn func(stockade.OutputChunk) error) (stockade.OutputSummary, error) {
				return rt2.Logs(ctx, p.ID(), fn)
			})
			if err != nil || got != tc.want || !sum.Complete {
				t.Fatalf("after a restart: %.200q %+v %v", got, sum, err)
			}
		})
	}
}

func drain(p *stockade.Process) {
	done := make(chan struct{})
	if r := p.Stderr(); r != nil {
		go func() { defer close(done); bufDrain(r) }()
	} else {
		close(done)
	}
	if r := p.Stdout(); r != nil {
		bufDrain(r)
	}
	<-done
}

func bufDrain(r interface{ Read([]byte) (int, error) }) {
	b := make([]byte, 32<<10)
	for {
		if _, err := r.Read(b); err != nil {
			return
		}
	}
}

func TestFakeRecordInvalid(t *testing.T) {
	f := testutil.NewFake(t)
	rt := testutil.OpenFake(t, f, "")
	ctx := context.Background()
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
	for _, r := range []spec.Record{{Head: -1}, {Tail: 1}, {Off: true, Head: 8 << 10}, {Tail: spec.MaxRecordBound + 1}} {
		if _, err := sb.Start(ctx, spec.Process{Argv: []string{"x"}, Stdout: spec.Pipe, Stderr: spec.Pipe, Record: r}); !spec.IsCode(err, spec.CodeInvalidArgument) {
			t.Errorf("start with record %+v: %v, want invalid_argument", r, err)
		}
		_, err := stockade.Open(ctx, stockade.Options{Journal: filepath.Join(t.TempDir(), "j.db"), Engine: f, Record: r})
		if !spec.IsCode(err, spec.CodeInvalidArgument) {
			t.Errorf("open with record %+v: %v, want invalid_argument", r, err)
		}
	}
}

// TestFakeRetainRemovesRecordings: retention deletes a removed sandbox's
// process streams and their recordings (the recordings of the process
// streams it deleted); a running process's stays.
func TestFakeRetainRemovesRecordings(t *testing.T) {
	f := testutil.NewFake(t)
	hold := make(chan struct{})
	f.Script = func(_ dockerio.Sandbox, req dockerio.ExecRequest) dockerio.FakeRun {
		run := dockerio.FakeRun{Frames: []dockerio.FakeFrame{{Stream: framing.Stdout, Data: []byte("hi")}}}
		if req.Spec.Argv[0] == "hold" {
			run.Hold = hold
		}
		return run
	}
	path := filepath.Join(t.TempDir(), "journal.db")
	rt := testutil.OpenFake(t, f, path)
	ctx := context.Background()
	ids := map[string]string{}
	for _, name := range []string{"removed", "hold"} {
		sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage})
		if err != nil {
			t.Fatal(err)
		}
		p, err := sb.Start(ctx, spec.Process{Argv: []string{name}, Stdout: spec.Pipe, Stderr: spec.Discard})
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = p.ID()
		if name == "hold" {
			// Its output is recorded before it reaches the pipe: once read,
			// the recording exists.
			if _, err := io.ReadFull(p.Stdout(), make([]byte, 2)); err != nil {
				t.Fatal(err)
			}
			defer func() { close(hold); drain(p); _, _ = p.Wait(ctx) }() // teardown
			continue
		}
		drain(p)
		if _, err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if err := sb.Remove(ctx); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Millisecond) // the retention cutoff is strictly after the removal
	if _, err := rt.Retain(ctx, 0); err != nil {
		t.Fatal(err)
	}
	nop := func(stockade.OutputChunk) error { return nil }
	if _, err := rt.Logs(ctx, ids["removed"], nop); !spec.IsCode(err, spec.CodeNotFound) {
		t.Fatalf("a removed sandbox's recording after retention: %v, want not_found", err)
	}
	if _, err := rt.Logs(ctx, ids["hold"], nop); err != nil {
		t.Fatalf("a running process's recording after retention: %v", err)
	}
}
