package stockade_test

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/recorder"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/statedir"
)

// TestFakeRecordingNotCompleteWithoutExit: a process whose exit is not
// journaled (the journal refuses the exit, or the stop a gone consumer
// asks for) may still run: its recording has no end record (it does not
// say complete), and a later Resume continues it where it stands. A
// process whose exit is journaled ends complete.
func TestFakeRecordingNotCompleteWithoutExit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		refuse string // the event type the journal refuses
		hold   bool   // the process runs until it is signalled
		// closeOut: the consumer, tied to the process, closes its stdout
		// (cancelled: a stop).
		closeOut bool
		complete bool
	}{
		{name: "exit journaled", complete: true},
		{name: "journal refuses the exit", refuse: lifecycle.ProcessExited{}.Type()},
		{name: "consumer gone, stop refused", refuse: lifecycle.ProcessStopping{}.Type(), hold: true, closeOut: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := testutil.NewFake(t)
			f.Script = func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun {
				r := dockerio.FakeRun{Frames: []dockerio.FakeFrame{{Stream: framing.Stdout, Data: []byte("hello\n")}}}
				if tc.hold {
					r.Hold = make(chan struct{})
				}
				return r
			}
			if tc.refuse != "" {
				defer stockade.WrapJournal(func(j actorsJournal) actorsJournal {
					return &refusingJournal{actorsJournal: j, typ: tc.refuse}
				})()
			}
			path := filepath.Join(t.TempDir(), "journal.db")
			rt := testutil.OpenFake(t, f, path)
			ctx := context.Background()
			sb := mustCreate(t, rt, spec.Sandbox{Image: fakeImage})
			p := mustStart(t, sb, spec.Process{Argv: []string{"x"}, Stdout: spec.Pipe, Stderr: spec.Discard, StopWithCaller: tc.closeOut})
			buf := make([]byte, 6)
			if _, err := p.Stdout().Read(buf); err != nil || string(buf) != "hello\n" {
				t.Fatalf("read %q %v", buf, err)
			}
			if tc.closeOut {
				if err := p.Stdout().Close(); err != nil {
					t.Fatal(err)
				}
			}
			_, err := p.Wait(ctx)
			if tc.complete != (err == nil) {
				t.Fatalf("wait: %v", err)
			}

			var got bytes.Buffer
			sum, err := stockade.ReadOutput(path, p.ID(), func(ch stockade.OutputChunk) error { got.Write(ch.Data); return nil })
			if err != nil || got.String() != "hello\n" {
				t.Fatalf("recording %q %v, want hello", got.String(), err)
			}
			if sum.Complete != tc.complete {
				t.Fatalf("recording complete %v, want %v (exit journaled: %v)", sum.Complete, tc.complete, tc.complete)
			}
			if tc.complete {
				return
			}
			// Not complete: a later runtime resumes it where it stands.
			st, err := recorder.Open(statedir.Recordings(path), spec.Record{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			rec, off, err := st.Resume(p.ID(), spec.Record{})
			if err != nil || off != 6 {
				t.Fatalf("resume: offset %d %v, want 6", off, err)
			}
			if err := rec.Write(recorder.TypeStdout, []byte("more\n")); err != nil {
				t.Fatal(err)
			}
			if err := rec.Close(); err != nil {
				t.Fatal(err)
			}
			got.Reset()
			sum, err = stockade.ReadOutput(path, p.ID(), func(ch stockade.OutputChunk) error { got.Write(ch.Data); return nil })
			if err != nil || !sum.Complete || got.String() != "hello\nmore\n" {
				t.Fatalf("resumed recording %q %+v %v", got.String(), sum, err)
			}
		})
	}
}
