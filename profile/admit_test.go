package profile

import (
	"math"
	"testing"

	"github.com/stockade/stockade/spec"
)

func TestAdmitPolicy(t *testing.T) {
	ok := spec.DefaultPolicy()
	cases := []struct {
		name string
		f    func(*spec.Policy)
		code spec.Code
	}{
		{"memory below 6 MiB", func(p *spec.Policy) { p.MemoryBytes = 6<<20 - 4096 }, spec.CodeUnsupported},
		{"memory not pages", func(p *spec.Policy) { p.MemoryBytes = 64<<20 + 1 }, spec.CodeUnsupported},
		{"cpus unrepresentable", func(p *spec.Policy) { p.CPUs = 1e-10 }, spec.CodeUnsupported},
		{"cpus fraction", func(p *spec.Policy) { p.CPUs = 0.5000000001 }, spec.CodeUnsupported},
		{"cpus above 1024", func(p *spec.Policy) { p.CPUs = 1025 }, spec.CodeUnsupported},
		{"cpus below 0.01", func(p *spec.Policy) { p.CPUs = 0.001 }, spec.CodeUnsupported},
		{"pids above kernel", func(p *spec.Policy) { p.Pids = MaxPids + 1 }, spec.CodeUnsupported},
		{"tmpfs not pages", func(p *spec.Policy) { p.TmpBytes = 1000 }, spec.CodeUnsupported},
		{"home not pages", func(p *spec.Policy) { p.HomeBytes = 4097 }, spec.CodeUnsupported},
		{"pids zero", func(p *spec.Policy) { p.Pids = 0 }, spec.CodeInvalidArgument},
		{"cpus NaN", func(p *spec.Policy) { p.CPUs = math.NaN() }, spec.CodeInvalidArgument},
		{"root", func(p *spec.Policy) { p.User.UID = 0 }, spec.CodeInvalidArgument},
		{"gid range", func(p *spec.Policy) { p.User.GID = 1 << 40 }, spec.CodeInvalidArgument},
		{"ok 6 MiB", func(p *spec.Policy) { p.MemoryBytes = 6 << 20 }, ""},
		{"ok 0.5 cpu", func(p *spec.Policy) { p.CPUs = 0.5 }, ""},
	}
	for _, c := range cases {
		p := ok
		c.f(&p)
		err := AdmitPolicy(p)
		if spec.CodeOf(err) != c.code || (c.code == "") != (err == nil) {
			t.Errorf("%s: got %v, want code %q", c.name, err, c.code)
		}
	}
}
