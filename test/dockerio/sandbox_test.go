package dockerio

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/volume"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// TestDockerioIsolation checks, from inside a sandbox, what the policy
// promises.
func TestDockerioIsolation(t *testing.T) {
	e := testkit.NewDio(t)
	sb := e.Sandbox(t, nil)
	p := sb.Spec.Policy

	mounts := e.Sh(t, sb, "cat /proc/self/mounts")
	var root string
	for _, l := range strings.Split(mounts, "\n") {
		if f := strings.Fields(l); len(f) > 3 && f[1] == "/" {
			root = f[3]
		}
	}
	if !strings.HasPrefix(root, "ro,") && root != "ro" {
		t.Errorf("root mount options %q, want ro", root)
	}
	r := e.Exec(t, sb, nil, "/bin/sh", "-c", "echo x >/stockade-probe")
	if r.Code == 0 || !strings.Contains(string(r.Stderr), "Read-only file system") {
		t.Errorf("write to /: exit %d, stderr %q; want EROFS", r.Code, r.Stderr)
	}
	status := e.Sh(t, sb, "grep -E '^(CapEff|CapBnd|CapPrm|NoNewPrivs):' /proc/self/status")
	for _, want := range []string{"CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "CapPrm:\t0000000000000000", "NoNewPrivs:\t1"} {
		if !strings.Contains(status, want) {
			t.Errorf("/proc/self/status lacks %q:\n%s", want, status)
		}
	}
	r = e.Exec(t, sb, nil, "/bin/sh", "-c", "cp /bin/busybox /tmp/bb && /tmp/bb true")
	if r.Code != 126 || !strings.Contains(string(r.Stderr), "Permission denied") {
		t.Errorf("exec from /tmp: exit %d, stderr %q; want 126 Permission denied (noexec)", r.Code, r.Stderr)
	}
	r = e.Exec(t, sb, nil, "/bin/sh", "-c", "cp /bin/busybox /home/sandbox/bb && /home/sandbox/bb true")
	if r.Code != 126 {
		t.Errorf("exec from home: exit %d, want 126 (noexec)", r.Code)
	}
	// cgroup v1 paths (this profile); v2 would be memory.max, pids.max.
	limits := e.Sh(t, sb, "cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/memory/memory.memsw.limit_in_bytes /sys/fs/cgroup/pids/pids.max")
	want := strings.Join([]string{testkit.Itoa(p.MemoryBytes), testkit.Itoa(p.MemoryBytes), testkit.Itoa(p.Pids)}, "\n") + "\n"
	if limits != want {
		t.Errorf("cgroup limits %q, want %q", limits, want)
	}
	if got := e.Sh(t, sb, "cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us"); got != "100000\n100000\n" {
		t.Errorf("cpu quota/period %q, want one CPU", got)
	}
	if got := e.Sh(t, sb, "ls /sys/class/net"); got != "lo\n" {
		t.Errorf("isolated sandbox interfaces %q, want only lo", got)
	}
	if got := e.Sh(t, sb, "id -u; id -g"); got != "65532\n65532\n" {
		t.Errorf("uid/gid %q", got)
	}
	if got := e.Sh(t, sb, "pwd; echo hi >/workspace/work/f && cat /workspace/work/f && stat -c %u:%g:%a /workspace/work"); got != "/workspace/work\nhi\n65532:65532:755\n" {
		t.Errorf("workspace: %q", got)
	}
	if got := e.Sh(t, sb, "tr '\\0' ' ' </proc/1/cmdline"); !strings.Contains(got, "docker-init") {
		t.Errorf("PID 1 is %q, want the engine's init", got)
	}
	if got := e.Sh(t, sb, "grep -E ' /(tmp|home/sandbox) ' /proc/self/mounts"); strings.Count(got, "nosuid,nodev,noexec") != 2 {
		t.Errorf("tmpfs mounts: %q", got)
	}
}

// TestDockerioBridgeNetwork: a bridge sandbox has its own network and one
// interface besides loopback.
func TestDockerioBridgeNetwork(t *testing.T) {
	e := testkit.NewDio(t)
	sb := e.Sandbox(t, func(s *spec.Sandbox) { s.Policy.Network = spec.NetworkBridge })
	if sb.Network == "" {
		t.Fatal("no network id")
	}
	if got := e.Sh(t, sb, "ls /sys/class/net"); got != "eth0\nlo\n" {
		t.Errorf("bridge sandbox interfaces %q", got)
	}
	if err := e.Adapter.VerifySandbox(context.Background(), sb); err != nil {
		t.Fatal(err)
	}
	if err := e.Adapter.RemoveSandbox(context.Background(), sb); err != nil {
		t.Fatal(err)
	}
	if rs := e.Leftovers(t); len(rs) != 0 {
		t.Fatalf("left behind: %+v", rs)
	}
}

// TestDockerioReadbackRejectsTampered creates, with the raw client, a
// workload under our name and labels whose HostConfig differs in one field;
// CreateSandbox must adopt it by name, find the difference and return
// unsupported naming the field; the caller's rollback (RemoveSandbox)
// removes everything of the sandbox.
func TestDockerioReadbackRejectsTampered(t *testing.T) {
	e := testkit.NewDio(t)
	ctx := context.Background()
	cases := map[string]func(*dockerio.Body){
		"HostConfig.PidsLimit": func(b *dockerio.Body) { n := int64(65); b.HostConfig.PidsLimit = &n },
		"HostConfig.CapAdd":    func(b *dockerio.Body) { b.HostConfig.CapAdd = []string{"CHOWN"} },
		"HostConfig.Tmpfs":     func(b *dockerio.Body) { b.HostConfig.Tmpfs["/tmp"] = "rw,size=16777216,mode=0700,uid=65532,gid=65532" },
		"Config.Env":           func(b *dockerio.Body) { b.Config.Env = append(b.Config.Env, "X=1") },
	}
	for field, mutate := range cases {
		t.Run(field, func(t *testing.T) {
			id := testkit.NewID()
			s := e.Spec(nil)
			rev := e.Adapter.Profile().Revision()
			vol := dockerio.Name(e.Owner, id, dockerio.RoleVolume)
			if _, err := e.Docker.VolumeCreate(ctx, volume.CreateOptions{Name: vol, Labels: dockerio.Labels(e.Owner, id, dockerio.RoleVolume, rev)}); err != nil {
				t.Fatal(err)
			}
			b := dockerio.ContainerBody(e.Adapter.Profile(), s, e.Owner, id, dockerio.RoleWorkload, vol, "")
			mutate(&b)
			if _, err := e.Docker.ContainerCreate(ctx, b.Config, b.HostConfig, nil, nil, dockerio.Name(e.Owner, id, dockerio.RoleWorkload)); err != nil {
				t.Fatal(err)
			}
			_, err := e.Adapter.CreateSandbox(ctx, dockerio.SandboxRequest{Owner: e.Owner, ID: id, Spec: s})
			if !spec.IsCode(err, spec.CodeUnsupported) || !strings.Contains(err.Error(), field) {
				t.Fatalf("got %v, want unsupported naming %s", err, field)
			}
			if err := e.Adapter.RemoveSandbox(ctx, dockerio.Sandbox{Owner: e.Owner, ID: id}); err != nil {
				t.Fatal(err)
			}
			if rs := e.Leftovers(t); len(rs) != 0 {
				t.Fatalf("left behind: %+v", rs)
			}
		})
	}
}

// TestDockerioNameCollisionForeign: a container under our name with another
// owner's labels is a conflict; it is never touched, and the rollback of
// what the create made (RemoveSandbox) leaves it alone.
func TestDockerioNameCollisionForeign(t *testing.T) {
	e := testkit.NewDio(t)
	ctx := context.Background()
	foreign := dockertest.Owner(t, e.Docker)
	id := testkit.NewID()
	s := e.Spec(nil)
	b := dockerio.ContainerBody(e.Adapter.Profile(), s, foreign, id, dockerio.RoleExport, "stockade-foreign-"+id, "")
	b.HostConfig.Mounts = nil
	name := dockerio.Name(e.Owner, id, dockerio.RoleExport)
	made, err := e.Docker.ContainerCreate(ctx, b.Config, b.HostConfig, nil, nil, name)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Adapter.CreateSandbox(ctx, dockerio.SandboxRequest{Owner: e.Owner, ID: id, Spec: s})
	if !spec.IsCode(err, spec.CodeConflict) {
		t.Fatalf("got %v, want conflict", err)
	}
	if err := e.Adapter.RemoveSandbox(ctx, dockerio.Sandbox{Owner: e.Owner, ID: id}); err != nil {
		t.Fatal(err)
	}
	if rs := e.Leftovers(t); len(rs) != 0 {
		t.Fatalf("left behind: %+v", rs)
	}
	c, err := e.Docker.ContainerInspect(ctx, made.ID)
	if err != nil || c.Config.Labels[dockerio.LabelOwner] != foreign {
		t.Fatalf("the foreign container was touched: %v", err)
	}
	// RemoveOwned refuses a resource that is not the owner's.
	err = e.Adapter.RemoveOwned(ctx, dockerio.Resource{Kind: dockerio.KindContainer, ID: made.ID, Owner: e.Owner})
	if !spec.IsCode(err, spec.CodeConflict) {
		t.Fatalf("RemoveOwned of a foreign container: %v", err)
	}
}

// TestDockerioAdoptRetriedCreate: a create retried after a crash finds the
// resources by name, adopts them (labels match, readback exact) and ends
// with the same containers.
func TestDockerioAdoptRetriedCreate(t *testing.T) {
	e := testkit.NewDio(t)
	ctx := context.Background()
	req := dockerio.SandboxRequest{Owner: e.Owner, ID: testkit.NewID(), Spec: e.Spec(func(s *spec.Sandbox) { s.Policy.Network = spec.NetworkBridge })}
	first, err := e.Adapter.CreateSandbox(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := e.Adapter.CreateSandbox(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if first.Workload != again.Workload || first.Export != again.Export || first.Network != again.Network || first.Volume != again.Volume {
		t.Fatalf("adopted %+v, made %+v", again, first)
	}
	if err := e.Adapter.StartSandbox(ctx, again); err != nil {
		t.Fatal(err)
	}
	obs, err := e.Adapter.InspectSandbox(ctx, again)
	if err != nil || !obs.Running || obs.Mismatch != "" || len(obs.Present) != 4 || obs.Revision != e.Adapter.Profile().Revision() {
		t.Fatalf("observed %+v, %v", obs, err)
	}
	exit, err := e.Adapter.StopSandbox(ctx, again, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	obs, err = e.Adapter.InspectSandbox(ctx, again)
	if err != nil || obs.Running || obs.Exit == nil || obs.Exit.ExitCode != exit.ExitCode {
		t.Fatalf("after stop: %+v, %v (exit %+v)", obs, err, exit)
	}
	owned, err := e.Adapter.ListOwned(ctx, e.Owner)
	if err != nil || len(owned) != 1 || owned[0].Sandbox != req.ID || len(owned[0].Resources) != 4 {
		t.Fatalf("owned %+v, %v", owned, err)
	}
	if err := e.Adapter.RemoveSandbox(ctx, again); err != nil {
		t.Fatal(err)
	}
	if rs := e.Leftovers(t); len(rs) != 0 {
		t.Fatalf("left behind: %+v", rs)
	}
}

// importImage makes a one-file image with the given changes and platform,
// removed when the test ends.
func importImage(t *testing.T, e *testkit.DioEnv, platform string, changes ...string) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "f", Mode: 0o644, Size: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	ref := "stockade-test/" + e.Owner + ":" + testkit.NewID()
	rc, err := e.Docker.ImageImport(context.Background(), image.ImportSource{Source: &buf, SourceName: "-"}, ref, image.ImportOptions{Changes: changes, Platform: platform})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, rc)
	_ = rc.Close()
	img, err := e.Docker.ImageInspect(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = e.Docker.ImageRemove(context.Background(), img.ID, image.RemoveOptions{Force: true})
	})
	return img.ID
}

// loadForeignArch loads (docker load) a one-layer image whose config says
// linux/<arch>; removed when the test ends. (The daemon ignores the platform
// of an import, so the config is written by hand.)
func loadForeignArch(t *testing.T, e *testkit.DioEnv, arch string) string {
	t.Helper()
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	if err := lw.WriteHeader(&tar.Header{Name: "f", Mode: 0o644, Size: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := lw.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := lw.Close(); err != nil {
		t.Fatal(err)
	}
	diff := sha256.Sum256(layer.Bytes())
	cfg, _ := json.Marshal(map[string]any{
		"architecture": arch, "os": "linux", "config": map[string]any{},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diff[:])}},
	})
	cfgSum := sha256.Sum256(cfg)
	cfgName := hex.EncodeToString(cfgSum[:]) + ".json"
	ref := "stockade-test/" + e.Owner + ":" + arch
	manifest, _ := json.Marshal([]map[string]any{{"Config": cfgName, "RepoTags": []string{ref}, "Layers": []string{"layer.tar"}}})
	var archive bytes.Buffer
	aw := tar.NewWriter(&archive)
	for _, f := range []struct {
		name string
		data []byte
	}{{cfgName, cfg}, {"layer.tar", layer.Bytes()}, {"manifest.json", manifest}} {
		if err := aw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data))}); err != nil {
			t.Fatal(err)
		}
		if _, err := aw.Write(f.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := aw.Close(); err != nil {
		t.Fatal(err)
	}
	resp, err := e.Docker.ImageLoad(context.Background(), &archive)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	img, err := e.Docker.ImageInspect(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = e.Docker.ImageRemove(context.Background(), img.ID, image.RemoveOptions{Force: true})
	})
	if img.Architecture != arch {
		t.Fatalf("loaded image is %s, want %s", img.Architecture, arch)
	}
	return img.ID
}

// TestDockerioBadPolicy: every bad input gets its typed error and nothing is
// left behind.
func TestDockerioBadPolicy(t *testing.T) {
	e := testkit.NewDio(t)
	withVolume := importImage(t, e, "", "VOLUME /data")
	forging := importImage(t, e, "", "LABEL execID=forged")
	arm := loadForeignArch(t, e, "arm64")
	cases := []struct {
		name string
		f    func(*spec.Sandbox)
		code spec.Code
	}{
		{"memory below 6 MiB", func(s *spec.Sandbox) { s.Policy.MemoryBytes = 4 << 20 }, spec.CodeUnsupported},
		{"nanocpus unrepresentable", func(s *spec.Sandbox) { s.Policy.CPUs = 1e-10 }, spec.CodeUnsupported},
		{"cpus above 1024", func(s *spec.Sandbox) { s.Policy.CPUs = 2048 }, spec.CodeUnsupported},
		{"cpus above the daemon's", func(s *spec.Sandbox) { s.Policy.CPUs = 64 }, spec.CodeUnsupported},
		{"pids zero", func(s *spec.Sandbox) { s.Policy.Pids = 0 }, spec.CodeInvalidArgument},
		{"pids negative", func(s *spec.Sandbox) { s.Policy.Pids = -1 }, spec.CodeInvalidArgument},
		{"uid root", func(s *spec.Sandbox) { s.Policy.User.UID = 0 }, spec.CodeInvalidArgument},
		{"gid out of range", func(s *spec.Sandbox) { s.Policy.User.GID = 1 << 32 }, spec.CodeInvalidArgument},
		{"tmpfs zero", func(s *spec.Sandbox) { s.Policy.TmpBytes = 0 }, spec.CodeInvalidArgument},
		{"tmpfs not pages", func(s *spec.Sandbox) { s.Policy.HomeBytes = 1000 }, spec.CodeUnsupported},
		{"image not pinned", func(s *spec.Sandbox) { s.Image = dockertest.ImageTag }, spec.CodeInvalidArgument},
		{"image not present", func(s *spec.Sandbox) { s.Image = "sha256:" + strings.Repeat("0", 64) }, spec.CodeUnsupported},
		{"image declares volumes", func(s *spec.Sandbox) { s.Image = withVolume }, spec.CodeUnsupported},
		{"image labels forge event attributes", func(s *spec.Sandbox) { s.Image = forging }, spec.CodeUnsupported},
		{"image wrong architecture", func(s *spec.Sandbox) { s.Image = arm }, spec.CodeUnsupported},
		{"datasets on this engine", func(s *spec.Sandbox) {
			s.Datasets = []spec.Dataset{{Image: e.Image, Target: "/data"}}
		}, spec.CodeUnsupported},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.Adapter.CreateSandbox(context.Background(), dockerio.SandboxRequest{Owner: e.Owner, ID: testkit.NewID(), Spec: e.Spec(c.f)})
			if spec.CodeOf(err) != c.code {
				t.Fatalf("got %v, want %s", err, c.code)
			}
			if rs := e.Leftovers(t); len(rs) != 0 {
				t.Fatalf("left behind: %+v", rs)
			}
		})
	}
	var se *spec.Error
	_, err := e.Adapter.CreateSandbox(context.Background(), dockerio.SandboxRequest{Owner: e.Owner, ID: testkit.NewID(), Spec: e.Spec(func(s *spec.Sandbox) { s.Image = "sha256:" + strings.Repeat("0", 64) })})
	if !errors.As(err, &se) || !errors.Is(err, spec.ErrNotFound) {
		t.Fatalf("absent image: %v should wrap not_found", err)
	}
	for _, bad := range []string{"", "a-b", "../x", strings.Repeat("a", 65)} {
		if _, err := e.Adapter.CreateSandbox(context.Background(), dockerio.SandboxRequest{Owner: e.Owner, ID: bad, Spec: e.Spec(nil)}); !spec.IsCode(err, spec.CodeInvalidArgument) {
			t.Errorf("sandbox id %q: %v", bad, err)
		}
	}
}

// TestDockerioDatasetsRefusedForReal: this engine cannot mount images. The
// profile refuses before Docker is asked; the raw daemon also refuses the
// mount type, which shows the refusal is not overcautious.
func TestDockerioDatasetsRefusedForReal(t *testing.T) {
	e := testkit.NewDio(t)
	ctx := context.Background()
	id := testkit.NewID()
	s := e.Spec(func(s *spec.Sandbox) { s.Datasets = []spec.Dataset{{Image: e.Image, Target: "/data"}} })
	_, err := e.Adapter.CreateSandbox(ctx, dockerio.SandboxRequest{Owner: e.Owner, ID: id, Spec: s})
	if !spec.IsCode(err, spec.CodeUnsupported) || !strings.Contains(err.Error(), "dataset") {
		t.Fatalf("got %v", err)
	}
	b := dockerio.ContainerBody(e.Adapter.Profile(), s, e.Owner, id, dockerio.RoleWorkload, dockerio.Name(e.Owner, id, dockerio.RoleVolume), "")
	_, err = e.Docker.ContainerCreate(ctx, b.Config, b.HostConfig, nil, nil, dockerio.Name(e.Owner, id, dockerio.RoleWorkload))
	if err == nil {
		t.Fatal("the daemon accepted an image mount: this engine may support datasets after all")
	}
	t.Logf("daemon refuses image mounts: %v", err)
	_ = dockertest.RemoveOwned(ctx, e.Docker, e.Owner) // the volume the raw create may have made
}

// TestDockerioArchiveRoundTrip: files enter and leave /workspace through the
// export container, owned by the sandbox's uid:gid; a read from a running
// workload pauses it or says it is live.
func TestDockerioArchiveRoundTrip(t *testing.T) {
	e := testkit.NewDio(t)
	ctx := context.Background()
	sb := e.Sandbox(t, nil)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "sub/", Mode: 0o4755, Uid: 0, Gid: 0}); err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("stockade\n"), 10000)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "sub/data.txt", Mode: 0o6644, Size: int64(len(body)), Uid: 0, Gid: 0}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(body); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Adapter.PutArchive(ctx, sb, "work", &buf); err != nil {
		t.Fatal(err)
	}
	if got := e.Sh(t, sb, "stat -c '%u:%g:%a' /workspace/work/sub /workspace/work/sub/data.txt && wc -c </workspace/work/sub/data.txt && echo more >>/workspace/work/sub/data.txt"); got != "65532:65532:755\n65532:65532:644\n90000\n" {
		t.Fatalf("inside the sandbox: %q", got)
	}
	for _, pause := range []bool{true, false} {
		if pause {
			if err := e.Adapter.PauseSandbox(ctx, sb); err != nil {
				t.Fatal(err)
			}
		}
		rc, err := e.Adapter.GetArchive(ctx, sb, "work/sub")
		if err != nil {
			t.Fatal(err)
		}
		if pause {
			c, _ := e.Docker.ContainerInspect(ctx, sb.Workload)
			if !c.State.Paused {
				t.Fatal("workload not paused during a consistent read")
			}
		}
		tr := tar.NewReader(rc)
		seen := 0
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Uid != 65532 || h.Gid != 65532 {
				t.Errorf("%s owned %d:%d", h.Name, h.Uid, h.Gid)
			}
			if h.Name == "sub/data.txt" {
				b, _ := io.ReadAll(tr)
				if !bytes.Equal(b, append(append([]byte(nil), body...), "more\n"...)) {
					t.Errorf("data.txt round trip: %d bytes", len(b))
				}
			}
			seen++
		}
		if err := rc.Close(); err != nil {
			t.Fatal(err)
		}
		// Unpausing twice (or a workload never paused) is no error.
		for range 2 {
			if err := e.Adapter.UnpauseSandbox(ctx, sb); err != nil {
				t.Fatal(err)
			}
		}
		if seen != 2 {
			t.Fatalf("%d entries", seen)
		}
		c, _ := e.Docker.ContainerInspect(ctx, sb.Workload)
		if c.State.Paused {
			t.Fatal("workload left paused")
		}
	}
	for _, bad := range []string{"/etc", "../x", "work/../../x"} {
		if err := e.Adapter.PutArchive(ctx, sb, bad, bytes.NewReader(nil)); !spec.IsCode(err, spec.CodeInvalidArgument) {
			t.Errorf("path %q: %v", bad, err)
		}
	}
	var dev bytes.Buffer
	tw = tar.NewWriter(&dev)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeChar, Name: "null", Devmajor: 1, Devminor: 3}); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Adapter.PutArchive(ctx, sb, "work", &dev); !spec.IsCode(err, spec.CodeInvalidArgument) {
		t.Errorf("device node: %v", err)
	}
	if _, err := e.Adapter.GetArchive(ctx, sb, "work/absent"); !spec.IsCode(err, spec.CodeNotFound) {
		t.Errorf("absent path: %v", err)
	}
}
