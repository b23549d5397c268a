package dockerio

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/mount"

	"github.com/stockade/stockade/profile"
	"github.com/stockade/stockade/spec"
)

// The fixtures in testdata were recorded from Docker Engine 20.10.24 (API
// 1.41, cgroup v1) by test/dockerio/record_test.go, with the owner and
// sandbox ids rewritten to OWNER and SANDBOX. The sandbox spec below is the
// one the recorder used.
const fixtureImage = "sha256:098634cca128dc274007ca45439f7e3d1692ab6a924d6ea02768cce0c3847e3b"

func fixtureSpec(network spec.NetworkKind) spec.Sandbox {
	p := spec.DefaultPolicy()
	p.MemoryBytes, p.TmpBytes, p.HomeBytes, p.Pids, p.Network = 128<<20, 16<<20, 8<<20, 64, network
	return spec.Sandbox{Image: fixtureImage, Policy: p, Lifetime: spec.OneShot}
}

func engine20(t *testing.T) profile.Profile {
	t.Helper()
	p, err := profile.Lookup("linux-x64-engine20-cgroupv1")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func fixtureEnv(t *testing.T) []string {
	var env []string
	if err := json.Unmarshal(fixture(t, "engine20-image-env.json"), &env); err != nil {
		t.Fatal(err)
	}
	return env
}

func bridgeNetwork(t *testing.T) string {
	return strings.TrimSpace(string(fixture(t, "engine20-bridge-network-id.txt")))
}

type fixtureCase struct {
	file    string
	role    Role
	network spec.NetworkKind
	started bool
}

var fixtures = []fixtureCase{
	{"engine20-workload-started.json", RoleWorkload, spec.NetworkIsolated, true},
	{"engine20-export-created.json", RoleExport, spec.NetworkIsolated, false},
	{"engine20-bridge-workload-created.json", RoleWorkload, spec.NetworkBridge, false},
	{"engine20-bridge-workload-started.json", RoleWorkload, spec.NetworkBridge, true},
}

func (c fixtureCase) expect(t *testing.T) expect {
	net := ""
	if c.network == spec.NetworkBridge {
		net = bridgeNetwork(t)
	}
	return expectFor(engine20(t), fixtureSpec(c.network), "OWNER", "SANDBOX", c.role, Name("OWNER", "SANDBOX", RoleVolume), net, fixtureEnv(t), c.started)
}

func TestDockerioReadbackRecordedExact(t *testing.T) {
	for _, c := range fixtures {
		t.Run(c.file, func(t *testing.T) {
			if err := verify(fixture(t, c.file), c.expect(t)); err != nil {
				t.Fatalf("recorded readback does not verify: %v", err)
			}
		})
	}
}

// edit applies f to the decoded JSON and re-encodes it.
func edit(t *testing.T, raw []byte, f func(m map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	f(m)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func obj(m map[string]any, key string) map[string]any { return m[key].(map[string]any) }

// TestDockerioReadbackMismatch changes one field of a recorded, verifying
// document at a time and checks readback names that field.
func TestDockerioReadbackMismatch(t *testing.T) {
	set := func(section, key string, v any) func(map[string]any) {
		return func(m map[string]any) {
			if section == "" {
				m[key] = v
			} else {
				obj(m, section)[key] = v
			}
		}
	}
	del := func(section, key string) func(map[string]any) {
		return func(m map[string]any) { delete(obj(m, section), key) }
	}
	cases := []struct {
		name, field string
		f           func(map[string]any)
	}{
		{"name", "Name", set("", "Name", "/other")},
		{"image", "Image", set("", "Image", "sha256:"+strings.Repeat("0", 64))},
		{"label", "Config.Labels[io.stockade.revision]", func(m map[string]any) {
			obj(obj(m, "Config"), "Labels")[labelRevision] = "engine-1.41-v4-x"
		}},
		{"user", "Config.User", set("Config", "User", "0:0")},
		{"workdir", "Config.WorkingDir", set("Config", "WorkingDir", "/")},
		{"entrypoint", "Config.Entrypoint", set("Config", "Entrypoint", []any{"/bin/bash"})},
		{"cmd", "Config.Cmd", set("Config", "Cmd", []any{"-c", "sleep 1"})},
		{"env order", "Config.Env", func(m map[string]any) {
			env := obj(m, "Config")["Env"].([]any)
			env[0], env[1] = env[1], env[0]
		}},
		{"env extra", "Config.Env", func(m map[string]any) {
			c := obj(m, "Config")
			c["Env"] = append(c["Env"].([]any), "LD_PRELOAD=/x.so")
		}},
		{"tty", "Config.Tty", set("Config", "Tty", true)},
		{"openstdin", "Config.OpenStdin", set("Config", "OpenStdin", true)},
		{"volumes", "Config.Volumes", set("Config", "Volumes", map[string]any{"/data": map[string]any{}})},
		{"healthcheck", "Config.Healthcheck.Test", set("Config", "Healthcheck", nil)},
		{"readonly", "HostConfig.ReadonlyRootfs", set("HostConfig", "ReadonlyRootfs", false)},
		{"readonly absent", "HostConfig.ReadonlyRootfs", del("HostConfig", "ReadonlyRootfs")},
		{"privileged", "HostConfig.Privileged", set("HostConfig", "Privileged", true)},
		{"capdrop", "HostConfig.CapDrop", set("HostConfig", "CapDrop", []any{"NET_RAW"})},
		{"capadd", "HostConfig.CapAdd", set("HostConfig", "CapAdd", []any{"SYS_ADMIN"})},
		{"securityopt", "HostConfig.SecurityOpt", set("HostConfig", "SecurityOpt", []any{"no-new-privileges:true", "seccomp=unconfined"})},
		{"publishall", "HostConfig.PublishAllPorts", set("HostConfig", "PublishAllPorts", true)},
		{"ports", "HostConfig.PortBindings", set("HostConfig", "PortBindings", map[string]any{"80/tcp": []any{}})},
		{"devices", "HostConfig.Devices", set("HostConfig", "Devices", []any{map[string]any{"PathOnHost": "/dev/kvm"}})},
		{"devicerequests", "HostConfig.DeviceRequests", set("HostConfig", "DeviceRequests", []any{map[string]any{"Count": -1}})},
		{"binds", "HostConfig.Binds", set("HostConfig", "Binds", []any{"/:/host"})},
		{"pidmode", "HostConfig.PidMode", set("HostConfig", "PidMode", "host")},
		{"ipcmode", "HostConfig.IpcMode", set("HostConfig", "IpcMode", "shareable")},
		{"cgroupns", "HostConfig.CgroupnsMode", set("HostConfig", "CgroupnsMode", "host")},
		{"userns", "HostConfig.UsernsMode", set("HostConfig", "UsernsMode", "host")},
		{"networkmode", "HostConfig.NetworkMode", set("HostConfig", "NetworkMode", "host")},
		{"nanocpus", "HostConfig.NanoCpus", set("HostConfig", "NanoCpus", 0)},
		{"memory", "HostConfig.Memory", set("HostConfig", "Memory", 0)},
		{"memoryswap", "HostConfig.MemorySwap", set("HostConfig", "MemorySwap", -1)},
		{"pids", "HostConfig.PidsLimit", set("HostConfig", "PidsLimit", nil)},
		{"oomkilldisable", "HostConfig.OomKillDisable", set("HostConfig", "OomKillDisable", true)},
		{"restart", "HostConfig.RestartPolicy", set("HostConfig", "RestartPolicy", map[string]any{"Name": "always", "MaximumRetryCount": 0})},
		{"autoremove", "HostConfig.AutoRemove", set("HostConfig", "AutoRemove", true)},
		{"tmpfs exec", "HostConfig.Tmpfs", func(m map[string]any) {
			obj(obj(m, "HostConfig"), "Tmpfs")["/tmp"] = "rw,nosuid,nodev,size=16777216,mode=0700,uid=65532,gid=65532"
		}},
		{"tmpfs extra", "HostConfig.Tmpfs", func(m map[string]any) {
			obj(obj(m, "HostConfig"), "Tmpfs")["/run"] = "rw"
		}},
		{"init", "HostConfig.Init", set("HostConfig", "Init", nil)},
		{"mounts", "HostConfig.Mounts", set("HostConfig", "Mounts", nil)},
		{"mount rw", "Mounts", func(m map[string]any) { m["Mounts"].([]any)[0].(map[string]any)["RW"] = false }},
		{"not running", "State.Running", func(m map[string]any) { obj(m, "State")["Running"] = false }},
		{"apparmor", "AppArmorProfile", set("", "AppArmorProfile", "unconfined")},
		{"networks", "NetworkSettings.Networks", func(m map[string]any) {
			obj(obj(m, "NetworkSettings"), "Networks")["bridge"] = map[string]any{"NetworkID": "x"}
		}},
		{"ports published", "NetworkSettings.Ports", func(m map[string]any) {
			obj(m, "NetworkSettings")["Ports"] = map[string]any{"80/tcp": nil}
		}},
	}
	raw := fixture(t, "engine20-workload-started.json")
	want := fixtures[0].expect(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := verify(edit(t, raw, c.f), want)
			if !spec.IsCode(err, spec.CodeUnsupported) {
				t.Fatalf("got %v, want unsupported", err)
			}
			if !strings.Contains(err.Error(), ": "+c.field+" differs") {
				t.Fatalf("error %q does not name %s", err, c.field)
			}
		})
	}
	t.Run("keeper exited", func(t *testing.T) {
		// An image with no /bin/sh: the workload exits at once, and the
		// error says what the image lacks, not only which field differs.
		raw := edit(t, raw, func(m map[string]any) {
			obj(m, "State")["Running"] = false
			obj(m, "State")["Status"] = "exited"
			obj(m, "State")["ExitCode"] = 127
			obj(m, "State")["Error"] = `exec: "/bin/sh": stat /bin/sh: no such file or directory`
		})
		err := verify(raw, want)
		if !spec.IsCode(err, spec.CodeUnsupported) || !strings.Contains(err.Error(), "exited 127") || !strings.Contains(err.Error(), "needs /bin/sh") || !strings.Contains(err.Error(), "no such file") {
			t.Fatalf("got %v, want unsupported saying the keeper exited 127 and the image needs /bin/sh", err)
		}
	})
	t.Run("export started", func(t *testing.T) {
		raw := edit(t, fixture(t, "engine20-export-created.json"), func(m map[string]any) {
			obj(m, "State")["Running"] = true
			obj(m, "State")["Status"] = "running"
		})
		if err := verify(raw, fixtures[1].expect(t)); err == nil || !strings.Contains(err.Error(), "State.Status") {
			t.Fatalf("got %v, want State.Status", err)
		}
	})
	t.Run("bridge attachment", func(t *testing.T) {
		want := fixtures[3].expect(t)
		want.Network = strings.Repeat("a", 64)
		if err := verify(fixture(t, "engine20-bridge-workload-started.json"), want); err == nil || !strings.Contains(err.Error(), "HostConfig.NetworkMode") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("malformed", func(t *testing.T) {
		for _, raw := range []string{"", "{", "null", "{}", `{"Config":{}}`} {
			if err := verify([]byte(raw), want); !spec.IsCode(err, spec.CodeUnsupported) {
				t.Fatalf("%q: got %v", raw, err)
			}
		}
	})
}

// TestDockerioReadbackDatasetsSynthesized checks the dataset (image mount)
// path of readback. No engine that supports image mounts was available: the
// document is the recorded Engine 20.10 workload with the image mount added
// in the shape Engine 29 reports (HostConfig.Mounts entry of Type "image",
// and a read-only Mounts entry of Type "image"), so this path is UNVERIFIED
// against a real daemon.
func TestDockerioReadbackDatasetsSynthesized(t *testing.T) {
	ds := spec.Dataset{Image: "sha256:" + strings.Repeat("d", 64), Target: "/data/corpus"}
	sb := fixtureSpec(spec.NetworkIsolated)
	sb.Datasets = []spec.Dataset{ds}
	p, _ := profile.Lookup(profile.Default)
	p.APIVersion = "1.41" // keep the recorded revision label
	p.Name = "linux-x64-engine20-cgroupv1"
	p.AppArmorProfile = ""
	want := expectFor(p, sb, "OWNER", "SANDBOX", RoleWorkload, Name("OWNER", "SANDBOX", RoleVolume), "", fixtureEnv(t), true)
	if got := want.Mounts; len(got) != 2 || got[1] != (mount.Mount{Type: mount.TypeImage, Source: ds.Image, Target: ds.Target, ReadOnly: true}) {
		t.Fatalf("expected mounts %+v", got)
	}
	raw := fixture(t, "engine20-workload-started.json")
	withMount := func(hostRO, rw bool) []byte {
		return edit(t, raw, func(m map[string]any) {
			h := obj(m, "HostConfig")
			h["Mounts"] = append(h["Mounts"].([]any), map[string]any{"Type": "image", "Source": ds.Image, "Target": ds.Target, "ReadOnly": hostRO})
			m["Mounts"] = append(m["Mounts"].([]any), map[string]any{"Type": "image", "Source": "", "Destination": ds.Target, "Mode": "", "RW": rw, "Propagation": "rprivate"})
		})
	}
	if err := verify(withMount(true, false), want); err != nil {
		t.Fatalf("dataset readback: %v", err)
	}
	if err := verify(withMount(false, false), want); err == nil || !strings.Contains(err.Error(), "HostConfig.Mounts") {
		t.Fatalf("writable dataset request: got %v", err)
	}
	if err := verify(withMount(true, true), want); err == nil || !strings.Contains(err.Error(), ": Mounts differs") {
		t.Fatalf("writable dataset mount: got %v", err)
	}
	if err := verify(raw, want); err == nil || !strings.Contains(err.Error(), "HostConfig.Mounts") {
		t.Fatalf("missing dataset: got %v", err)
	}
}

func TestDockerioMergedEnv(t *testing.T) {
	got := mergedEnv([]string{"PATH=/bin", "LANG=C", "HOME=/root", "A=1"})
	want := append(append([]string(nil), environment...), "LANG=C", "A=1")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got %q, want %q", got, want)
	}
}
