package dockerio

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/docker/docker/api/types/mount"

	"github.com/stockade/stockade/profile"
	"github.com/stockade/stockade/spec"
)

// expect is everything readback compares a container's inspect JSON with.
// expectFor builds it from a request; verify is a pure function of the two.
type expect struct {
	Role                   Role
	Name                   string // without the leading '/'
	Image                  string
	Labels                 map[string]string
	User                   string
	Env                    []string // ours, then the image's other variables
	Tmpfs                  map[string]string
	Network                string // HostConfig.NetworkMode: "none" or the network id
	NanoCPUs, Memory, Pids int64
	Init                   bool
	AppArmorProfile        string
	Mounts                 []mount.Mount
	// Started: the container has been started (workload after start);
	// checks State.Running, AppArmorProfile and the network attachment.
	Started bool
}

// mergedEnv is the environment the daemon makes: ours, in order, then every
// variable of the image whose name is not one of ours.
func mergedEnv(imageEnv []string) []string {
	out := append([]string(nil), environment...)
	ours := map[string]bool{}
	for _, e := range environment {
		n, _, _ := strings.Cut(e, "=")
		ours[n] = true
	}
	for _, e := range imageEnv {
		n, _, _ := strings.Cut(e, "=")
		if !ours[n] {
			out = append(out, e)
		}
	}
	return out
}

// expectFor builds the readback expectation for one role of a sandbox.
func expectFor(p profile.Profile, sb spec.Sandbox, owner, id string, role Role, volume, networkID string, imageEnv []string, started bool) expect {
	b := body(p, sb, owner, id, role, volume, networkID)
	return expect{
		Role: role, Name: Name(owner, id, role), Image: sb.Image, Labels: b.Config.Labels,
		User: b.Config.User, Env: mergedEnv(imageEnv), Tmpfs: b.HostConfig.Tmpfs,
		Network: string(b.HostConfig.NetworkMode), NanoCPUs: b.HostConfig.NanoCPUs,
		Memory: b.HostConfig.Memory, Pids: *b.HostConfig.PidsLimit, Init: p.Init,
		AppArmorProfile: p.AppArmorProfile, Mounts: b.HostConfig.Mounts, Started: started,
	}
}

// inspectDoc is the part of GET /containers/{id}/json that readback reads.
// Nullable fields are pointers or raw JSON so that "absent" is never taken
// for "false" or "empty".
type inspectDoc struct {
	ID              string `json:"Id"`
	Name            string
	Image           string
	AppArmorProfile *string
	State           *struct {
		Running  bool
		Status   string
		ExitCode int
		Error    string
	}
	Config *struct {
		User        string
		WorkingDir  string
		Entrypoint  []string
		Cmd         []string
		Env         []string
		Tty         *bool
		OpenStdin   *bool
		Volumes     json.RawMessage
		Healthcheck *struct{ Test []string }
		Labels      map[string]string
	}
	HostConfig *struct {
		ReadonlyRootfs  *bool
		Privileged      *bool
		CapDrop         []string
		CapAdd          json.RawMessage
		SecurityOpt     []string
		PublishAllPorts *bool
		PortBindings    json.RawMessage
		Devices         json.RawMessage
		DeviceRequests  json.RawMessage
		Binds           json.RawMessage
		PidMode         *string
		IpcMode         *string
		CgroupnsMode    *string
		UsernsMode      *string
		NetworkMode     *string
		NanoCpus        *int64
		Memory          *int64
		MemorySwap      *int64
		PidsLimit       *int64
		OomKillDisable  *bool
		RestartPolicy   *struct {
			Name              string
			MaximumRetryCount *int
		}
		AutoRemove *bool
		Tmpfs      map[string]string
		Init       *bool
		Mounts     []struct {
			Type     string
			Source   string
			Target   string
			ReadOnly bool
		}
	}
	Mounts []struct {
		Type        string
		Name        string
		Source      string
		Destination string
		RW          bool
	}
	NetworkSettings *struct {
		Networks map[string]*struct {
			NetworkID string
			IPAddress string
		}
		Ports json.RawMessage
	}
}

// empty reports whether an inspect field holds nothing: null, absent, []
// or {} (Docker writes any of them for "none").
func empty(raw json.RawMessage) bool {
	s := string(bytes.TrimSpace(raw))
	return s == "" || s == "null" || s == "[]" || s == "{}"
}

// verify checks a container's inspect JSON against the expectation, every
// field of the lockdown (user, working directory, entrypoint and command,
// environment, no TTY or stdin, no volumes, no healthcheck, read-only root,
// not privileged, every capability dropped and none added, no new
// privileges, no ports, devices or binds, private IPC and cgroup
// namespaces, the network, CPU, memory, swap and pids limits, OOM killer
// on, no restart, tmpfs) plus the image, name, labels, Init and mounts. It returns nil, or an unsupported *spec.Error naming the
// first field that differs with what was read and what was asked.
func verify(raw []byte, e expect) error {
	c, err := decodeInspect(raw)
	if err != nil {
		return err
	}
	field := ""
	var got, want any
	check := func(name string, ok bool, g, w any) bool {
		if !ok && field == "" {
			field, got, want = name, g, w
		}
		return ok
	}
	str := func(p *string) any {
		if p == nil {
			return nil
		}
		return *p
	}
	isStr := func(p *string, w string) bool { return p != nil && *p == w }
	isBool := func(p *bool, w bool) bool { return p != nil && *p == w }
	isInt := func(p *int64, w int64) bool { return p != nil && *p == w }
	deref := func(p any) any {
		switch v := p.(type) {
		case *bool:
			if v != nil {
				return *v
			}
		case *int64:
			if v != nil {
				return *v
			}
		}
		return nil
	}
	cf, h := c.Config, c.HostConfig

	check("Name", c.Name == "/"+e.Name, c.Name, "/"+e.Name)
	check("Image", c.Image == e.Image, c.Image, e.Image)
	for _, k := range slices.Sorted(maps.Keys(e.Labels)) {
		check("Config.Labels["+k+"]", cf.Labels[k] == e.Labels[k], cf.Labels[k], e.Labels[k])
	}
	check("Config.User", cf.User == e.User, cf.User, e.User)
	check("Config.WorkingDir", cf.WorkingDir == WorkDir, cf.WorkingDir, WorkDir)
	check("Config.Entrypoint", slices.Equal(cf.Entrypoint, []string{"/bin/sh"}) && cf.Entrypoint != nil, cf.Entrypoint, []string{"/bin/sh"})
	check("Config.Cmd", slices.Equal(cf.Cmd, keeper), cf.Cmd, keeper)
	check("Config.Env", slices.Equal(cf.Env, e.Env), cf.Env, e.Env)
	check("Config.Tty", cf.Tty == nil || !*cf.Tty, deref(cf.Tty), false)
	check("Config.OpenStdin", cf.OpenStdin == nil || !*cf.OpenStdin, deref(cf.OpenStdin), false)
	check("Config.Volumes", empty(cf.Volumes), string(cf.Volumes), "empty")
	check("Config.Healthcheck.Test", cf.Healthcheck != nil && slices.Equal(cf.Healthcheck.Test, []string{"NONE"}), cf.Healthcheck, []string{"NONE"})
	check("HostConfig.ReadonlyRootfs", isBool(h.ReadonlyRootfs, true), deref(h.ReadonlyRootfs), true)
	check("HostConfig.Privileged", isBool(h.Privileged, false), deref(h.Privileged), false)
	check("HostConfig.CapDrop", slices.Equal(h.CapDrop, []string{"ALL"}), h.CapDrop, []string{"ALL"})
	check("HostConfig.CapAdd", empty(h.CapAdd), string(h.CapAdd), "empty")
	check("HostConfig.SecurityOpt", slices.Equal(h.SecurityOpt, []string{"no-new-privileges:true"}), h.SecurityOpt, []string{"no-new-privileges:true"})
	check("HostConfig.PublishAllPorts", isBool(h.PublishAllPorts, false), deref(h.PublishAllPorts), false)
	check("HostConfig.PortBindings", empty(h.PortBindings), string(h.PortBindings), "empty")
	check("HostConfig.Devices", empty(h.Devices), string(h.Devices), "empty")
	check("HostConfig.DeviceRequests", empty(h.DeviceRequests), string(h.DeviceRequests), "empty")
	check("HostConfig.Binds", empty(h.Binds), string(h.Binds), "empty")
	check("HostConfig.PidMode", isStr(h.PidMode, ""), str(h.PidMode), "")
	check("HostConfig.IpcMode", isStr(h.IpcMode, "private"), str(h.IpcMode), "private")
	check("HostConfig.CgroupnsMode", isStr(h.CgroupnsMode, "private"), str(h.CgroupnsMode), "private")
	check("HostConfig.UsernsMode", isStr(h.UsernsMode, ""), str(h.UsernsMode), "")
	check("HostConfig.NetworkMode", isStr(h.NetworkMode, e.Network), str(h.NetworkMode), e.Network)
	check("HostConfig.NanoCpus", isInt(h.NanoCpus, e.NanoCPUs), deref(h.NanoCpus), e.NanoCPUs)
	check("HostConfig.Memory", isInt(h.Memory, e.Memory), deref(h.Memory), e.Memory)
	check("HostConfig.MemorySwap", isInt(h.MemorySwap, e.Memory), deref(h.MemorySwap), e.Memory)
	check("HostConfig.PidsLimit", isInt(h.PidsLimit, e.Pids), deref(h.PidsLimit), e.Pids)
	check("HostConfig.OomKillDisable", h.OomKillDisable == nil || !*h.OomKillDisable, deref(h.OomKillDisable), "unset or false")
	check("HostConfig.RestartPolicy", h.RestartPolicy != nil && h.RestartPolicy.Name == "no" && h.RestartPolicy.MaximumRetryCount != nil && *h.RestartPolicy.MaximumRetryCount == 0,
		h.RestartPolicy, "no, 0 retries")
	check("HostConfig.AutoRemove", isBool(h.AutoRemove, false), deref(h.AutoRemove), false)
	check("HostConfig.Tmpfs", maps.Equal(h.Tmpfs, e.Tmpfs), h.Tmpfs, e.Tmpfs)
	if e.Init {
		check("HostConfig.Init", isBool(h.Init, true), deref(h.Init), true)
	}
	var hm []mount.Mount
	for _, m := range h.Mounts {
		hm = append(hm, mount.Mount{Type: mount.Type(m.Type), Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	check("HostConfig.Mounts", slices.Equal(hm, e.Mounts), hm, e.Mounts)
	// The mounts the daemon made: exactly one per requested mount, the
	// workspace volume read-write, datasets read-only.
	mountsOK := len(c.Mounts) == len(e.Mounts)
	for _, w := range e.Mounts {
		found := false
		for _, m := range c.Mounts {
			if m.Destination != w.Target {
				continue
			}
			switch w.Type {
			case mount.TypeVolume:
				found = m.Type == "volume" && m.Name == w.Source && m.RW
			default:
				found = m.Type == string(w.Type) && !m.RW
			}
		}
		mountsOK = mountsOK && found
	}
	check("Mounts", mountsOK, c.Mounts, e.Mounts)
	if e.Started {
		check("State.Running", c.State.Running, c.State.Running, true)
		check("AppArmorProfile", isStr(c.AppArmorProfile, e.AppArmorProfile), str(c.AppArmorProfile), e.AppArmorProfile)
		names := slices.Sorted(maps.Keys(c.NetworkSettings.Networks))
		check("NetworkSettings.Networks", len(names) == 1, names, "exactly one attachment")
		check("NetworkSettings.Ports", empty(c.NetworkSettings.Ports), string(c.NetworkSettings.Ports), "empty")
		if len(names) == 1 {
			if e.Network == "none" {
				check("NetworkSettings.Networks", names[0] == "none", names[0], "none")
			} else {
				att := c.NetworkSettings.Networks[names[0]]
				id := ""
				if att != nil {
					id = att.NetworkID
				}
				check("NetworkSettings.Networks.NetworkID", id == e.Network, id, e.Network)
			}
		}
	}
	if e.Role == RoleExport {
		check("State.Status", !c.State.Running && c.State.Status == "created", c.State.Status, "created, never started")
	}
	if field == "" {
		return nil
	}
	if field == "State.Running" && e.Role == RoleWorkload && c.State.Status == "exited" &&
		(c.State.ExitCode == 126 || c.State.ExitCode == 127 || c.State.Error != "") {
		// The keeper could not run: an image with no /bin/sh (or none it
		// can execute). Still unsupported (the sandbox is not the one we
		// made, and its actor fails it closed), but saying how it ended
		// and what the image needs.
		return unsupported("dockerio.readback",
			"%s %s: State.Running differs: its keeper (%s) exited %d%s; a sandbox's image needs /bin/sh and sleep (the keeper is their loop)",
			e.Role, e.Name, strings.Join(append([]string{"/bin/sh"}, keeper...), " "), c.State.ExitCode, exitError(c.State.Error))
	}
	return unsupported("dockerio.readback", "%s %s: %s differs: got %s, want %s", e.Role, e.Name, field, show(got), show(want))
}

// exitError is Docker's own word on a container that did not run, if any.
func exitError(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// decodeInspect reads a container's inspect JSON, which readback needs
// whole: Config, HostConfig, State and NetworkSettings.
func decodeInspect(raw []byte) (inspectDoc, error) {
	var c inspectDoc
	if err := json.Unmarshal(raw, &c); err != nil {
		return c, spec.Wrap(spec.CodeUnsupported, "dockerio.readback", err, "inspect JSON is malformed")
	}
	if c.Config == nil || c.HostConfig == nil || c.State == nil || c.NetworkSettings == nil {
		return c, unsupported("dockerio.readback", "inspect JSON lacks Config, HostConfig, State or NetworkSettings")
	}
	return c, nil
}
