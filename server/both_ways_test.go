package server_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/spec"
)

// TestFoundProcessBothWays: host.Runtime's Process, Logs and Follow give
// the same answers embedded (Runtime.Host) and served (the client), for a
// process found by id that another caller started: running (no streams;
// its end comes to Wait and Done), ended, and unknown (the same not_found,
// word for word).
func TestFoundProcessBothWays(t *testing.T) {
	fx := serve(t)
	ctx := ctxFor(t)
	hold := make(chan struct{})
	fx.fake.Script = func(_ dockerio.Sandbox, req dockerio.ExecRequest) dockerio.FakeRun {
		// One stream: two streams' chunks may reach the recorder in
		// either order (each has its own pipe in the warden).
		run := dockerio.FakeRun{Frames: []dockerio.FakeFrame{{Stream: framing.Stdout, Data: []byte("out ")}}}
		if req.Spec.Argv[0] == "held" {
			run.Hold, run.After, run.ExitCode = hold, []dockerio.FakeFrame{{Stream: framing.Stdout, Data: []byte("later")}}, 3
		}
		return run
	}
	embedded := fx.rt.Host()
	sb, err := fx.c.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage})
	if err != nil {
		t.Fatal(err)
	}
	held, err := sb.Start(ctx, spec.Process{Argv: []string{"held"}, Stdout: spec.Discard, Stderr: spec.Discard})
	if err != nil {
		t.Fatal(err)
	}
	ended, err := sb.Start(ctx, spec.Process{Argv: []string{"quick"}, Stdout: spec.Discard, Stderr: spec.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ended.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	ways := []struct {
		name string
		rt   host.Runtime
	}{{"embedded", embedded}, {"served", fx.c}}

	// Unknown: the same refusal.
	var refusals []string
	for _, w := range ways {
		_, err := w.rt.Process(ctx, "nosuchprocess")
		if !spec.IsCode(err, spec.CodeNotFound) {
			t.Fatalf("%s: Process of an unknown id: %v, want not_found", w.name, err)
		}
		refusals = append(refusals, err.Error())
	}
	if refusals[0] != refusals[1] {
		t.Fatalf("the refusals differ:\nembedded: %s\nserved:   %s", refusals[0], refusals[1])
	}

	// Running, found by id: no streams, and its end comes to each way.
	found := map[string]host.Process{}
	for _, w := range ways {
		p, err := w.rt.Process(ctx, held.ID())
		if err != nil {
			t.Fatalf("%s: Process of a running process: %v", w.name, err)
		}
		if p.ID() != held.ID() || p.Stdout() != nil || p.Stderr() != nil || p.Stdin() != nil {
			t.Fatalf("%s: found %s with streams %v %v %v; want its id and no streams", w.name, p.ID(), p.Stdout(), p.Stderr(), p.Stdin())
		}
		select {
		case <-p.Done():
			t.Fatalf("%s: a running process found by id is done", w.name)
		default:
		}
		found[w.name] = p
	}
	close(hold)
	var results []string
	for _, w := range ways {
		p := found[w.name]
		res, err := p.Wait(ctx)
		<-p.Done()
		results = append(results, fmt.Sprintf("%d %s %d %v", res.ExitCode, res.Reason, res.StdoutBytes, err))
	}
	if results[0] != results[1] || !strings.HasPrefix(results[0], "3 exited 9 ") {
		t.Fatalf("the ends found by id: embedded %q, served %q; want the same, exit 3 with 9 bytes", results[0], results[1])
	}

	// Ended: done at once, the same result, and the same recording.
	var logs, sums []string
	for _, w := range ways {
		p, err := w.rt.Process(ctx, ended.ID())
		if err != nil {
			t.Fatalf("%s: Process of an ended process: %v", w.name, err)
		}
		<-p.Done()
		if res, err := p.Wait(ctx); err != nil || res.Reason != "exited" {
			t.Fatalf("%s: the ended process: %+v %v", w.name, res, err)
		}
		var got strings.Builder
		sum, err := w.rt.Logs(ctx, held.ID(), func(c host.OutputChunk) error {
			fmt.Fprintf(&got, "%s@%d:%s|", c.Stream, c.Offset, c.Data)
			return nil
		})
		if err != nil {
			t.Fatalf("%s: Logs: %v", w.name, err)
		}
		logs = append(logs, got.String())
		sums = append(sums, fmt.Sprintf("%+v", sum))
	}
	if logs[0] != logs[1] || logs[0] != "stdout@0:out |stdout@4:later|" || sums[0] != sums[1] {
		t.Fatalf("Logs both ways:\nembedded %s %s\nserved   %s %s", logs[0], sums[0], logs[1], sums[1])
	}

	// Follow: the same past, in the same order.
	stop := errors.New("enough")
	var follows []string
	for _, w := range ways {
		var got []string
		err := w.rt.Follow(ctx, sb.ID(), func(e host.HistoryEvent) error {
			got = append(got, e.Kind+" "+e.ID+" "+e.Type)
			if e.ID == ended.ID() && e.Type == "process.exited" {
				return stop
			}
			return nil
		})
		if !errors.Is(err, stop) && !strings.Contains(fmt.Sprint(err), "enough") {
			t.Fatalf("%s: Follow: %v", w.name, err)
		}
		follows = append(follows, strings.Join(got, "\n"))
	}
	if follows[0] != follows[1] {
		t.Fatalf("Follow both ways:\nembedded:\n%s\nserved:\n%s", follows[0], follows[1])
	}
}
