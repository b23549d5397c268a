package dockerio

import (
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/docker/docker/client"
)

// The egress container's readback: what its body must be and the check of
// what Docker shows.

// readbackEgress verifies the egress container: the lockdown, our
// image and command (its rules aside: a live change updates the rules the
// proxy holds, not its command line), no mounts, and, once started, running
// on exactly the internal and outside networks.
func (a *Adapter) readbackEgress(ctx context.Context, cli *client.Client, sb Sandbox, started bool) (err error) {
	ctx, span := readbackSpan(ctx, sb, RoleEgress, started)
	defer func() { endSpan(span, err) }()
	_, raw, err := cli.ContainerInspectWithRaw(ctx, sb.Egress, false)
	if err != nil {
		return translate(err, "dockerio.readback", "inspecting egress container %s", sb.Egress)
	}
	imageID, err := a.egressImage(ctx, cli)
	if err != nil {
		return err
	}
	return verifyEgress(raw, a.egressExpect(sb, imageID, started))
}

// egressExpect is what verifyEgress compares an egress container with.
type egressExpect struct {
	Name, Image, User string
	Labels            map[string]string
	Entrypoint, Cmd   []string // Cmd without its last egressCmdVaries words
	Env               []string
	Tmpfs             map[string]string
	NanoCPUs          int64
	Init              bool
	AppArmorProfile   string
	Internal, Outside string // network ids
	ProxyIP           string // its address on the internal network
	Started           bool
}

func (a *Adapter) egressExpect(sb Sandbox, imageID string, started bool) egressExpect {
	b := a.egressBody(sb, imageID, sb.Network)
	cmd := b.Config.Cmd
	ip, _, _ := strings.Cut(sb.Proxy, ":")
	return egressExpect{Name: Name(sb.Owner, sb.ID, RoleEgress), Image: imageID, User: b.Config.User, Labels: b.Config.Labels,
		Entrypoint: b.Config.Entrypoint, Cmd: cmd[:len(cmd)-egressCmdVaries], Env: b.Config.Env, Tmpfs: b.HostConfig.Tmpfs,
		NanoCPUs: b.HostConfig.NanoCPUs, Init: a.profile.Init, AppArmorProfile: a.profile.AppArmorProfile,
		Internal: sb.Network, Outside: sb.Outside, ProxyIP: ip, Started: started}
}

// verifyEgress checks an egress container's inspect JSON. It returns nil or
// an unsupported error naming the first field that differs.
func verifyEgress(raw []byte, e egressExpect) error {
	c, err := decodeInspect(raw)
	if err != nil {
		return err
	}
	cf, h := c.Config, c.HostConfig
	type field struct {
		name      string
		ok        bool
		got, want any
	}
	i64 := func(p *int64) any {
		if p == nil {
			return nil
		}
		return *p
	}
	fields := []field{
		{"Name", c.Name == "/"+e.Name, c.Name, "/" + e.Name},
		{"Image", c.Image == e.Image, c.Image, e.Image},
		{"Config.Labels", labelsMatch(cf.Labels, e.Labels), cf.Labels, e.Labels},
		{"Config.User", cf.User == e.User, cf.User, e.User},
		{"Config.Entrypoint", slices.Equal(cf.Entrypoint, e.Entrypoint), cf.Entrypoint, e.Entrypoint},
		{"Config.Cmd", len(cf.Cmd) == len(e.Cmd)+egressCmdVaries && slices.Equal(cf.Cmd[:len(e.Cmd)], e.Cmd), cf.Cmd, e.Cmd},
		{"Config.Env", slices.Equal(cf.Env, e.Env), cf.Env, e.Env},
		{"Config.WorkingDir", cf.WorkingDir == "/", cf.WorkingDir, "/"},
		{"Config.Healthcheck.Test", cf.Healthcheck != nil && slices.Equal(cf.Healthcheck.Test, []string{"NONE"}), cf.Healthcheck, []string{"NONE"}},
		{"Config.Tty", cf.Tty == nil || !*cf.Tty, cf.Tty, false},
		{"Config.OpenStdin", cf.OpenStdin == nil || !*cf.OpenStdin, cf.OpenStdin, false},
		{"Config.Volumes", empty(cf.Volumes), string(cf.Volumes), "empty"},
		{"HostConfig.ReadonlyRootfs", h.ReadonlyRootfs != nil && *h.ReadonlyRootfs, h.ReadonlyRootfs, true},
		{"HostConfig.Privileged", h.Privileged != nil && !*h.Privileged, h.Privileged, false},
		{"HostConfig.CapDrop", slices.Equal(h.CapDrop, []string{"ALL"}), h.CapDrop, []string{"ALL"}},
		{"HostConfig.CapAdd", empty(h.CapAdd), string(h.CapAdd), "empty"},
		{"HostConfig.SecurityOpt", slices.Equal(h.SecurityOpt, []string{"no-new-privileges:true"}), h.SecurityOpt, "no-new-privileges:true"},
		{"HostConfig.PublishAllPorts", h.PublishAllPorts == nil || !*h.PublishAllPorts, h.PublishAllPorts, false},
		{"HostConfig.PortBindings", empty(h.PortBindings), string(h.PortBindings), "empty"},
		{"HostConfig.Devices", empty(h.Devices), string(h.Devices), "empty"},
		{"HostConfig.DeviceRequests", empty(h.DeviceRequests), string(h.DeviceRequests), "empty"},
		{"HostConfig.CgroupnsMode", h.CgroupnsMode != nil && *h.CgroupnsMode == "private", h.CgroupnsMode, "private"},
		{"HostConfig.OomKillDisable", h.OomKillDisable == nil || !*h.OomKillDisable, h.OomKillDisable, "unset or false"},
		{"HostConfig.AutoRemove", h.AutoRemove != nil && !*h.AutoRemove, h.AutoRemove, false},
		{"HostConfig.Binds", empty(h.Binds), string(h.Binds), "empty"},
		{"HostConfig.PidMode", h.PidMode != nil && *h.PidMode == "", h.PidMode, ""},
		{"HostConfig.IpcMode", h.IpcMode != nil && *h.IpcMode == "private", h.IpcMode, "private"},
		{"HostConfig.UsernsMode", h.UsernsMode != nil && *h.UsernsMode == "", h.UsernsMode, ""},
		{"HostConfig.NetworkMode", h.NetworkMode != nil && *h.NetworkMode == e.Internal, h.NetworkMode, e.Internal},
		{"HostConfig.NanoCpus", h.NanoCpus != nil && *h.NanoCpus == e.NanoCPUs, i64(h.NanoCpus), e.NanoCPUs},
		{"HostConfig.Memory", h.Memory != nil && *h.Memory == egressMemory, i64(h.Memory), egressMemory},
		{"HostConfig.MemorySwap", h.MemorySwap != nil && *h.MemorySwap == egressMemory, i64(h.MemorySwap), egressMemory},
		{"HostConfig.PidsLimit", h.PidsLimit != nil && *h.PidsLimit == egressPids, i64(h.PidsLimit), egressPids},
		{"HostConfig.RestartPolicy", h.RestartPolicy != nil && h.RestartPolicy.Name == "no" && h.RestartPolicy.MaximumRetryCount != nil && *h.RestartPolicy.MaximumRetryCount == 0,
			h.RestartPolicy, "no, 0 retries"},
		{"HostConfig.Tmpfs", maps.Equal(h.Tmpfs, e.Tmpfs), h.Tmpfs, e.Tmpfs},
		{"HostConfig.Mounts", len(h.Mounts) == 0 && len(c.Mounts) == 0, h.Mounts, "none"},
	}
	if e.Init {
		fields = append(fields, field{"HostConfig.Init", h.Init != nil && *h.Init, h.Init, true})
	}
	if e.Started {
		var ids []string
		ip := ""
		for _, att := range c.NetworkSettings.Networks {
			if att != nil {
				ids = append(ids, att.NetworkID)
				if att.NetworkID == e.Internal {
					ip = att.IPAddress
				}
			}
		}
		slices.Sort(ids)
		want := []string{e.Internal, e.Outside}
		slices.Sort(want)
		fields = append(fields,
			field{"State.Running", c.State.Running, c.State.Running, true},
			field{"AppArmorProfile", c.AppArmorProfile != nil && *c.AppArmorProfile == e.AppArmorProfile, c.AppArmorProfile, e.AppArmorProfile},
			field{"NetworkSettings.Networks.IPAddress", ip == e.ProxyIP, ip, e.ProxyIP},
			field{"NetworkSettings.Networks", slices.Equal(ids, want), ids, want},
			field{"NetworkSettings.Ports", empty(c.NetworkSettings.Ports), string(c.NetworkSettings.Ports), "empty"})
	}
	for _, f := range fields {
		if !f.ok {
			return unsupported("dockerio.readback", "egress %s: %s differs: got %s, want %s", e.Name, f.name, show(f.got), show(f.want))
		}
	}
	return nil
}
