package dockerio

import (
	"fmt"
	"regexp"
	"strconv"
	"syscall"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"github.com/stockade/stockade/profile"
	"github.com/stockade/stockade/spec"
)

// Label keys. No label uses a key Docker copies into events (exitCode,
// execDuration, name, image).
const (
	LabelOwner    = "io.stockade.owner"
	LabelSandbox  = "io.stockade.sandbox"
	LabelRole     = "io.stockade.role"
	labelRevision = "io.stockade.revision"
)

// Fixed paths of the sandbox body.
const (
	WorkspaceDir = spec.WorkspaceDir
	WorkDir      = "/workspace/work"
	homeDir      = "/home/sandbox"
	TmpDir       = "/tmp"
)

// keeper is the workload's command: entrypoint /bin/sh with these args.
var keeper = []string{"-c", "while :; do sleep 3600; done"}

// environment is every sandbox container's whole environment, in order
// (the image's own is not inherited: readback checks Config.Env exactly).
var environment = []string{"HOME=/home/sandbox", "TMPDIR=/tmp", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_]{0,63}$`)

// checkID validates an owner, sandbox or process id: it appears in resource
// names and in a shell word, so it is [A-Za-z0-9_], at most 64 characters.
func checkID(kind, id string) error {
	if !idPattern.MatchString(id) {
		return spec.Errorf(spec.CodeInvalidArgument, "dockerio", "%s id %q is not [A-Za-z0-9][A-Za-z0-9_]{0,63}", kind, id)
	}
	return nil
}

// checkSandboxIDs checks a sandbox's owner and id.
func checkSandboxIDs(owner, id string) error {
	if err := checkID("owner", owner); err != nil {
		return err
	}
	return checkID("sandbox", id)
}

// checkSignal checks a signal to a process group: a group above 1 (never
// init's, never "every process"), a signal number Linux has.
func checkSignal(pgid int, sig syscall.Signal) error {
	if pgid <= 1 {
		return spec.Errorf(spec.CodeInvalidArgument, "dockerio.signal", "process group %d: must be above 1", pgid)
	}
	if sig < 0 || sig > 64 {
		return spec.Errorf(spec.CodeInvalidArgument, "dockerio.signal", "signal %d is out of range", int(sig))
	}
	return nil
}

// checkSandboxRequest is what every engine checks of a create before it
// touches anything: the ids, the spec, and the policy's admission limits.
func checkSandboxRequest(req SandboxRequest) error {
	if err := checkSandboxIDs(req.Owner, req.ID); err != nil {
		return err
	}
	if err := req.Spec.Validate(); err != nil {
		return err
	}
	return profile.AdmitPolicy(req.Spec.Policy)
}

// checkExecRequest is what every engine checks of an exec before it
// creates it: the process id, the spec, and no terminal (only a warden
// allocates one).
func checkExecRequest(req ExecRequest) error {
	if err := checkID("process", req.ProcessID); err != nil {
		return err
	}
	if err := req.Spec.Validate(); err != nil {
		return err
	}
	if req.Spec.TTY {
		return errNoTerminal
	}
	return nil
}

// Name returns a resource's name: stockade-<owner>-<sandbox>-<role>.
func Name(owner, sandbox string, role Role) string {
	return "stockade-" + owner + "-" + sandbox + "-" + string(role)
}

// Labels returns the labels every resource of a sandbox carries.
func Labels(owner, sandbox string, role Role, revision string) map[string]string {
	return map[string]string{LabelOwner: owner, LabelSandbox: sandbox, LabelRole: string(role), labelRevision: revision}
}

// tmpfsOptions is a sandbox tmpfs's options: writable, nosuid, nodev,
// noexec, sized, private to the sandbox's uid:gid (mode 0700).
func tmpfsOptions(size int64, u spec.User) string {
	return fmt.Sprintf("rw,nosuid,nodev,noexec,size=%d,mode=0700,uid=%d,gid=%d", size, u.UID, u.GID)
}

// tmpfs returns a sandbox's two tmpfs mounts for a policy: its home and
// /tmp, each of the policy's size.
func tmpfs(p spec.Policy) map[string]string {
	return map[string]string{homeDir: tmpfsOptions(p.HomeBytes, p.User), TmpDir: tmpfsOptions(p.TmpBytes, p.User)}
}

// networkMode is what HostConfig.NetworkMode must be.
func networkMode(p spec.Policy, role Role, networkID string) string {
	if role == RoleExport || p.Network == spec.NetworkIsolated {
		return "none"
	}
	return networkID
}

// mounts returns the container's mounts: the workspace volume read-write,
// then (workload only) each dataset image read-only.
func mounts(sb spec.Sandbox, role Role, volume string) []mount.Mount {
	ms := []mount.Mount{{Type: mount.TypeVolume, Source: volume, Target: WorkspaceDir}}
	if role == RoleWorkload {
		for _, d := range sb.Datasets {
			ms = append(ms, mount.Mount{Type: mount.TypeImage, Source: d.Image, Target: d.Target, ReadOnly: true})
		}
	}
	return ms
}

// Body is one container's create request: the lockdown readback checks
// field by field (verify), plus HostConfig.Init where the profile has an
// init.
type Body struct {
	Config     *container.Config
	HostConfig *container.HostConfig
}

// ContainerBody returns the create request for one role of a sandbox
// (exported for tests and benchmarks that need the same request made by
// other means).
func ContainerBody(p profile.Profile, sb spec.Sandbox, owner, id string, role Role, volume, networkID string) Body {
	return body(p, sb, owner, id, role, volume, networkID)
}

// body builds the create request for a role: read-only root, every
// capability dropped, no new privileges, the policy's user and
// limits, private IPC and cgroup namespaces, no restart, the workspace
// volume and the two tmpfs mounts, the network the policy names.
func body(p profile.Profile, sb spec.Sandbox, owner, id string, role Role, volume, networkID string) Body {
	pol := sb.Policy
	pids := pol.Pids
	hc := &container.HostConfig{
		ReadonlyRootfs:  true,
		CapDrop:         []string{"ALL"},
		CapAdd:          nil,
		SecurityOpt:     []string{"no-new-privileges:true"},
		Privileged:      false,
		PublishAllPorts: false,
		IpcMode:         "private",
		CgroupnsMode:    "private",
		NetworkMode:     container.NetworkMode(networkMode(pol, role, networkID)),
		RestartPolicy:   container.RestartPolicy{Name: container.RestartPolicyDisabled},
		AutoRemove:      false,
		Tmpfs:           tmpfs(pol),
		Mounts:          mounts(sb, role, volume),
		Resources: container.Resources{
			NanoCPUs:   int64(pol.CPUs * 1e9),
			Memory:     pol.MemoryBytes,
			MemorySwap: pol.MemoryBytes,
			PidsLimit:  &pids,
		},
	}
	if p.Init {
		t := true
		hc.Init = &t
	}
	return Body{
		Config: &container.Config{
			Image:           sb.Image,
			User:            strconv.FormatInt(pol.User.UID, 10) + ":" + strconv.FormatInt(pol.User.GID, 10),
			WorkingDir:      WorkDir,
			Entrypoint:      []string{"/bin/sh"},
			Cmd:             append([]string(nil), keeper...),
			Env:             append([]string(nil), environment...),
			Tty:             false,
			OpenStdin:       false,
			NetworkDisabled: role == RoleExport,
			Healthcheck:     &container.HealthConfig{Test: []string{"NONE"}},
			Labels:          Labels(owner, id, role, p.Revision()),
		},
		HostConfig: hc,
	}
}
