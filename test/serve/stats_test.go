package serve

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/test/testkit"
)

// TestServeStats: SIGUSR1 makes a server print its stats line, and it
// keeps serving.
func TestServeStats(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := testkit.NewCLI(t)
	srv := e.Serve(t, ctx)
	st := srv.Stats(t)
	for _, k := range []string{"goroutines", "heap_alloc", "heap_inuse", "heap_objects", "fds", "gc"} {
		if _, ok := st[k]; !ok {
			t.Errorf("stats %v lack %s", st, k)
		}
	}
	if st["goroutines"] <= 0 || st["heap_alloc"] <= 0 || st["fds"] <= 0 {
		t.Errorf("stats %v: goroutines, heap and open files must be counted", st)
	}
	if code, _, errOut := e.Run(t, "", "sandbox", "ls"); code != 0 {
		t.Fatalf("after SIGUSR1 the server does not serve: %d %s", code, errOut)
	}
	if err := srv.Stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("serve after SIGTERM: %v", err)
	}
}
