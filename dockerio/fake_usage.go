package dockerio

import (
	"context"
	"time"

	"github.com/stockade/stockade/spec"
)

// FakeTick is what each SampleUsage of the Fake adds to a running
// workload's CPU time: its cgroup counts up as a real one would, so a
// ledger summing runs has something to sum.
const FakeTick = 5 * time.Millisecond

// FakeMemory is the working set, and FakeMemoryPeak the peak, every
// running workload of the Fake reports.
const (
	FakeMemory     = 1 << 20
	FakeMemoryPeak = 2 << 20
)

// SampleUsage reports a running workload's cgroup: its CPU time grows by
// FakeTick a call (from 0 at each start), its memory is FakeMemory, its
// peak FakeMemoryPeak, and it runs one task.
func (f *Fake) SampleUsage(ctx context.Context, sb Sandbox) (CgroupSample, error) {
	var out CgroupSample
	err := f.with(ctx, "SampleUsage", sb, func(s *fakeSandbox) error {
		if !s.running {
			return spec.Errorf(spec.CodeNotFound, "dockerio.usage", "%s is not running: it has no cgroup to read", Name(sb.Owner, sb.ID, RoleWorkload))
		}
		s.use.CPU += FakeTick
		s.use.At = time.Now()
		s.use.Memory, s.use.MemoryPeak, s.use.Pids = FakeMemory, FakeMemoryPeak, 1
		out = s.use
		return nil
	})
	return out, err
}
