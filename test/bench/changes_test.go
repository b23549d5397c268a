package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// BenchmarkChangesCost: what tracking a process's workspace changes costs
// inside a real sandbox (Docker's seccomp profile already on every task),
// each case tracked and untracked (NoChanges) in the same loop, one after
// the other: a process that writes 10,000 small files under /workspace
// (the worst case: every loop iteration is one write-open the warden
// hears of), and one of the same loop that writes none (it reads a file
// 10,000 times); in a sandbox of 1 CPU and one of 2. Timed from Start to the end of Wait (the exit, its
// changes built and journaled). Target (issue 22): ≤ 5% on the writer,
// ~0 on the reader.
//
//	go test -run '^$' -bench BenchmarkChangesCost -benchtime 5x ./test/bench/
func BenchmarkChangesCost(b *testing.B) {
	for _, cpus := range []float64{1, 2} {
		b.Run(fmt.Sprintf("cpus=%g", cpus), func(b *testing.B) { changesCost(b, cpus) })
	}
}

func changesCost(b *testing.B, cpus float64) {
	e := testkit.NewAPI(b, stockade.Options{})
	pol := testkit.SmallPolicy()
	pol.CPUs = cpus
	sb, err := e.RT.CreateSandbox(b.Context(), spec.Sandbox{Image: e.Image, Policy: pol})
	if err != nil {
		b.Fatal(err)
	}
	const writer = `rm -rf d; mkdir d; i=0; while [ $i -lt 10000 ]; do echo $i > d/f$i; i=$((i+1)); done`
	const reader = `echo x > r; i=0; while [ $i -lt 10000 ]; do read v < r; i=$((i+1)); done`
	run := func(script string, untracked bool) time.Duration {
		t0 := time.Now()
		if _, errOut, res, err := testkit.RunOut(b, sb, spec.Process{Argv: []string{"sh", "-c", script}, NoChanges: untracked}); err != nil || res.ExitCode != 0 {
			b.Fatalf("%+v %v %s", res, err, errOut)
		}
		return time.Since(t0)
	}
	var w, wu, r, ru time.Duration
	for b.Loop() {
		w += run(writer, false)
		wu += run(writer, true)
		r += run(reader, false)
		ru += run(reader, true)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(ms(w), "writer-tracked-ms")
	b.ReportMetric(ms(wu), "writer-untracked-ms")
	b.ReportMetric(ms(w)/ms(wu), "writer-ratio")
	b.ReportMetric(ms(r), "reader-tracked-ms")
	b.ReportMetric(ms(ru), "reader-untracked-ms")
	b.ReportMetric(ms(r)/ms(ru), "reader-ratio")
}
