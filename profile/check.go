package profile

import (
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/stockade/stockade/spec"
)

// Facts is what preflight reads from the controller and the daemon (/version
// and /info). CheckDaemon is a pure function of it, so the checks are
// unit-tested against recorded values.
type Facts struct {
	ControllerOS, ControllerArch string
	// From /version.
	Version, APIVersion, MinAPIVersion, Os, Arch string
	// From /info.
	ID, OSType, Architecture, CgroupVersion, CgroupDriver string
	SecurityOptions                                       []string
	OperatingSystem, Driver                               string
	DriverStatus                                          [][2]string
	MemoryLimit, SwapLimit, PidsLimit                     bool
	CPUCfsPeriod, CPUCfsQuota                             bool
	InitBinary                                            string
	NCPU                                                  int
	// DockerRootDir holds the volumes (a workspace is a local volume);
	// RootFree is the free space of the file system of its volumes
	// directory as this host sees it (-1: unknown, e.g. the daemon is not
	// on this host).
	DockerRootDir string
	RootFree      int64
}

// Check is one line of the doctor report.
type Check struct {
	Name     string
	Observed string
	Want     string
	OK       bool
	// Required: a failed required check refuses the daemon. Dataset checks
	// are informational unless a sandbox asks for datasets.
	Required bool
	Remedy   string
}

// Report is the doctor report: the profile in use, what it relaxes, and
// every check with its observed value.
type Report struct {
	Profile  string
	Revision string
	DaemonID string
	Version  string
	// APIVersion is the API version the client drives (the profile's).
	APIVersion string
	Relaxes    []Relaxation
	Checks     []Check
}

// OK reports whether every required check passed.
func (r Report) OK() bool { return r.Err() == nil }

// Err returns nil when every required check passed, else an unsupported
// *spec.Error naming each failed check and its observed value.
func (r Report) Err() error {
	var bad []string
	for _, c := range r.Checks {
		if c.Required && !c.OK {
			bad = append(bad, fmt.Sprintf("%s (observed %q, want %s)", c.Name, c.Observed, c.Want))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return unsupported("profile.preflight", "daemon does not match profile %s: %s", r.Profile, strings.Join(bad, "; "))
}

// DatasetsErr returns nil if the daemon admits image datasets under the
// profile, else unsupported naming why.
func (r Report) DatasetsErr(p Profile) error {
	if !p.Datasets {
		return unsupported("profile.datasets", "profile %s does not admit image datasets (image mounts need API >= 1.48, Engine >= 29.1.4 and the containerd image store)", p.Name)
	}
	for _, c := range r.Checks {
		if strings.HasPrefix(c.Name, "datasets.") && !c.OK {
			return unsupported("profile.datasets", "image datasets: %s observed %q, want %s", c.Name, c.Observed, c.Want)
		}
	}
	return nil
}

// WriteTo prints the report for people (the CLI's doctor).
func (r Report) WriteTo(w io.Writer) (int64, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "profile   %s\nrevision  %s\ndaemon    %s (Engine %s, API %s)\n", r.Profile, r.Revision, r.DaemonID, r.Version, r.APIVersion)
	if len(r.Relaxes) > 0 {
		fmt.Fprintf(&b, "relaxes (relative to %s):\n", Default)
		for _, x := range r.Relaxes {
			fmt.Fprintf(&b, "  - %s: %s\n", x.Guarantee, x.Why)
		}
	}
	b.WriteString("checks:\n")
	for _, c := range r.Checks {
		mark := "ok  "
		switch {
		case !c.OK && c.Required:
			mark = "FAIL"
		case !c.OK:
			mark = "info"
		}
		fmt.Fprintf(&b, "  %s %-24s observed %q, want %s", mark, c.Name, c.Observed, c.Want)
		if !c.OK && c.Remedy != "" {
			fmt.Fprintf(&b, "\n       remedy: %s", c.Remedy)
		}
		b.WriteByte('\n')
	}
	if err := r.Err(); err != nil {
		fmt.Fprintf(&b, "result: refused: %v\n", err)
	} else {
		b.WriteString("result: admitted\n")
	}
	n, err := io.WriteString(w, b.String())
	return int64(n), err
}

var daemonIDPattern = regexp.MustCompile(`^[^\s/\\]{1,256}$`)

// apiNumber parses "1.41" into 1041, so versions compare as integers; -1
// when malformed.
func apiNumber(v string) int {
	major, minor, ok := strings.Cut(v, ".")
	if !ok {
		return -1
	}
	a, err1 := strconv.Atoi(major)
	b, err2 := strconv.Atoi(minor)
	if err1 != nil || err2 != nil || a < 0 || b < 0 || b >= 1000 {
		return -1
	}
	return a*1000 + b
}

// engineAtLeast reports whether an Engine version "X.Y.Z" (a suffix after
// '+' or '-' ignored) is at least the given one.
func engineAtLeast(version string, want [3]int) bool {
	v, _, _ := strings.Cut(version, "+")
	v, _, _ = strings.Cut(v, "-")
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return false
	}
	for i := range 3 {
		n, err := strconv.Atoi(parts[i])
		if err != nil {
			return false
		}
		if n != want[i] {
			return n > want[i]
		}
	}
	return true
}

// CheckDaemon checks facts against the profile (the controller's OS and
// architecture, then the daemon's) and returns every check.
func CheckDaemon(p Profile, f Facts) Report {
	r := Report{Profile: p.Name, Revision: p.Revision(), DaemonID: f.ID, Version: f.Version, APIVersion: p.APIVersion, Relaxes: p.Relaxes}
	add := func(name, observed, want string, ok, required bool, remedy string) {
		r.Checks = append(r.Checks, Check{Name: name, Observed: observed, Want: want, OK: ok, Required: required, Remedy: remedy})
	}
	has := func(opt string) bool {
		for _, s := range f.SecurityOptions {
			if s == opt || strings.HasPrefix(s, opt+",") {
				return true
			}
		}
		return false
	}
	yes := func(b bool) string { return strconv.FormatBool(b) }
	want := p.ControllerOS + "/" + p.ControllerArch
	add("controller", f.ControllerOS+"/"+f.ControllerArch, want, f.ControllerOS+"/"+f.ControllerArch == want, true,
		"run stockade on a "+want+" host or choose the profile for this one")
	lo, hi, api := apiNumber(f.MinAPIVersion), apiNumber(f.APIVersion), apiNumber(p.APIVersion)
	add("api.range", f.MinAPIVersion+".."+f.APIVersion, "a range including "+p.APIVersion, lo >= 0 && hi >= 0 && lo <= api && api <= hi, true,
		"upgrade the Docker Engine or select the profile matching its API version")
	add("daemon.os", f.Os, "linux", f.Os == "linux", true, "use a Linux Docker daemon")
	add("daemon.arch", f.Arch, p.DaemonArch, f.Arch == p.DaemonArch, true, "select the profile for this architecture")
	infoArch := false
	for _, a := range p.DaemonInfoArchs {
		infoArch = infoArch || a == f.Architecture
	}
	add("info.architecture", f.Architecture, strings.Join(p.DaemonInfoArchs, " or "), infoArch, true, "select the profile for this architecture")
	add("info.ostype", f.OSType, "linux", f.OSType == "linux", true, "use Linux containers")
	desktop := f.OperatingSystem == "Docker Desktop"
	add("desktop", yes(desktop), yes(p.Desktop), desktop == p.Desktop, true, "select a desktop profile for Docker Desktop, linux-x64 otherwise")
	add("daemon.id", f.ID, "a non-empty id without spaces or slashes", daemonIDPattern.MatchString(f.ID), true, "the daemon's /info ID is malformed")
	add("cgroup.version", f.CgroupVersion, p.CgroupVersion, f.CgroupVersion == p.CgroupVersion, true,
		"boot the host with the cgroup hierarchy the profile needs (systemd.unified_cgroup_hierarchy=1 for v2) or select the matching profile")
	add("cgroup.driver", f.CgroupDriver, p.CgroupDriver, f.CgroupDriver == p.CgroupDriver, true,
		"set exec-opts native.cgroupdriver="+p.CgroupDriver+" in daemon.json")
	add("limit.memory", yes(f.MemoryLimit), "true", f.MemoryLimit, true, "enable the memory cgroup controller")
	add("limit.swap", yes(f.SwapLimit), "true", f.SwapLimit, true, "enable swap accounting (swapaccount=1 on cgroup v1)")
	add("limit.pids", yes(f.PidsLimit), "true", f.PidsLimit, true, "enable the pids cgroup controller")
	add("limit.cpu-cfs-period", yes(f.CPUCfsPeriod), "true", f.CPUCfsPeriod, true, "enable CFS bandwidth control (CONFIG_CFS_BANDWIDTH)")
	add("limit.cpu-cfs-quota", yes(f.CPUCfsQuota), "true", f.CPUCfsQuota, true, "enable CFS bandwidth control (CONFIG_CFS_BANDWIDTH)")
	var remap []string
	for _, s := range f.SecurityOptions {
		if l := strings.ToLower(s); strings.Contains(l, "rootless") || strings.Contains(l, "userns") {
			remap = append(remap, s)
		}
	}
	add("security.rootless-userns", strings.Join(remap, ","), "absent", len(remap) == 0, true,
		"run a rootful daemon without userns-remap: stockade's uid, limit and readback guarantees assume it")
	add("security.apparmor", yes(has("name=apparmor")), yes(p.AppArmor), has("name=apparmor") == p.AppArmor, true,
		"enable AppArmor on the host, or select a profile that names its absence")
	add("security.seccomp", strings.Join(f.SecurityOptions, " "), p.Seccomp, has(p.Seccomp), true,
		"run the daemon with its default seccomp profile (no --seccomp-profile=unconfined)")
	if p.CgroupnsOption {
		add("security.cgroupns", yes(has("name=cgroupns")), "true", has("name=cgroupns"), true, "use a cgroup v2 host so the daemon offers cgroup namespaces")
	} else {
		add("security.cgroupns", yes(has("name=cgroupns")), "not required (CgroupnsMode private is verified in readback)", true, false, "")
	}
	if p.Init {
		add("init.binary", f.InitBinary, "an init binary (docker-init)", f.InitBinary != "", true, "install docker-init (tini) so HostConfig.Init can reap zombies")
	}
	store := ""
	for _, kv := range f.DriverStatus {
		if kv[0] == "driver-type" {
			store = kv[1]
		}
	}
	add("datasets.image-store", f.Driver+" "+store, "overlayfs io.containerd.snapshotter.v1", f.Driver == "overlayfs" && store == "io.containerd.snapshotter.v1", false,
		"enable the containerd image store (features.containerd-snapshotter) for image datasets")
	add("datasets.engine-version", f.Version, ">= 29.1.4", engineAtLeast(f.Version, [3]int{29, 1, 4}), false,
		"upgrade to Engine 29.1.4 or later for image datasets")
	add("datasets.profile", yes(p.Datasets), "true", p.Datasets, false, "select a profile that admits image datasets")
	// A workspace is a volume of the local driver: a host directory with
	// no size option on any engine this runs on (the driver's size= is for
	// tmpfs only, and storage-opt size bounds a container's root, not a
	// volume). What bounds it is the file system under the daemon's root,
	// shared by every sandbox: said here, never checked.
	room := "free space unknown (the daemon is not on this host)"
	if f.RootFree >= 0 {
		room = fmt.Sprintf("%.1f GiB free there on this host", float64(f.RootFree)/(1<<30))
	}
	add("workspace.disk", fmt.Sprintf("unbounded: a local volume under %s/volumes, %s", f.DockerRootDir, room), "a per-sandbox size limit", false, false,
		"none on this engine: give "+f.DockerRootDir+"/volumes a file system of its own (or XFS project quotas) so that sandboxes together cannot fill the host's")
	return r
}

// unsupported is the error of a daemon or request the profile refuses.
func unsupported(op, format string, args ...any) *spec.Error {
	return spec.Errorf(spec.CodeUnsupported, op, format, args...)
}
