package dockerio

import (
	"github.com/stockade/stockade/profile"
	"github.com/stockade/stockade/spec"
)

// admitOnDaemon adds the daemon-dependent policy checks: the CPU quota must
// not exceed the daemon's CPUs (Docker refuses it at create).
func admitOnDaemon(p spec.Policy, ncpu int) error {
	if ncpu > 0 && p.CPUs > float64(ncpu) {
		return unsupported("dockerio.admit", "cpus %v exceeds the daemon's %d CPUs", p.CPUs, ncpu)
	}
	return nil
}

// imageFacts is what admission reads of an image (GET /images/{id}/json).
type imageFacts struct {
	ID           string
	Os           string
	Architecture string
	Volumes      int
	Env          []string
	// Labels are the image's own labels; Docker merges them into the
	// container's, and copies those into event attributes.
	Labels map[string]string
}

// eventAttributeKeys are the attribute names Docker puts in container
// events. A container label of the same name overwrites the attribute (moby
// copies labels over them), so an image labelled with one could forge
// events: execID=x would make every exec_die name x, exitCode=0 would make
// every death a clean one. Such images are refused.
var eventAttributeKeys = []string{"execID", "exitCode", "execDuration", "name", "image", "signal"}

// admitImage checks an inspected image against the profile: the exact ID
// asked for, Linux, the profile's architecture, no declared volumes.
func admitImage(p profile.Profile, want string, img imageFacts) error {
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
	for _, k := range eventAttributeKeys {
		if _, ok := img.Labels[k]; ok {
			return unsupported(op, "image %s has a label %q, a name Docker uses in event attributes (it could forge the runtime's events)", img.ID, k)
		}
	}
	return nil
}
