package profile

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/stockade/stockade/spec"
)

// SchemaVersion is the version of the sandbox body (the container request
// and what readback checks); v5 added HostConfig.Init to the v4 body. It is part of every resource's revision label: a sandbox
// made under another schema is torn down on recovery, never re-adopted.
const SchemaVersion = 5

// Default is used when no profile is named: the profile that gives
// every guarantee.
const Default = "linux-x64"

// Env names the environment variable that selects a profile.
const Env = "STOCKADE_PROFILE"

// Relaxation is one guarantee a profile gives up relative to the
// linux-x64 profile, and why.
type Relaxation struct {
	Guarantee string
	Why       string
}

// Profile is what a daemon must look like (and what stockade asks of it)
// for sandboxes to be admitted. Profiles are data; which one applies is always
// named explicitly, never "the first that passes".
type Profile struct {
	Name string
	// ControllerOS and ControllerArch are runtime.GOOS/GOARCH of the process
	// that drives the daemon.
	ControllerOS, ControllerArch string
	// DaemonArch is /version's Arch; DaemonInfoArchs lists the accepted
	// values of /info's Architecture.
	DaemonArch      string
	DaemonInfoArchs []string
	// ImageArch is the architecture a sandbox image must have.
	ImageArch string
	// APIVersion is the Engine API version the profile drives; the daemon's
	// supported range (MinAPIVersion..ApiVersion) must include it and the
	// client is pinned to it.
	APIVersion string
	// CgroupVersion ("1" or "2") and CgroupDriver ("systemd", "cgroupfs").
	CgroupVersion string
	CgroupDriver  string
	// AppArmor: the daemon must list name=apparmor; AppArmorProfile is what
	// a started container's AppArmorProfile must read.
	AppArmor        bool
	AppArmorProfile string
	// Desktop: the daemon is Docker Desktop.
	Desktop bool
	// Seccomp is the SecurityOptions entry that proves the default seccomp
	// profile is applied.
	Seccomp string
	// CgroupnsOption: the daemon must list name=cgroupns. CgroupnsMode
	// private is requested and verified in readback either way.
	CgroupnsOption bool
	// Init: HostConfig.Init is requested and verified (PID 1 reaps zombies);
	// the daemon must report an init binary.
	Init bool
	// Datasets: image mounts are admitted (needs the containerd image store
	// and Engine ≥ 29.1.4); false refuses any dataset with unsupported.
	Datasets bool
	// Allowlist: the allowlist network's isolation was verified on this
	// engine (an internal bridge with inhibit_ipv4 leaves the workload no
	// route to the host or the outside, only to its egress proxy: the
	// behaviour moved between engine releases, so each profile states it);
	// false refuses allowlist sandboxes with unsupported.
	Allowlist bool
	// Relaxes names every guarantee the profile gives up relative to
	// linux-x64, and why. Empty for the profiles that give every guarantee.
	Relaxes []Relaxation
}

// Revision is the backend revision string every resource is labelled with:
// engine-<api>-v<schema>-<profile>, e.g. engine-1.52-v5-linux-x64.
func (p Profile) Revision() string {
	return fmt.Sprintf("engine-%s-v%d-%s", p.APIVersion, SchemaVersion, p.Name)
}

// profiles holds every profile, as data: three that give every guarantee
// (linux-x64 and two Docker Desktop ones) and one for Docker Engine 20.10
// on cgroup v1 that names each guarantee it gives up.
var profiles = map[string]Profile{
	"linux-x64": {
		Name: "linux-x64", ControllerOS: "linux", ControllerArch: "amd64",
		DaemonArch: "amd64", DaemonInfoArchs: []string{"amd64", "x86_64"}, ImageArch: "amd64",
		APIVersion: "1.52", CgroupVersion: "2", CgroupDriver: "systemd",
		AppArmor: true, AppArmorProfile: "docker-default",
		Seccomp: "name=seccomp,profile=builtin", CgroupnsOption: true, Init: true, Datasets: true,
	},
	"desktop-apple-virtualization-native-arm64": {
		Name: "desktop-apple-virtualization-native-arm64", ControllerOS: "darwin", ControllerArch: "arm64",
		DaemonArch: "arm64", DaemonInfoArchs: []string{"arm64", "aarch64"}, ImageArch: "arm64",
		APIVersion: "1.52", CgroupVersion: "2", CgroupDriver: "cgroupfs", Desktop: true,
		Seccomp: "name=seccomp,profile=builtin", CgroupnsOption: true, Init: true, Datasets: true,
	},
	"desktop-apple-virtualization-rosetta-amd64": {
		Name: "desktop-apple-virtualization-rosetta-amd64", ControllerOS: "darwin", ControllerArch: "arm64",
		DaemonArch: "arm64", DaemonInfoArchs: []string{"arm64", "aarch64"}, ImageArch: "amd64",
		APIVersion: "1.52", CgroupVersion: "2", CgroupDriver: "cgroupfs", Desktop: true,
		Seccomp: "name=seccomp,profile=builtin", CgroupnsOption: true, Init: true, Datasets: true,
	},
	// linux-x64-engine20-cgroupv1 is Docker Engine 20.10 (API 1.41) on a
	// cgroup v1 host with the cgroupfs driver and no AppArmor, as measured on
	// the development machine. Everything else is kept: the same container
	// body, readback, limits (cgroup v1 memory, memsw, pids and CFS
	// controllers are required), seccomp default profile, init, rootless and
	// userns refused.
	"linux-x64-engine20-cgroupv1": {
		Name: "linux-x64-engine20-cgroupv1", ControllerOS: "linux", ControllerArch: "amd64",
		DaemonArch: "amd64", DaemonInfoArchs: []string{"amd64", "x86_64"}, ImageArch: "amd64",
		APIVersion: "1.41", CgroupVersion: "1", CgroupDriver: "cgroupfs",
		AppArmor: false, AppArmorProfile: "",
		Seccomp: "name=seccomp,profile=default", CgroupnsOption: false, Init: true, Datasets: false,
		Allowlist: true,
		Relaxes: []Relaxation{
			{"API 1.52 (Engine 29)", "Engine 20.10 supports API 1.12..1.41; the client is pinned to 1.41, so newer API fields (image mounts, per-exec ConsoleSize, the multiplexed media type) do not exist"},
			{"cgroup v2", "the host runs cgroup v1: limits live in per-controller hierarchies (memory.limit_in_bytes, memory.memsw.limit_in_bytes, pids.max); v2's unified accounting and memory.oom.group are absent, so an OOM kills one task, not the sandbox"},
			{"systemd cgroup driver", "the daemon uses cgroupfs: containers are not systemd units, so systemd does not account or clean them up"},
			{"AppArmor docker-default", "the kernel has no AppArmor (SecurityOptions lists none): no MAC profile confines a sandbox; seccomp, dropped capabilities, no-new-privileges and the read-only root remain"},
			{"seccomp reported as profile=builtin", "Engine 20.10 names its built-in default profile profile=default; it is the same default allowlist, required here"},
			{"name=cgroupns security option", "Engine 20.10 does not list cgroupns in SecurityOptions on cgroup v1; CgroupnsMode private is still requested and verified in readback"},
			{"image datasets", "image mounts need API ≥ 1.48, Engine ≥ 29.1.4 and the containerd image store: any dataset is refused with unsupported"},
		},
	},
}

// Names returns every known profile name, sorted.
func Names() []string {
	names := make([]string, 0, len(profiles))
	for n := range profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Lookup returns the named profile, or an invalid_argument error
// listing the known ones.
func Lookup(name string) (Profile, error) {
	p, ok := profiles[name]
	if !ok {
		return Profile{}, spec.Errorf(spec.CodeInvalidArgument, "profile",
			"unknown profile %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	p.DaemonInfoArchs = append([]string(nil), p.DaemonInfoArchs...)
	p.Relaxes = append([]Relaxation(nil), p.Relaxes...)
	return p, nil
}

// Select picks the profile explicitly: the given name if not empty,
// else $STOCKADE_PROFILE if set, else Default. It never probes the
// daemon to pick one that passes.
func Select(name string) (Profile, error) {
	if name == "" {
		name = os.Getenv(Env)
	}
	if name == "" {
		name = Default
	}
	return Lookup(name)
}
