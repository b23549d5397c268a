package dockerio

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/stockade/stockade/spec"
)

// engine20Facts is what preflight read from the development machine:
// Docker Engine 20.10.24 on Debian 12, cgroup v1, cgroupfs, fuse-overlayfs,
// no AppArmor, seccomp reported as profile=default.
var engine20Facts = Facts{
	ControllerOS: "linux", ControllerArch: "amd64",
	Version: "20.10.24+dfsg1", APIVersion: "1.41", MinAPIVersion: "1.12", Os: "linux", Arch: "amd64",
	ID: "SQXX:7TO5:LGX5:BDY4:JCKD:5X7O:KZZG:OJU7:3VI6:WHZN:C3QU:GUK3", OSType: "linux", Architecture: "x86_64",
	CgroupVersion: "1", CgroupDriver: "cgroupfs", SecurityOptions: []string{"name=seccomp,profile=default"},
	OperatingSystem: "Debian GNU/Linux 12 (bookworm)", Driver: "fuse-overlayfs",
	MemoryLimit: true, SwapLimit: true, PidsLimit: true, CPUCfsPeriod: true, CPUCfsQuota: true,
	InitBinary: "docker-init", NCPU: 2, DockerRootDir: "/var/lib/docker", RootFree: 53 << 30,
}

// engine29Facts is a daemon the linux-x64 profile admits (values as
// Engine 29 documents them; not measured here).
var engine29Facts = Facts{
	ControllerOS: "linux", ControllerArch: "amd64",
	Version: "29.1.4", APIVersion: "1.52", MinAPIVersion: "1.44", Os: "linux", Arch: "amd64",
	ID: "3f7c1c6e-2f0a-4f4e-9a59-0e8d7e1b6a11", OSType: "linux", Architecture: "x86_64",
	CgroupVersion: "2", CgroupDriver: "systemd",
	SecurityOptions: []string{"name=apparmor", "name=seccomp,profile=builtin", "name=cgroupns"},
	OperatingSystem: "Ubuntu 24.04", Driver: "overlayfs", DriverStatus: [][2]string{{"driver-type", "io.containerd.snapshotter.v1"}},
	MemoryLimit: true, SwapLimit: true, PidsLimit: true, CPUCfsPeriod: true, CPUCfsQuota: true,
	InitBinary: "docker-init", NCPU: 8, DockerRootDir: "/var/lib/docker", RootFree: -1,
}

func failed(r Report) []string {
	var out []string
	for _, c := range r.Checks {
		if c.Required && !c.OK {
			out = append(out, c.Name)
		}
	}
	return out
}

func TestDockerioPreflightProfiles(t *testing.T) {
	p20 := engine20(t)
	r := CheckDaemon(p20, engine20Facts)
	if err := r.Err(); err != nil {
		t.Fatalf("engine20 profile refuses the measured daemon: %v", err)
	}
	if r.Revision != "engine-1.41-v5-linux-x64-engine20-cgroupv1" || r.DaemonID != engine20Facts.ID {
		t.Fatalf("revision %q, id %q", r.Revision, r.DaemonID)
	}
	if err := r.DatasetsErr(p20); !spec.IsCode(err, spec.CodeUnsupported) {
		t.Fatalf("datasets on engine20: %v", err)
	}
	def, _ := LookupProfile(DefaultProfile)
	r = CheckDaemon(def, engine20Facts)
	want := []string{"api.range", "cgroup.version", "cgroup.driver", "security.apparmor", "security.seccomp", "security.cgroupns"}
	if got := failed(r); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("linux-x64 on engine20 failed %v, want %v", got, want)
	}
	if err := r.Err(); !spec.IsCode(err, spec.CodeUnsupported) || !strings.Contains(err.Error(), "cgroup.version") {
		t.Fatalf("err %v", err)
	}
	r = CheckDaemon(def, engine29Facts)
	if err := r.Err(); err != nil {
		t.Fatalf("linux-x64 refuses engine29: %v", err)
	}
	if err := r.DatasetsErr(def); err != nil {
		t.Fatalf("datasets on engine29: %v", err)
	}
	if got := failed(CheckDaemon(p20, engine29Facts)); len(got) == 0 {
		t.Fatal("the engine20 profile admitted an Engine 29 cgroup v2 daemon")
	}
	var b strings.Builder
	if _, err := CheckDaemon(p20, engine20Facts).WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"profile   linux-x64-engine20-cgroupv1", "relaxes", "AppArmor docker-default", "result: admitted"} {
		if !strings.Contains(b.String(), s) {
			t.Fatalf("doctor output lacks %q:\n%s", s, b.String())
		}
	}
}

func TestDockerioPreflightRefusals(t *testing.T) {
	p := engine20(t)
	cases := map[string]func(*Facts){
		"controller":               func(f *Facts) { f.ControllerArch = "arm64" },
		"api.range":                func(f *Facts) { f.APIVersion = "1.40" },
		"daemon.os":                func(f *Facts) { f.Os = "windows" },
		"daemon.arch":              func(f *Facts) { f.Arch = "arm64" },
		"info.architecture":        func(f *Facts) { f.Architecture = "aarch64" },
		"desktop":                  func(f *Facts) { f.OperatingSystem = "Docker Desktop" },
		"daemon.id":                func(f *Facts) { f.ID = "a b" },
		"cgroup.version":           func(f *Facts) { f.CgroupVersion = "2" },
		"cgroup.driver":            func(f *Facts) { f.CgroupDriver = "systemd" },
		"limit.swap":               func(f *Facts) { f.SwapLimit = false },
		"limit.pids":               func(f *Facts) { f.PidsLimit = false },
		"security.rootless-userns": func(f *Facts) { f.SecurityOptions = append(f.SecurityOptions, "name=rootless") },
		"security.apparmor":        func(f *Facts) { f.SecurityOptions = append(f.SecurityOptions, "name=apparmor") },
		"security.seccomp":         func(f *Facts) { f.SecurityOptions = []string{"name=seccomp,profile=unconfined"} },
		"init.binary":              func(f *Facts) { f.InitBinary = "" },
	}
	for name, mutate := range cases {
		f := engine20Facts
		f.SecurityOptions = append([]string(nil), f.SecurityOptions...)
		mutate(&f)
		if got := failed(CheckDaemon(p, f)); len(got) != 1 || got[0] != name {
			t.Errorf("%s: failed checks %v", name, got)
		}
	}
}

func TestDockerioSelectProfile(t *testing.T) {
	t.Setenv(ProfileEnv, "")
	if p, _ := SelectProfile(""); p.Name != DefaultProfile {
		t.Fatalf("default: %s", p.Name)
	}
	t.Setenv(ProfileEnv, "linux-x64-engine20-cgroupv1")
	if p, _ := SelectProfile(""); p.Name != "linux-x64-engine20-cgroupv1" {
		t.Fatalf("env: %s", p.Name)
	}
	if p, _ := SelectProfile("desktop-apple-virtualization-native-arm64"); p.Name != "desktop-apple-virtualization-native-arm64" {
		t.Fatalf("named: %s", p.Name)
	}
	if _, err := SelectProfile("nope"); !spec.IsCode(err, spec.CodeInvalidArgument) {
		t.Fatalf("unknown: %v", err)
	}
	for _, n := range Profiles() {
		p, _ := LookupProfile(n)
		if strings.HasPrefix(n, "linux-x64-") && len(p.Relaxes) == 0 {
			t.Errorf("%s relaxes linux-x64 but names nothing", n)
		}
	}
}

func TestDockerioAdmitPolicy(t *testing.T) {
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
	if err := admitOnDaemon(spec.Policy{CPUs: 3}, 2); !spec.IsCode(err, spec.CodeUnsupported) {
		t.Errorf("cpus above the daemon's: %v", err)
	}
}

func TestDockerioAdmitImage(t *testing.T) {
	p := engine20(t)
	good := ImageFacts{ID: fixtureImage, Os: "linux", Architecture: "amd64", Labels: map[string]string{"maintainer": "x"}}
	if err := AdmitImage(p, fixtureImage, good); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func(*ImageFacts){
		"other id":       func(i *ImageFacts) { i.ID = "sha256:" + strings.Repeat("1", 64) },
		"os":             func(i *ImageFacts) { i.Os = "windows" },
		"arch":           func(i *ImageFacts) { i.Architecture = "arm64" },
		"volumes":        func(i *ImageFacts) { i.Volumes = 1 },
		"label execID":   func(i *ImageFacts) { i.Labels = map[string]string{"execID": "x"} },
		"label exitCode": func(i *ImageFacts) { i.Labels = map[string]string{"a": "b", "exitCode": "0"} },
	} {
		img := good
		f(&img)
		if err := AdmitImage(p, fixtureImage, img); !spec.IsCode(err, spec.CodeUnsupported) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzDockerioAdmitPolicy: over arbitrary field values, admission never
// panics, returns nil or a typed invalid_argument/unsupported error, and
// whatever it admits Docker can represent exactly.
func FuzzDockerioAdmitPolicy(f *testing.F) {
	d := spec.DefaultPolicy()
	f.Add(d.CPUs, d.MemoryBytes, d.Pids, d.HomeBytes, d.TmpBytes, d.User.UID, d.User.GID, string(d.Network))
	f.Add(0.1, int64(6<<20), int64(1), int64(4096), int64(4096), int64(1), int64(1), "bridge")
	f.Add(1024.0, int64(1<<40), int64(MaxPids), int64(1<<30), int64(1<<30), int64(1<<32-2), int64(1), "isolated")
	f.Add(math.Inf(1), int64(-1), int64(0), int64(0), int64(-5), int64(-1), int64(0), "host")
	f.Add(1e-12, int64(6<<20-1), int64(math.MaxInt64), int64(1), int64(4095), int64(0), int64(1<<33), "")
	f.Fuzz(func(t *testing.T, cpus float64, mem, pids, home, tmp, uid, gid int64, network string) {
		p := spec.Policy{CPUs: cpus, MemoryBytes: mem, Pids: pids, HomeBytes: home, TmpBytes: tmp,
			Network: spec.NetworkKind(network), User: spec.User{UID: uid, GID: gid}}
		err := AdmitPolicy(p)
		if err != nil {
			var se *spec.Error
			if !errors.As(err, &se) || (se.Code != spec.CodeInvalidArgument && se.Code != spec.CodeUnsupported) {
				t.Fatalf("untyped or wrong code: %v", err)
			}
			return
		}
		nano := cpus * 1e9
		if nano != math.Trunc(nano) || nano < MinNanoCPUs || cpus > MaxCPUs || mem < MinMemoryBytes || mem%PageSize != 0 ||
			pids <= 0 || pids > MaxPids || home <= 0 || home%PageSize != 0 || tmp <= 0 || tmp%PageSize != 0 || uid <= 0 || gid <= 0 {
			t.Fatalf("admitted %+v", p)
		}
		b := body(Profile{Init: true}, spec.Sandbox{Policy: p}, "o", "s", RoleWorkload, "v", "n")
		if float64(b.HostConfig.NanoCPUs) != nano || b.HostConfig.Memory != b.HostConfig.MemorySwap {
			t.Fatalf("body does not carry the policy exactly: %+v", b.HostConfig.Resources)
		}
	})
}

// TestDockerioWorkspaceDiskCheck: doctor says what bounds a workspace (the
// file system under the daemon's root, nothing per sandbox), as
// information that never refuses a daemon.
func TestDockerioWorkspaceDiskCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    Facts
		want string
	}{
		{"local daemon", engine20Facts, "unbounded: a local volume under /var/lib/docker/volumes, 53.0 GiB free there on this host"},
		{"remote daemon", engine29Facts, "unbounded: a local volume under /var/lib/docker/volumes, free space unknown (the daemon is not on this host)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := LookupProfile(DefaultProfile)
			r := CheckDaemon(p, tc.f)
			var c *Check
			for i := range r.Checks {
				if r.Checks[i].Name == "workspace.disk" {
					c = &r.Checks[i]
				}
			}
			if c == nil || c.Observed != tc.want || c.OK || c.Required || !strings.Contains(c.Remedy, "/var/lib/docker") {
				t.Fatalf("workspace.disk check %+v, want information observing %q", c, tc.want)
			}
		})
	}
}
