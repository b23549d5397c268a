package api

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// readRecording reads a recording into its per-stream projections and the
// gaps, in order.
func readRecording(read func(func(stockade.OutputChunk) error) (stockade.OutputSummary, error)) (stdout, stderr []byte, gaps []int64, sum stockade.OutputSummary, err error) {
	sum, err = read(func(c stockade.OutputChunk) error {
		switch c.Stream {
		case "":
			gaps = append(gaps, c.Gap)
		case "stdout":
			stdout = append(stdout, c.Data...)
		case "stderr":
			stderr = append(stderr, c.Data...)
		}
		return nil
	})
	return
}

// TestAPIOutputRecorded runs processes printing to both streams against
// the real daemon; their recordings hold what the consumer read (per
// stream; within the default bounds, the big one with its gap), complete
// when Wait returns, and read the same after Close (no runtime) and
// through a reopened runtime.
func TestAPIOutputRecorded(t *testing.T) {
	e := testkit.NewAPI(t, stockade.Options{})
	sb := e.Sandbox(t, spec.Kept)
	const big = 3 << 20
	cases := []struct {
		name string
		cmd  string
		big  bool
	}{
		{"both streams", "echo out1; echo err1 >&2; printf 'no newline'; echo err2 >&2", false},
		// The marker goes to stdout: across streams the arrival order
		// is Docker's (it may hold megabytes of stdout while stderr
		// overtakes), so only one stream's tail is certain.
		{"over the bounds", "head -c " + testkit.Itoa(big) + " /dev/zero | tr '\\0' a; echo tail-mark", true},
		{"nothing", "true", false},
	}
	type got struct {
		id             string
		stdout, stderr []byte
	}
	var runs []got
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, tc := range cases {
		p, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", tc.cmd}, Stdout: spec.Pipe, Stderr: spec.Pipe})
		if err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = io.Copy(&errb, p.Stderr()) }()
		_, _ = io.Copy(&out, p.Stdout()) // what was read is checked below
		wg.Wait()
		if _, err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, got{id: p.ID(), stdout: out.Bytes(), stderr: errb.Bytes()})
	}
	check := func(how string, read func(id string, fn func(stockade.OutputChunk) error) (stockade.OutputSummary, error)) {
		for i, tc := range cases {
			r := runs[i]
			so, se, gaps, sum, err := readRecording(func(fn func(stockade.OutputChunk) error) (stockade.OutputSummary, error) { return read(r.id, fn) })
			if err != nil || !sum.Complete {
				t.Fatalf("%s, %s: %+v %v", how, tc.name, sum, err)
			}
			if sum.StdoutBytes != int64(len(r.stdout)) || sum.StderrBytes != int64(len(r.stderr)) {
				t.Fatalf("%s, %s: totals %d/%d, the consumer read %d/%d", how, tc.name, sum.StdoutBytes, sum.StderrBytes, len(r.stdout), len(r.stderr))
			}
			if !bytes.Equal(se, r.stderr) {
				t.Fatalf("%s, %s: stderr recorded %q, read %q", how, tc.name, se, r.stderr)
			}
			if !tc.big {
				if !bytes.Equal(so, r.stdout) || len(gaps) != 0 {
					t.Fatalf("%s, %s: stdout recorded %q (gaps %v), read %q", how, tc.name, so, gaps, r.stdout)
				}
				continue
			}
			// The first 64 KiB and the last 1 MiB (the marker line at
			// its end), the gap between with its count.
			total := len(r.stdout) + len(r.stderr)
			want := total - spec.DefaultRecordHead - spec.DefaultRecordTail
			if len(gaps) != 1 || gaps[0] != int64(want) || sum.Missing != int64(want) {
				t.Fatalf("%s, %s: gaps %v, want one of %d", how, tc.name, gaps, want)
			}
			body, marked := strings.CutSuffix(string(so), "tail-mark\n")
			if len(so) != spec.DefaultRecordHead+spec.DefaultRecordTail || !marked || strings.Trim(body, "a") != "" {
				t.Fatalf("%s, %s: %d stdout bytes kept, not the printed 'a' then the marker", how, tc.name, len(so))
			}
		}
	}
	check("live runtime", func(id string, fn func(stockade.OutputChunk) error) (stockade.OutputSummary, error) {
		return e.RT.Logs(ctx, id, fn)
	})
	if err := e.RT.Close(); err != nil {
		t.Fatal(err)
	}
	check("no runtime", func(id string, fn func(stockade.OutputChunk) error) (stockade.OutputSummary, error) {
		return stockade.ReadOutput(e.Journal, id, fn)
	})
	again := testkit.NewAPI(t, stockade.Options{Journal: e.Journal})
	check("reopened runtime", func(id string, fn func(stockade.OutputChunk) error) (stockade.OutputSummary, error) {
		return again.RT.Logs(ctx, id, fn)
	})
}
