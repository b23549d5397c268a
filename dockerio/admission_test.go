package dockerio

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/stockade/stockade/profile"
	"github.com/stockade/stockade/spec"
)

func TestDockerioAdmitImage(t *testing.T) {
	p := engine20(t)
	good := imageFacts{ID: fixtureImage, Os: "linux", Architecture: "amd64", Labels: map[string]string{"maintainer": "x"}}
	if err := admitImage(p, fixtureImage, good); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func(*imageFacts){
		"other id":       func(i *imageFacts) { i.ID = "sha256:" + strings.Repeat("1", 64) },
		"os":             func(i *imageFacts) { i.Os = "windows" },
		"arch":           func(i *imageFacts) { i.Architecture = "arm64" },
		"volumes":        func(i *imageFacts) { i.Volumes = 1 },
		"label execID":   func(i *imageFacts) { i.Labels = map[string]string{"execID": "x"} },
		"label exitCode": func(i *imageFacts) { i.Labels = map[string]string{"a": "b", "exitCode": "0"} },
	} {
		img := good
		f(&img)
		if err := admitImage(p, fixtureImage, img); !spec.IsCode(err, spec.CodeUnsupported) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestDockerioAdmitOnDaemon: a CPU quota above the daemon's CPUs is refused.
func TestDockerioAdmitOnDaemon(t *testing.T) {
	if err := admitOnDaemon(spec.Policy{CPUs: 3}, 2); !spec.IsCode(err, spec.CodeUnsupported) {
		t.Errorf("cpus above the daemon's: %v", err)
	}
}

// FuzzDockerioAdmitPolicy: over arbitrary field values, admission never
// panics, returns nil or a typed invalid_argument/unsupported error, and
// whatever it admits Docker can represent exactly.
func FuzzDockerioAdmitPolicy(f *testing.F) {
	d := spec.DefaultPolicy()
	f.Add(d.CPUs, d.MemoryBytes, d.Pids, d.HomeBytes, d.TmpBytes, d.User.UID, d.User.GID, string(d.Network))
	f.Add(0.1, int64(6<<20), int64(1), int64(4096), int64(4096), int64(1), int64(1), "bridge")
	f.Add(1024.0, int64(1<<40), int64(profile.MaxPids), int64(1<<30), int64(1<<30), int64(1<<32-2), int64(1), "isolated")
	f.Add(math.Inf(1), int64(-1), int64(0), int64(0), int64(-5), int64(-1), int64(0), "host")
	f.Add(1e-12, int64(6<<20-1), int64(math.MaxInt64), int64(1), int64(4095), int64(0), int64(1<<33), "")
	f.Fuzz(func(t *testing.T, cpus float64, mem, pids, home, tmp, uid, gid int64, network string) {
		p := spec.Policy{CPUs: cpus, MemoryBytes: mem, Pids: pids, HomeBytes: home, TmpBytes: tmp,
			Network: spec.NetworkKind(network), User: spec.User{UID: uid, GID: gid}}
		err := profile.AdmitPolicy(p)
		if err != nil {
			var se *spec.Error
			if !errors.As(err, &se) || (se.Code != spec.CodeInvalidArgument && se.Code != spec.CodeUnsupported) {
				t.Fatalf("untyped or wrong code: %v", err)
			}
			return
		}
		nano := cpus * 1e9
		if nano != math.Trunc(nano) || nano < profile.MinNanoCPUs || cpus > profile.MaxCPUs || mem < profile.MinMemoryBytes || mem%profile.PageSize != 0 ||
			pids <= 0 || pids > profile.MaxPids || home <= 0 || home%profile.PageSize != 0 || tmp <= 0 || tmp%profile.PageSize != 0 || uid <= 0 || gid <= 0 {
			t.Fatalf("admitted %+v", p)
		}
		b := body(profile.Profile{Init: true}, spec.Sandbox{Policy: p}, "o", "s", RoleWorkload, "v", "n")
		if float64(b.HostConfig.NanoCPUs) != nano || b.HostConfig.Memory != b.HostConfig.MemorySwap {
			t.Fatalf("body does not carry the policy exactly: %+v", b.HostConfig.Resources)
		}
	})
}
