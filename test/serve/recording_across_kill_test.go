package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/statedir"
	"github.com/stockade/stockade/test/testkit"
)

// rcScript prints "first", waits for /tmp/<gate>-a, prints 300 lines,
// waits for /tmp/<gate>-b, prints "last".
func rcScript(gate string) string {
	return fmt.Sprintf(`echo first; while [ ! -e /tmp/%[1]s-a ]; do sleep 0.1; done; i=0; while [ $i -lt 300 ]; do echo "line $i"; i=$((i+1)); done; while [ ! -e /tmp/%[1]s-b ]; do sleep 0.1; done; echo last`, gate)
}

func rcLines() string {
	var b strings.Builder
	for i := 0; i < 300; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

// rcRecording reads a process's recording: its output, its chunks and
// its summary.
func rcRecording(t *testing.T, journalPath, id string) (string, []stockade.OutputChunk, stockade.OutputSummary) {
	t.Helper()
	var out strings.Builder
	var chunks []stockade.OutputChunk
	sum, err := stockade.ReadOutput(journalPath, id, func(ch stockade.OutputChunk) error {
		out.Write(ch.Data)
		chunks = append(chunks, ch)
		return nil
	})
	if err != nil {
		t.Fatalf("reading the recording of %s: %v", id, err)
	}
	return out.String(), chunks, sum
}

// TestNewLayersRecordingAcrossServerKill: `stockade serve` is killed -9
// while two processes stream; a new server re-adopts them and their
// recordings go on. One recording is whole: it ends complete with every
// byte. The other lost its last writes with the crash (cut from the file,
// as if they never reached the disk) while the warden had been told they
// were recorded: the gap is journaled (process.output_gap, its byte
// range) and recorded where it happened, logs and journal show --output
// mark it in place, and the recording still ends complete.
func TestNewLayersRecordingAcrossServerKill(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e, first, c, sb := testkit.ServedKeptSandbox(t, ctx)
	start := func(gate string) string {
		code, out, errOut := e.Run(t, "", "exec", "-d", sb.ID(), "--", "sh", "-c", rcScript(gate))
		if code != 0 {
			t.Fatalf("exec -d: %d %s", code, errOut)
		}
		return strings.TrimSpace(out)
	}
	whole, cut := start("whole"), start("cut")
	for _, id := range []string{whole, cut} {
		testutil.Eventually(t, "first of "+id, func() bool {
			out, _, _ := rcRecordingMaybe(e.Journal, id)
			return out == "first\n"
		})
	}
	if _, _, _, err := testkit.RunIn(ctx, sb, "touch /tmp/whole-a /tmp/cut-a"); err != nil {
		t.Fatal(err)
	}
	lines := rcLines()
	for _, id := range []string{whole, cut} {
		testutil.Eventually(t, "the lines of "+id, func() bool {
			out, _, _ := rcRecordingMaybe(e.Journal, id)
			return out == "first\n"+lines
		})
	}

	if err := first.Stop(t, syscall.SIGKILL); err == nil {
		t.Fatal("serve after SIGKILL exited 0")
	}
	_ = c.Close()
	// The crash cut the cut process's writes after "first" before they
	// reached the disk; the warden had been told they were recorded.
	_, chunks, _ := rcRecording(t, e.Journal, cut)
	if len(chunks) < 2 || string(chunks[0].Data) != "first\n" {
		t.Fatalf("the recording of %s before the cut: %+v", cut, chunks)
	}
	const firstRecord = 44 + 9 + len("first\n") // header, one record
	if err := os.Truncate(filepath.Join(statedir.Recordings(e.Journal), cut+".rec"), int64(firstRecord+3)); err != nil {
		t.Fatal(err)
	}

	second := e.Serve(t, ctx)
	c2 := second.Dial(t)
	sb2, err := c2.Sandbox(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := testkit.RunIn(ctx, sb2, "touch /tmp/whole-b /tmp/cut-b"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{whole, cut} {
		if res, err := c2.Wait(ctx, id); err != nil || res.Reason != "exited" || res.ExitCode != 0 {
			t.Fatalf("wait for %s after the restart: %+v %v\n%s", id, res, err, second.Logs.String())
		}
		// The end record follows the journaled exit (which Wait by id
		// follows) by a moment.
		testutil.Eventually(t, "the end record of "+id, func() bool {
			_, sum, err := rcRecordingMaybe(e.Journal, id)
			return err == nil && sum.Complete
		})
	}

	// The whole one: every byte, complete.
	out, _, sum := rcRecording(t, e.Journal, whole)
	if want := "first\n" + lines + "last\n"; out != want || !sum.Complete || sum.Missing != 0 {
		t.Fatalf("the recording of %s: %d bytes (want %d), %+v", whole, len(out), len(want), sum)
	}

	// The cut one: the gap in place, journaled with its range.
	from, to := int64(len("first\n")), int64(len("first\n")+len(lines))
	out, chunks, sum = rcRecording(t, e.Journal, cut)
	if out != "first\nlast\n" || !sum.Complete || sum.Missing != to-from {
		t.Fatalf("the recording of %s: %q %+v, want first, the gap, last; complete", cut, out, sum)
	}
	if len(chunks) != 3 || !chunks[1].Lost || chunks[1].Offset != from || chunks[1].Gap != to-from || chunks[2].Offset != to {
		t.Fatalf("the chunks of %s: %+v, want the %d lost bytes at %d, in place", cut, chunks, to-from, from)
	}
	evs, err := c2.History(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	var gaps []lifecycle.OutputGap
	for _, ev := range evs {
		if ev.ID == cut && ev.Type == (lifecycle.OutputGap{}).Type() {
			var g lifecycle.OutputGap
			if err := json.Unmarshal(ev.Payload, &g); err != nil {
				t.Fatal(err)
			}
			gaps = append(gaps, g)
		}
		if ev.ID == whole && ev.Type == (lifecycle.OutputGap{}).Type() {
			t.Fatalf("a gap journaled for the whole recording: %s", ev.Payload)
		}
	}
	if len(gaps) != 1 || gaps[0].From != from || gaps[0].To != to || gaps[0].Why == "" {
		t.Fatalf("journaled gaps of %s: %+v, want one [%d, %d) with its why", cut, gaps, from, to)
	}

	code, stdout, stderr := e.Run(t, "", "logs", cut)
	if code != 0 || stdout != "first\nlast\n" || !strings.Contains(stderr, fmt.Sprintf("[%d bytes of output lost here", to-from)) {
		t.Fatalf("logs: %d %q %q", code, stdout, stderr)
	}
	code, stdout, stderr = e.Run(t, "", "--json", "logs", cut)
	var kinds []string
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var l struct {
			Stream string `json:"stream"`
			Lost   bool   `json:"lost"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("output line %q: %v", line, err)
		}
		if l.Lost {
			l.Stream += "(lost)"
		}
		kinds = append(kinds, l.Stream)
	}
	if code != 0 || strings.Join(kinds, ",") != "stdout,gap(lost),stdout,end" {
		t.Fatalf("logs --json: %d %v\n%s%s", code, kinds, stdout, stderr)
	}
	code, stdout, stderr = e.Run(t, "", "journal", "show", sb.ID(), "--output")
	inPlace := regexp.MustCompile(fmt.Sprintf(`out\| first\n\s*\[%d bytes of output lost here: recovery[^\n]*\]\n\s*out\| last\n`, to-from))
	if code != 0 || !inPlace.MatchString(stdout) || !strings.Contains(stdout, "process.output_gap") {
		t.Fatalf("journal show --output: %d\n%s%s", code, stdout, stderr)
	}
	if err := sb2.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	_ = c2.Close()
	_ = second.Stop(t, syscall.SIGTERM)
}

// rcRecordingMaybe reads a recording that may not exist yet.
func rcRecordingMaybe(journalPath, id string) (string, stockade.OutputSummary, error) {
	var out strings.Builder
	sum, err := stockade.ReadOutput(journalPath, id, func(ch stockade.OutputChunk) error { out.Write(ch.Data); return nil })
	return out.String(), sum, err
}
