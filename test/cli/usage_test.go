package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/test/testkit"
)

// TestCLIUsage: a labelled batch of one-shot runs (each its own sandbox,
// removed at its end) is in `stockade usage --label`, offline from the
// journal and through a server alike: both sandboxes, each complete with
// its process's rusage, the total their sum; a label no sandbox has gives
// an empty report; a bad --since is refused naming it.
func TestCLIUsage(t *testing.T) {
	e := testkit.NewCLI(t)
	batch := fmt.Sprintf("nightly-%d", time.Now().UnixNano())
	for range 2 {
		if code, out, errOut := e.Run(t, "", "run", "--label", "batch="+batch, "--", "sh", "-c", "echo hi"); code != 0 || out != "hi\n" {
			t.Fatalf("run: %d %q %q", code, out, errOut)
		}
	}
	read := func(t *testing.T) host.Usage {
		code, out, errOut := e.Run(t, "", "usage", "--label", "batch="+batch, "--since", "1h", "--json")
		if code != 0 {
			t.Fatalf("usage: %d %s", code, errOut)
		}
		var u host.Usage
		if err := json.Unmarshal([]byte(out), &u); err != nil {
			t.Fatalf("usage --json: %v\n%s", err, out)
		}
		return u
	}
	check := func(t *testing.T, u host.Usage) {
		t.Helper()
		if len(u.Sandboxes) != 2 || u.Total.Sandboxes != 2 || u.Total.Processes != 2 || u.Total.OutputBytes != 6 {
			t.Fatalf("the batch's usage: %+v", u)
		}
		for _, s := range u.Sandboxes {
			if !s.Complete || s.Phase != "removed" || len(s.Processes) != 1 || s.Processes[0].Usage == nil || s.Processes[0].Usage.Source != "rusage" || s.Workload.CPU <= 0 {
				t.Fatalf("a sandbox of the batch: %+v", s)
			}
		}
	}
	offline := read(t)
	check(t, offline)
	e.Serve(t, t.Context()) // the same question, now through a server
	served := read(t)
	check(t, served)
	if fmt.Sprint(offline.Total) != fmt.Sprint(served.Total) {
		t.Errorf("offline total %+v, served %+v", offline.Total, served.Total)
	}
	if code, out, _ := e.Run(t, "", "usage", "--label", "batch=none-such"); code != 0 || out != "no sandbox matches\n" {
		t.Errorf("no match: %d %q", code, out)
	}
	if code, _, errOut := e.Run(t, "", "usage", "--since", "yesterday"); code == 0 || !strings.Contains(errOut, "--since") {
		t.Errorf("a bad --since: %d %q", code, errOut)
	}
	code, out, _ := e.Run(t, "", "usage", "--label", "batch="+batch)
	if code != 0 || !strings.Contains(out, "TOTAL (2)") || strings.Count(out, "complete") != 2 {
		t.Errorf("the table:\n%s", out)
	}
}
