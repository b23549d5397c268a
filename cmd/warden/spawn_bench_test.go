package main

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/warden"
)

// BenchmarkSpawn: a spawn through the warden on this host (Spawn written →
// Started read, the child `true`) against its floor, a bare
// syscall.ForkExec of the same program in this process, alternating. The
// warden forks one child at a time (Go's fork lock spans the vfork and the
// child's execve), so the floor bounds how many starts a second one warden
// can make, whatever the runtime does.
//
//	go test -run '^$' -bench BenchmarkSpawn -benchtime 200x ./cmd/warden/
func BenchmarkSpawn(b *testing.B) {
	w := startWarden(b)
	c := w.link(warden.Init{})
	path := "/bin/true"
	var viaWarden, floor time.Duration
	for i := range b.N {
		ch := uint32(i + 1)
		t0 := time.Now()
		c.spawn(ch, warden.Spawn{ID: "p", Argv: []string{path}})
		c.waitStarted(ch)
		viaWarden += time.Since(t0)
		c.waitExited(ch)
		if err := c.w.Write(warden.TForget, ch); err != nil {
			b.Fatal(err)
		}

		t0 = time.Now()
		pid, err := syscall.ForkExec(path, []string{path}, &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{0, 1, 2}, Sys: &syscall.SysProcAttr{Setpgid: true}})
		floor += time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
			b.Error(err)
		}
	}
	b.ReportMetric(float64(viaWarden.Microseconds())/float64(b.N)/1000, "warden-spawn-ms/op")
	b.ReportMetric(float64(floor.Microseconds())/float64(b.N)/1000, "forkexec-floor-ms/op")
	b.ReportMetric(viaWarden.Seconds()/floor.Seconds(), "ratio")
}
