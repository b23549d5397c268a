package stockade_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/statedir"
)

// TestFakeOpenSealsAnEndedRecording: a runtime that died after journaling
// a process's exit and before writing its recording's end record (the
// file as the crash leaves it: every byte synced, no end record) leaves a
// recording no actor will end; the next Open writes the end record with
// the journaled totals, so the recording reads complete, every byte once.
// A running process's recording is left alone.
func TestFakeOpenSealsAnEndedRecording(t *testing.T) {
	f := newExecFake(t)
	hold := make(chan struct{})
	defer close(hold)
	f.Script = func(_ dockerio.Sandbox, req dockerio.ExecRequest) dockerio.FakeRun {
		r := dockerio.FakeRun{Frames: []dockerio.FakeFrame{{Stream: framing.Stdout, Data: []byte("hello\n")}, {Stream: framing.Stderr, Data: []byte("oops\n")}}}
		if req.Spec.Argv[0] == "hold" {
			r.Hold = hold
		}
		return r
	}
	path := filepath.Join(t.TempDir(), "journal.db")
	rt := testutil.OpenFake(t, f, path)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage, Lifetime: spec.Kept})
	p := mustStart(t, sb, spec.Process{Argv: []string{"x"}, Stdout: spec.Discard, Stderr: spec.Discard})
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	q := mustStart(t, sb, spec.Process{Argv: []string{"hold"}, Stdout: spec.Discard, Stderr: spec.Discard})
	read := func(id string) (string, stockade.OutputSummary) {
		t.Helper()
		var got bytes.Buffer
		sum, err := stockade.ReadOutput(path, id, func(ch stockade.OutputChunk) error { got.Write(ch.Data); return nil })
		if err != nil {
			t.Fatalf("reading %s: %v", id, err)
		}
		return got.String(), sum
	}
	if out, sum := read(p.ID()); !sum.Complete || out != "hello\noops\n" {
		t.Fatalf("before the cut: %q %+v", out, sum)
	}
	// The held process runs and its output is recorded before the close.
	testutil.Eventually(t, "the held process's output recorded", func() bool {
		var got bytes.Buffer
		_, err := stockade.ReadOutput(path, q.ID(), func(ch stockade.OutputChunk) error { got.Write(ch.Data); return nil })
		return err == nil && got.String() == "hello\noops\n"
	})
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}

	// The crash: the end record never reached the file.
	head := filepath.Join(statedir.Recordings(path), p.ID()+".rec")
	fi, err := os.Stat(head)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(head, fi.Size()-(1+4+24+4)); err != nil {
		t.Fatal(err)
	}
	if out, sum := read(p.ID()); sum.Complete || out != "hello\noops\n" {
		t.Fatalf("after the cut: %q %+v, want the output and not complete", out, sum)
	}

	rt = testutil.OpenFake(t, f, path)
	defer func() { _ = rt.Close() }() // teardown
	out, sum := read(p.ID())
	if !sum.Complete || out != "hello\noops\n" || sum.StdoutBytes != 6 || sum.StderrBytes != 5 {
		t.Fatalf("after the next Open: %q %+v, want complete with 6 + 5 bytes", out, sum)
	}
	if _, sum := read(q.ID()); sum.Complete {
		t.Fatalf("the running process's recording was ended: %+v", sum)
	}
}
