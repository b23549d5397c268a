package stockade_test

import (
	"context"
	"io"
	"runtime"
	"testing"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/spec"
)

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkIdleActors measures the heap an idle sandbox actor and an idle
// process actor cost (with their handles, pipes and the fake engine's
// attachment), as the heap delta over 1,000 of each. Target ≤ 64 KiB each.
//
//	go test -run '^$' -bench IdleActors -benchtime 1x .
func BenchmarkIdleActors(b *testing.B) {
	const n = 1000
	for range b.N {
		f := newFake(b)
		hold := make(chan struct{})
		f.Script = func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun { return dockerio.FakeRun{Hold: hold} }
		rt := openFake(b, f, "")
		ctx := context.Background()
		base := heap()
		sbs := make([]*stockade.Sandbox, n)
		for i := range sbs {
			sb, err := rt.CreateSandbox(ctx, stockade.SandboxSpec{Image: fakeImage})
			if err != nil {
				b.Fatal(err)
			}
			sbs[i] = sb
		}
		afterSandboxes := heap()
		procs := make([]*stockade.Process, n)
		for i := range procs {
			p, err := sbs[i].Start(ctx, spec.Process{Argv: []string{"idle"}})
			if err != nil {
				b.Fatal(err)
			}
			procs[i] = p
		}
		afterProcs := heap()
		b.ReportMetric(float64(afterSandboxes-base)/n/1024, "KiB/sandbox")
		b.ReportMetric(float64(afterProcs-afterSandboxes)/n/1024, "KiB/process")
		close(hold)
		for _, p := range procs {
			go io.Copy(io.Discard, p.Stderr())
			io.Copy(io.Discard, p.Stdout())
			p.Wait(ctx)
		}
		rt.Close()
	}
}
