package main

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestSweepSpares: a sweep ends every process of the uid but the
// container's own: pid 1, its keeper (pid 1 itself without an init, else
// the earliest child of pid 1 running the keeper's argv) and the keeper's
// sleep. A look-alike (the keeper's argv, a later start; sleep 3600 under
// another parent) and processes of other uids are told apart.
func TestSweepSpares(t *testing.T) {
	u := [4]int{65532, 65532, 65532, 65532}
	root := [4]int{0, 0, 0, 0}
	initArgv := []string{"/sbin/docker-init", "--", "/bin/sh", "-c", "while :; do sleep 3600; done"}
	for _, tc := range []struct {
		name string
		ps   []procInfo
		want []int // victims
	}{
		{"with an init", []procInfo{
			{pid: 1, uids: u, argv: initArgv, state: 'S'},
			{pid: 7, ppid: 1, start: 10, uids: u, argv: keeperArgv, state: 'S'},
			{pid: 8, ppid: 7, start: 11, uids: u, argv: keeperSleep, state: 'S'},
			{pid: 20, ppid: 1, start: 50, uids: u, argv: keeperArgv, state: 'S'},   // a look-alike, reparented
			{pid: 21, ppid: 20, start: 51, uids: u, argv: keeperSleep, state: 'S'}, // its sleep
			{pid: 30, ppid: 0, start: 60, uids: u, argv: []string{"/workspace/.stockade/stockade-warden", "serve"}, state: 'S'},
			{pid: 31, ppid: 1, start: 61, uids: [4]int{65532, 65532, 0, 65532}, argv: []string{"evil"}, state: 'R'},
			{pid: 32, ppid: 0, start: 62, uids: root, argv: []string{"ps"}, state: 'R'},
			{pid: 33, ppid: 1, start: 63, uids: u, state: 'Z'},
			{pid: 99, uids: u, argv: []string{"stockade-warden", "sweep"}, state: 'R'}, // the sweep
		}, []int{20, 21, 30, 31}},
		{"without an init", []procInfo{
			{pid: 1, uids: u, argv: keeperArgv, state: 'S'},
			{pid: 6, ppid: 1, start: 11, uids: u, argv: keeperSleep, state: 'S'},
			{pid: 9, ppid: 1, start: 12, uids: u, argv: keeperArgv, state: 'S'},
			{pid: 99, uids: u, state: 'R'},
		}, []int{9}},
	} {
		var got []int
		for _, v := range victims(tc.ps, 65532, 99) {
			got = append(got, v.pid)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: victims %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestSweepAndRetireHere: on this machine's own /proc, readProc reads a
// child it started (its uid, parent, argv), retire refuses bad arguments
// and leaves alone a pid that is not a warden server, and kills one that
// is (a child whose argv[0] is this test binary's, with serve).
func TestSweepAndRetireHere(t *testing.T) {
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Skipf("no sleep to start: %v", err)
	}
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })
	p, ok := readProc(sleeper.Process.Pid)
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
	srv.Env = append(os.Environ(), "STOCKADE_SWEEP_TEST_SERVE=1")
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
