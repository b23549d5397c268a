package profile

import (
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

func TestPreflightProfiles(t *testing.T) {
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
	def, _ := Lookup(Default)
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

func TestPreflightRefusals(t *testing.T) {
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

func TestSelect(t *testing.T) {
	t.Setenv(Env, "")
	if p, _ := Select(""); p.Name != Default {
		t.Fatalf("default: %s", p.Name)
	}
	t.Setenv(Env, "linux-x64-engine20-cgroupv1")
	if p, _ := Select(""); p.Name != "linux-x64-engine20-cgroupv1" {
		t.Fatalf("env: %s", p.Name)
	}
	if p, _ := Select("desktop-apple-virtualization-native-arm64"); p.Name != "desktop-apple-virtualization-native-arm64" {
		t.Fatalf("named: %s", p.Name)
	}
	if _, err := Select("nope"); !spec.IsCode(err, spec.CodeInvalidArgument) {
		t.Fatalf("unknown: %v", err)
	}
	for _, n := range Names() {
		p, _ := Lookup(n)
		if strings.HasPrefix(n, "linux-x64-") && len(p.Relaxes) == 0 {
			t.Errorf("%s relaxes linux-x64 but names nothing", n)
		}
	}
}

// TestDockerioWorkspaceDiskCheck: doctor says what bounds a workspace (the
// file system under the daemon's root, nothing per sandbox), as
// information that never refuses a daemon.
func TestWorkspaceDiskCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    Facts
		want string
	}{
		{"local daemon", engine20Facts, "unbounded: a local volume under /var/lib/docker/volumes, 53.0 GiB free there on this host"},
		{"remote daemon", engine29Facts, "unbounded: a local volume under /var/lib/docker/volumes, free space unknown (the daemon is not on this host)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := Lookup(Default)
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

func engine20(t *testing.T) Profile {
	t.Helper()
	p, err := Lookup("linux-x64-engine20-cgroupv1")
	if err != nil {
		t.Fatal(err)
	}
	return p
}
