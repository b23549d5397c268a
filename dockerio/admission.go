package dockerio

import (
	"math"

	"github.com/stockade/stockade/spec"
)

// Admission limits: what Docker accepts, and no value the kernel would
// silently round (see AdmitPolicy).
const (
	// MinMemoryBytes is Docker's minimum memory limit (6 MiB).
	MinMemoryBytes = 6 << 20
	// MaxCPUs is the ceiling on a policy's cpus.
	MaxCPUs = 1024
	// MinNanoCPUs is Docker's smallest CPU quota (0.01 CPU).
	MinNanoCPUs = 1e7
	// MaxPids is the kernel's PID_MAX_LIMIT; pids.max cannot exceed it.
	MaxPids = 1 << 22
	// PageSize: the kernel rounds memory limits down and tmpfs sizes up to
	// whole pages, so a size that is not a multiple would not be the limit
	// asked for; it is refused instead.
	PageSize = 4096
	// maxSafeInteger is 2^53-1, the largest integer a float64 (and a JSON
	// number read as one) holds exactly: NanoCPUs must not pass it.
	maxSafeInteger = 1<<53 - 1
)

// AdmitPolicy checks that a policy is well formed (invalid_argument, from
// spec.Policy.Validate) and that Docker can honour it exactly (unsupported):
// memory of at least 6 MiB and a whole number of pages, cpus in 0.01..1024
// with a representable integer NanoCPUs, tmpfs sizes a whole number of
// pages, pids at most the kernel's limit.
func AdmitPolicy(p spec.Policy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	const op = "dockerio.admit"
	nano := p.CPUs * 1e9
	switch {
	case p.CPUs > MaxCPUs:
		return unsupported(op, "cpus %v exceeds %d", p.CPUs, MaxCPUs)
	case nano != math.Trunc(nano) || nano > maxSafeInteger:
		return unsupported(op, "cpus %v has no representable integer NanoCPUs (%v)", p.CPUs, nano)
	case nano < MinNanoCPUs:
		return unsupported(op, "cpus %v is below Docker's minimum of 0.01", p.CPUs)
	case p.MemoryBytes < MinMemoryBytes:
		return unsupported(op, "memory_bytes %d is below Docker's minimum of 6 MiB", p.MemoryBytes)
	case p.MemoryBytes%PageSize != 0:
		return unsupported(op, "memory_bytes %d is not a whole number of %d-byte pages (the kernel would round it)", p.MemoryBytes, PageSize)
	case p.Pids > MaxPids:
		return unsupported(op, "pids %d exceeds the kernel's limit %d", p.Pids, MaxPids)
	case p.HomeBytes%PageSize != 0:
		return unsupported(op, "home_bytes %d is not a whole number of %d-byte pages (tmpfs would round it)", p.HomeBytes, PageSize)
	case p.TmpBytes%PageSize != 0:
		return unsupported(op, "tmp_bytes %d is not a whole number of %d-byte pages (tmpfs would round it)", p.TmpBytes, PageSize)
	}
	return nil
}

// admitOnDaemon adds the daemon-dependent policy checks: the CPU quota must
// not exceed the daemon's CPUs (Docker refuses it at create).
func admitOnDaemon(p spec.Policy, ncpu int) error {
	if ncpu > 0 && p.CPUs > float64(ncpu) {
		return unsupported("dockerio.admit", "cpus %v exceeds the daemon's %d CPUs", p.CPUs, ncpu)
	}
	return nil
}

// ImageFacts is what admission reads of an image (GET /images/{id}/json).
type ImageFacts struct {
	ID           string
	Os           string
	Architecture string
	Volumes      int
	Env          []string
	// Labels are the image's own labels; Docker merges them into the
	// container's, and copies those into event attributes.
	Labels map[string]string
}

// EventAttributeKeys are the attribute names Docker puts in container
// events. A container label of the same name overwrites the attribute (moby
// copies labels over them), so an image labelled with one could forge
// events: execID=x would make every exec_die name x, exitCode=0 would make
// every death a clean one. Such images are refused.
var EventAttributeKeys = []string{"execID", "exitCode", "execDuration", "name", "image", "signal"}

// AdmitImage checks an inspected image against the profile: the exact ID
// asked for, Linux, the profile's architecture, no declared volumes.
func AdmitImage(p Profile, want string, img ImageFacts) error {
	const op = "dockerio.image"
	switch {
	case want != "" && img.ID != want:
		return unsupported(op, "image %s resolved to %s, not the exact ID", want, img.ID)
	case img.Os != "linux":
		return unsupported(op, "image %s is for os %q, not linux", img.ID, img.Os)
	case img.Architecture != p.ImageArch:
		return unsupported(op, "image %s is for architecture %q; profile %s requires %q", img.ID, img.Architecture, p.Name, p.ImageArch)
	case img.Volumes != 0:
		return unsupported(op, "image %s declares %d volume(s); a sandbox image must declare none", img.ID, img.Volumes)
	}
	for _, k := range EventAttributeKeys {
		if _, ok := img.Labels[k]; ok {
			return unsupported(op, "image %s has a label %q, a name Docker uses in event attributes (it could forge the runtime's events)", img.ID, k)
		}
	}
	return nil
}
