package bench

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// BenchmarkCheckpoint: a workspace of 10,000 files of 1 KiB each (10
// MiB), four ways in one loop: the anchor, a consistent copy of
// /workspace/work read to its end (what any checkpoint must at least do:
// freeze, Docker's archive, unfreeze); a checkpoint after one file
// changed (every blob but one already stored: content-addressed); a
// rollback to the first checkpoint (processes none, staged, exchanged,
// the old tree emptied) against its anchor, the same tree put into the
// workspace by Put (Docker's extraction); and a sandbox made from that
// checkpoint, against a plain cold create. Reported per operation in ms.
//
//	go test -run '^$' -bench BenchmarkCheckpoint -benchtime 10x ./test/bench/
func BenchmarkCheckpoint(b *testing.B) {
	e := testkit.NewAPI(b, stockade.Options{})
	ctx := context.Background()
	sb, err := e.RT.CreateSandbox(ctx, spec.Sandbox{Image: e.Image, Policy: testkit.SmallPolicy()})
	if err != nil {
		b.Fatal(err)
	}
	if _, errOut, res, err := testkit.RunOut(b, sb, spec.Process{Argv: []string{"sh", "-c",
		`mkdir d; i=0; while [ $i -lt 10000 ]; do head -c 1024 /dev/urandom > d/f$i; i=$((i+1)); done`}}); err != nil || res.ExitCode != 0 {
		b.Fatalf("tree: %+v %v %s", res, err, errOut)
	}
	first, err := sb.Checkpoint(ctx, "first")
	if err != nil {
		b.Fatal(err)
	}
	// The rollback's anchor: the same tree put into the workspace (Docker's
	// archive extraction through the export container) as a Put does.
	var tree bytes.Buffer
	rc, _, err := sb.Get(ctx, "work", true)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(&tree, rc); err != nil {
		b.Fatal(err)
	}
	_ = rc.Close()
	var get, put, ckpt, roll, from, cold time.Duration
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		rc, _, err := sb.Get(ctx, "work", true)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, rc); err != nil {
			b.Fatal(err)
		}
		if err := rc.Close(); err != nil {
			b.Fatal(err)
		}
		get += time.Since(t0)

		if _, _, res, err := testkit.RunOut(b, sb, spec.Process{Argv: []string{"sh", "-c", "date > d/f0"}, NoChanges: true}); err != nil || res.ExitCode != 0 {
			b.Fatal(res, err)
		}
		t0 = time.Now()
		ck, err := sb.Checkpoint(ctx, "")
		if err != nil {
			b.Fatal(err)
		}
		ckpt += time.Since(t0)
		if err := e.RT.RemoveCheckpoint(ctx, ck.ID); err != nil {
			b.Fatal(err)
		}

		t0 = time.Now()
		if err := sb.Put(ctx, ".", bytes.NewReader(tree.Bytes())); err != nil {
			b.Fatal(err)
		}
		put += time.Since(t0)

		t0 = time.Now()
		if err := sb.Rollback(ctx, first.ID); err != nil {
			b.Fatal(err)
		}
		roll += time.Since(t0)

		t0 = time.Now()
		n, err := e.RT.CreateSandbox(ctx, spec.Sandbox{Image: e.Image, Policy: testkit.SmallPolicy(), From: first.ID})
		if err != nil {
			b.Fatal(err)
		}
		from += time.Since(t0)
		t0 = time.Now()
		c, err := e.RT.CreateSandbox(ctx, spec.Sandbox{Image: e.Image, Policy: testkit.SmallPolicy()})
		if err != nil {
			b.Fatal(err)
		}
		cold += time.Since(t0)
		for _, s := range []*stockade.Sandbox{n, c} {
			if err := s.Remove(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(ms(get), "get-ms")
	b.ReportMetric(ms(ckpt), "checkpoint-ms")
	b.ReportMetric(ms(roll), "rollback-ms")
	b.ReportMetric(ms(from), "create-from-ms")
	b.ReportMetric(ms(cold), "create-ms")
	b.ReportMetric(ms(put), "put-ms")
	b.ReportMetric(ms(ckpt)/ms(get), "checkpoint/get")
	b.ReportMetric(ms(roll)/ms(put), "rollback/put")
}
