package warden

import (
	"syscall"
	"testing"
	"time"
)

// Every tracked process's listener hangs up once the process is reaped,
// whichever thread its fork ran on: Go never discards the main thread, so
// a filter installed there would be held for ever (a spawn that lands on
// it forks from another thread).
func TestTrackedListenerHangsUp(t *testing.T) {
	for i := range 50 {
		tr := newTracker()
		pid, err := forkTracked(tr, "/bin/sh", []string{"sh", "-c", "true"}, &syscall.ProcAttr{})
		if err != nil {
			t.Fatal(err)
		}
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
			t.Fatal(err)
		}
		if tr.served == nil {
			t.Skipf("no seccomp listener here: %s", tr.untracked)
		}
		select {
		case <-tr.served:
		case <-time.After(time.Minute):
			t.Fatalf("spawn %d: its listener never hung up", i)
		}
	}
}
