package sandboxflag

import (
	"reflect"
	"strings"
	"testing"

	stockade "github.com/stockade/stockade"
	"github.com/stockade/stockade/spec"
)

func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"512m", 512 << 20, true}, {"1G", 1 << 30, true}, {"64k", 64 << 10, true}, {"4096", 4096, true}, {"0", 0, true},
		{"", 0, false}, {"-1m", 0, false}, {"lots", 0, false}, {"99999999999g", 0, false},
	} {
		got, err := Bytes(tc.in)
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("Bytes(%q) = %d, %v", tc.in, got, err)
		}
		if err != nil && !spec.IsCode(err, spec.CodeInvalidArgument) {
			t.Errorf("Bytes(%q): untyped error %v", tc.in, err)
		}
	}
}

func TestParseUser(t *testing.T) {
	if u, err := User("1000:1001"); err != nil || u.UID != 1000 || u.GID != 1001 {
		t.Fatalf("%+v %v", u, err)
	}
	for _, bad := range []string{"", "1000", "a:b", "1:2:3"} {
		if _, err := User(bad); !spec.IsCode(err, spec.CodeInvalidArgument) {
			t.Errorf("User(%q): %v", bad, err)
		}
	}
}

// TestPool: --pool NAME=KEY=VALUE,...,size=N becomes a pool spec
// whose policy is what the same flags of sandbox create make (defaults
// field by field); every bad name, key or value is refused, named.
func TestPool(t *testing.T) {
	def := spec.DefaultPolicy()
	with := func(f func(*spec.Policy)) spec.Policy { p := def; f(&p); return p }
	const toolbox = "stockade/toolbox:dev"
	for _, tc := range []struct {
		in   string
		want stockade.PoolSpec
	}{
		{"py=image=stockade/python:dev,memory=512m,cpus=1,size=4",
			stockade.PoolSpec{Name: "py", Size: 4, Sandbox: spec.Sandbox{Image: "stockade/python:dev", Policy: with(func(p *spec.Policy) { p.MemoryBytes, p.CPUs = 512<<20, 1 })}}},
		{"p0=size=0", stockade.PoolSpec{Name: "p0", Sandbox: spec.Sandbox{Image: toolbox, Policy: def}}},
		{"a-b_c=size=1000,pids=9,user=1000:1001,network=open",
			stockade.PoolSpec{Name: "a-b_c", Size: 1000, Sandbox: spec.Sandbox{Image: toolbox, Policy: with(func(p *spec.Policy) {
				p.Pids, p.User, p.Network = 9, spec.User{UID: 1000, GID: 1001}, spec.NetworkOpen
			})}}},
		// An allowlist pool has no rules: the claimant brings them.
		{"net=network=allowlist,size=2", stockade.PoolSpec{Name: "net", Size: 2, Sandbox: spec.Sandbox{Image: toolbox, Policy: with(func(p *spec.Policy) { p.Network = spec.NetworkAllowlist })}}},
		{"img=image=sha256:" + strings.Repeat("0", 64) + ",size=1", stockade.PoolSpec{Name: "img", Size: 1, Sandbox: spec.Sandbox{Image: "sha256:" + strings.Repeat("0", 64), Policy: def}}},
		// memory=0 and cpus=0 are the defaults, as their flags'.
		{"z=memory=0,cpus=0,size=3", stockade.PoolSpec{Name: "z", Size: 3, Sandbox: spec.Sandbox{Image: toolbox, Policy: def}}},
	} {
		got, err := Pool("serve", tc.in)
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q:\n got %+v\nwant %+v", tc.in, got, tc.want)
		}
	}
	for _, tc := range []struct {
		in, why string
	}{
		{"", "is not NAME="},
		{"py", "is not NAME="},
		{"py=", "is not NAME="},
		{"=size=1", "empty"},
		{"Py=size=1", "only a-z"},
		{"-py=size=1", "only a-z"},
		{strings.Repeat("p", 33) + "=size=1", "over 32"},
		{"py=image=x", "no size=N"},
		{"py=size=", "size \"\""},
		{"py=size=-1", "size \"-1\""},
		{"py=size=1001", "size \"1001\""},
		{"py=size=four", "size \"four\""},
		{"py=size=1,size=2", "size is given twice"},
		{"py=size=1,memory=1g,memory=2g", "memory is given twice"},
		{"py=size=1,gpus=1", "unknown key \"gpus\""},
		{"py=size=1,ttl=1h", "unknown key \"ttl\""},
		{"py=size=1,env=A=1", "unknown key \"env\""},
		{"py=size=1,label=a=b", "unknown key \"label\""},
		{"py=size=1,journal=/j", "unknown key \"journal\""},
		{"py=size=1,cpus", "\"cpus\" is not KEY=VALUE"},
		{"py=size=1,,cpus=1", "\"\" is not KEY=VALUE"},
		{"py=size=1,cpus=lots", "cpus=\"lots\""},
		{"py=size=1,cpus=-1", "cpus"},
		{"py=size=1,cpus=0.001", "cpu"},
		{"py=size=1,pids=many", "pids=\"many\""},
		{"py=size=1,memory=lots", "--memory \"lots\""},
		{"py=size=1,memory=1000", "memory"},
		{"py=size=1,user=root", "--user \"root\""},
		{"py=size=1,user=0:0", "root"},
		{"py=size=1,network=bogus", "network \"bogus\""},
		{"py=size=1,network=allow=example.com:443", "allowlist rules are the claimant's"},
		{"py=size=1,network=allow=a.com,b.com", "\"b.com\" is not KEY=VALUE"},
		{"py=size=1,image=", "image is empty"},
		{"py=size=1,image=Bad Image", "py"},
	} {
		_, err := Pool("serve", tc.in)
		if !spec.IsCode(err, spec.CodeInvalidArgument) || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("%q: %v, want invalid_argument saying %q", tc.in, err, tc.why)
		}
	}
}
