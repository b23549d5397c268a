package stockade_test

import (
	"context"
	"io"
	"runtime"
	"testing"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/internal/testutil"
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
		f := testutil.NewFake(b)
		hold := make(chan struct{})
		f.Script = func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun { return dockerio.FakeRun{Hold: hold} }
		rt := testutil.OpenFake(b, f, "")
		ctx := context.Background()
		base := heap()
		sbs := make([]*stockade.Sandbox, n)
		for i := range sbs {
			sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage})
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
			// Teardown: drains, and the end of processes not measured.
			go func() { _, _ = io.Copy(io.Discard, p.Stderr()) }()
			_, _ = io.Copy(io.Discard, p.Stdout())
			_, _ = p.Wait(ctx)
		}
		if err := rt.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPipelineFake: the ceiling of the runtime's output path (decoder,
// read loop, credit, pipe, consumer) with no daemon behind it: 256 MiB of
// 32 KiB frames from the fake engine. Docker's own exec stream on this
// machine delivers ~50 MiB/s, so any figure far above that means the
// runtime is not what limits a process's output.
func BenchmarkPipelineFake(b *testing.B) {
	const frame, total = 32 << 10, 256 << 20
	payload := make([]byte, frame)
	frames := make([]dockerio.FakeFrame, total/frame)
	for i := range frames {
		frames[i] = dockerio.FakeFrame{Stream: framing.Stdout, Data: payload}
	}
	f := testutil.NewFake(b)
	f.Script = func(dockerio.Sandbox, dockerio.ExecRequest) dockerio.FakeRun { return dockerio.FakeRun{Frames: frames} }
	rt := testutil.OpenFake(b, f, "")
	ctx := context.Background()
	sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: fakeImage})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(total)
	b.ResetTimer()
	for range b.N {
		p, err := sb.Start(ctx, spec.Process{Argv: []string{"x"}, Stderr: spec.Discard, OutputQuota: total})
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, p.Stdout())
		if res, err := p.Wait(ctx); err != nil || n != total {
			b.Fatalf("%+v %v %d", res, err, n)
		}
	}
}
