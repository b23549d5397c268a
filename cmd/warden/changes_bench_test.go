package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/warden/wire"
)

// writer10k writes 10,000 small files in the working directory.
const writer10k = "i=0; while [ $i -lt 10000 ]; do echo x > f$i; i=$((i+1)); done"

// noWriter does as much shell work writing only to /dev/null (each open
// for writing is still notified: the filter sees flags, not paths).
const noWriter = "i=0; while [ $i -lt 10000 ]; do echo x >/dev/null; i=$((i+1)); done"

// reader opens a file 10k times for reading only: the filter lets every
// one through without a notification.
const reader = "i=0; while [ $i -lt 10000 ]; do : </etc/passwd; i=$((i+1)); done"

// BenchmarkChanges: a process through the warden, Spawn written → Exited
// read (which includes making its Changes), tracked (the seccomp listener)
// against untracked (NoChanges), alternating, for a shell that writes 10k
// small files, one that does the same work writing only to /dev/null, and
// one that only opens a file for reading.
//
//	go test -run '^$' -bench BenchmarkChanges -benchtime 5x ./cmd/warden/
func BenchmarkChanges(b *testing.B) {
	for _, bc := range []struct{ name, script string }{{"writer10k", writer10k}, {"devnull", noWriter}, {"reader", reader}} {
		b.Run(bc.name, func(b *testing.B) {
			root := b.TempDir()
			w := startWarden(b, "-workspace", root)
			c := w.link(wire.Init{})
			var took, ending, cpu [2]time.Duration
			ch := uint32(0)
			for i := range b.N {
				for k, noChanges := range []bool{false, true} {
					b.StopTimer()
					dir := filepath.Join(root, fmt.Sprintf("w%d-%d", i, k))
					if err := os.Mkdir(dir, 0o755); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					ch++
					t0, cpu0 := time.Now(), cpuTime(b, w.cmd.Process.Pid)
					c.spawn(ch, wire.Spawn{Argv: []string{"sh", "-c", bc.script}, Dir: dir, NoChanges: noChanges})
					x, st := c.waitExited(ch)
					took[k] += time.Since(t0)
					cpu[k] += cpuTime(b, w.cmd.Process.Pid) - cpu0
					// Reaped → Exited: making the Changes (and the
					// last output).
					ending[k] += st.exitedAt.Sub(st.reapedAt)
					if x.Code != 0 {
						b.Fatalf("exit %+v: %q", x, st.out)
					}
					if want := map[bool]int{false: 10000, true: 0}[noChanges || bc.script != writer10k]; st.changes.Created != want {
						b.Fatalf("created %d, want %d (%+v)", st.changes.Created, want, st.changes.Untracked)
					}
					b.StopTimer()
					if err := c.w.Write(wire.TForget, ch); err != nil {
						b.Fatal(err)
					}
					if err := os.RemoveAll(dir); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
			}
			b.ReportMetric(float64(took[0].Microseconds())/float64(b.N)/1000, "tracked-ms/op")
			b.ReportMetric(float64(took[1].Microseconds())/float64(b.N)/1000, "untracked-ms/op")
			b.ReportMetric(took[0].Seconds()/took[1].Seconds(), "ratio")
			b.ReportMetric(float64(ending[0].Microseconds())/float64(b.N)/1000, "tracked-end-ms/op")
			b.ReportMetric(float64(cpu[0].Milliseconds())/float64(b.N), "tracked-warden-cpu-ms/op")
			b.ReportMetric(float64(cpu[1].Milliseconds())/float64(b.N), "untracked-warden-cpu-ms/op")
		})
	}
}

// cpuTime is the user and system CPU time process pid used (10 ms ticks).
func cpuTime(b *testing.B, pid int) time.Duration {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	s := string(st)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.Atoi(f[11])
	k, _ := strconv.Atoi(f[12])
	return time.Duration(u+k) * 10 * time.Millisecond
}

// BenchmarkSpawnTracked: what the tracking filter adds to a spawn through
// the warden (Spawn written → Started read, the child `true`), tracked
// against NoChanges, alternating.
//
//	go test -run '^$' -bench BenchmarkSpawnTracked -benchtime 300x ./cmd/warden/
func BenchmarkSpawnTracked(b *testing.B) {
	w := startWarden(b)
	c := w.link(wire.Init{})
	var took [2]time.Duration
	ch := uint32(0)
	for range b.N {
		for k, noChanges := range []bool{false, true} {
			ch++
			t0 := time.Now()
			c.spawn(ch, wire.Spawn{ID: "p", Argv: []string{"/bin/true"}, NoChanges: noChanges})
			c.waitStarted(ch)
			took[k] += time.Since(t0)
			c.waitExited(ch)
			if err := c.w.Write(wire.TForget, ch); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(took[0].Microseconds())/float64(b.N)/1000, "tracked-spawn-ms/op")
	b.ReportMetric(float64(took[1].Microseconds())/float64(b.N)/1000, "untracked-spawn-ms/op")
	b.ReportMetric(float64((took[0]-took[1]).Microseconds())/float64(b.N)/1000, "added-ms/op")
}

// BenchmarkScan10k is the rejected alternative's cost: one lstat walk of a
// 10k-file tree (a before/after scan pays it twice per process, whether
// the process writes or not, and attributes to a time window, not a
// process).
//
//	go test -run '^$' -bench BenchmarkScan10k ./cmd/warden/
func BenchmarkScan10k(b *testing.B) {
	root := b.TempDir()
	for d := range 100 {
		sub := filepath.Join(root, fmt.Sprintf("d%d", d))
		if err := os.Mkdir(sub, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range 100 {
			if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%d", f)), []byte("x\n"), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ResetTimer()
	for range b.N {
		n := 0
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if _, err := os.Lstat(p); err != nil {
				return err
			}
			n++
			return nil
		})
		if err != nil || n != 10101 {
			b.Fatalf("%d paths, %v", n, err)
		}
	}
}
