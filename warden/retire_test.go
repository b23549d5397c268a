package warden

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestRetireHere: on this machine's own /proc, readProc reads a
// child it started (its uid, parent, argv), retire refuses bad arguments
// and leaves alone a pid that is not a warden server, and kills one that
// is (a child whose argv[0] is this test binary's, with serve).
func TestRetireHere(t *testing.T) {
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Skipf("no sleep to start: %v", err)
	}
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })
	// Until its execve, the child's argv is empty (or its parent's).
	p, ok := readProc(sleeper.Process.Pid)
	for i := 0; i < 500 && ok && !slices.Equal(p.argv, []string{"sleep", "60"}); i++ {
		time.Sleep(10 * time.Millisecond)
		p, ok = readProc(sleeper.Process.Pid)
	}
	if !ok || p.ppid != os.Getpid() || p.uids[0] != os.Getuid() || !slices.Equal(p.argv, []string{"sleep", "60"}) {
		t.Fatalf("readProc(%d) = %+v %v", sleeper.Process.Pid, p, ok)
	}
	for _, args := range [][2]string{{"x", ""}, {"1", ""}, {strconv.Itoa(os.Getpid()), ""}, {"123", "/tmp/.stockade-warden-124.sock"}, {"123", "rel/.stockade-warden-123.sock"}} {
		if code := retire(args[0], args[1]); code != 2 {
			t.Errorf("retire%q = %d, want 2", args, code)
		}
	}
	if code := retire(strconv.Itoa(sleeper.Process.Pid), ""); code != 0 {
		t.Fatalf("retire of a non-warden = %d", code)
	}
	if err := sleeper.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("retire killed a process that is no warden: %v", err)
	}
	// A "warden server": this binary under its own argv[0], told to serve;
	// TestMain of this package is not involved, so it runs the helper below.
	srv := exec.Command(os.Args[0], "serve")
	srv.Env = append(os.Environ(), "STOCKADE_RETIRE_TEST_SERVE=1")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	for i := 0; ; i++ {
		if q, ok := readProc(srv.Process.Pid); ok && isWardenServer(q.argv) {
			break
		}
		if i > 500 {
			t.Fatal("the stand-in warden never showed its argv")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code := retire(strconv.Itoa(srv.Process.Pid), ""); code != 0 {
		t.Fatalf("retire of a warden server = %d", code)
	}
	if err := <-done; err == nil {
		t.Fatal("the retired warden exited on its own, not killed")
	}
}
