package main

import (
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/warden/wire"
)

// BenchmarkSpawn: a spawn through the warden on this host (Spawn written →
// Started read, the child `true`) against its floor, a bare
// syscall.ForkExec of the same program in this process, alternating. The
// warden forks up to maxSpawns children at once (Go's ForkExec no longer
// serialises forks), so on few CPUs the floor still bounds how many starts
// a second one warden can make, whatever the runtime does.
//
//	go test -run '^$' -bench BenchmarkSpawn -benchtime 200x ./cmd/warden/
func BenchmarkSpawn(b *testing.B) {
	w := startWarden(b)
	c := w.link(wire.Init{})
	path := "/bin/true"
	var viaWarden, floor time.Duration
	for i := range b.N {
		ch := uint32(i + 1)
		t0 := time.Now()
		c.spawn(ch, wire.Spawn{ID: "p", Argv: []string{path}})
		c.waitStarted(ch)
		viaWarden += time.Since(t0)
		c.waitExited(ch)
		if err := c.w.Write(wire.TForget, ch); err != nil {
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

// BenchmarkSpawnBurst100: 100 Spawns written at once (the child `sleep 1`),
// the time until each Started is read: the warden's share of a burst of
// starts (BenchmarkWardenConcurrent100 in test/ adds the runtime's).
//
//	go test -run '^$' -bench BenchmarkSpawnBurst100 -benchtime 20x ./cmd/warden/
func BenchmarkSpawnBurst100(b *testing.B) {
	w := startWarden(b)
	c := w.link(wire.Init{})
	var all []time.Duration
	ch := uint32(0)
	for range b.N {
		first := ch + 1
		t0 := time.Now()
		for range 100 {
			ch++
			c.spawn(ch, wire.Spawn{ID: "p", Argv: []string{"sleep", "1"}})
		}
		for k := first; k <= ch; k++ {
			c.waitStarted(k)
		}
		// The Starteds arrive in order of the spawns' ends: wait for all,
		// then read each one's arrival.
		c.mu.Lock()
		for k := first; k <= ch; k++ {
			all = append(all, c.ch(k).startedAt.Sub(t0))
		}
		c.mu.Unlock()
		for k := first; k <= ch; k++ {
			c.waitExited(k)
			if err := c.w.Write(wire.TForget, k); err != nil {
				b.Fatal(err)
			}
		}
	}
	slices.Sort(all)
	b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "started-p50-ms")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "started-p99-ms")
	b.ReportMetric(float64(all[len(all)-1].Microseconds())/1000, "started-max-ms")
}
