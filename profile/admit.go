package profile

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
	const op = "profile.admit"
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
