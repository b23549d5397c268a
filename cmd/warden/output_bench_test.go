package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockade/stockade/warden/link"
	"github.com/stockade/stockade/warden/wire"
)

// BenchmarkOutput: 256 MiB of a child's stdout through the warden on this
// host and a link.Link reading it (Next to its end, as the runtime's read
// loop does), against the same child's output read straight from a pipe:
// the throughput, and the CPU the warden spent per GiB (from its
// /proc/PID/stat, so other load on the machine counts little).
//
//	go test -run '^$' -bench BenchmarkOutput -benchtime 3x ./cmd/warden/
func BenchmarkOutput(b *testing.B) {
	const size = 256 << 20
	w := startWarden(b)
	link, _, err := link.Open(context.Background(), w.stdout, w.stdin, nil, link.Handshake{Secret: w.secret})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = link.Close() }()
	argv := []string{"head", "-c", strconv.Itoa(size), "/dev/zero"}
	var viaWarden, direct time.Duration
	var cpu float64
	for i := range b.N {
		c0 := procCPU(b, w.cmd.Process.Pid)
		t0 := time.Now()
		p, err := link.Spawn(context.Background(), wire.Spawn{ID: "p" + strconv.Itoa(i), Argv: argv})
		if err != nil {
			b.Fatal(err)
		}
		var n int
		for {
			_, d, err := p.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			n += len(d)
		}
		viaWarden += time.Since(t0)
		cpu += procCPU(b, w.cmd.Process.Pid) - c0
		if n != size {
			b.Fatalf("%d bytes through the warden, want %d", n, size)
		}
		if err := p.Forget(); err != nil {
			b.Fatal(err)
		}

		direct += pipeRead(b, argv, size)
	}
	gib := float64(size) * float64(b.N) / (1 << 30)
	b.ReportMetric(gib*1024/viaWarden.Seconds(), "warden-MiB/s")
	b.ReportMetric(gib*1024/direct.Seconds(), "pipe-MiB/s")
	b.ReportMetric(cpu/gib, "warden-cpu-s/GiB")
}

// pipeRead runs argv with its stdout on a pipe and reads it to its end in
// 64 KiB reads: the floor of the warden's own reads.
func pipeRead(b *testing.B, argv []string, size int) time.Duration {
	b.Helper()
	t0 := time.Now()
	cmd := exec.Command(argv[0], argv[1:]...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	n := 0
	for {
		k, err := out.Read(buf)
		n += k
		if err != nil {
			break
		}
	}
	if err := cmd.Wait(); err != nil || n != size {
		b.Fatalf("%v, %d bytes", err, n)
	}
	return time.Since(t0)
}

// procCPU is the user and system CPU seconds pid has used.
func procCPU(b *testing.B, pid int) float64 {
	b.Helper()
	st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	s := string(st)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100 // USER_HZ
}
