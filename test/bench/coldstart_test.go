package bench

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stockade/stockade/profile"

	"github.com/docker/docker/api/types/container"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// BenchmarkColdStart: a cold sandbox's time to first output, through the
// embedded API — CreateSandbox called → the first byte of `echo hi`'s
// stdout read (the create journaled and verified, the warden up, the process
// reserved, spawned and started, its first output byte delivered) — vs
// `docker run --rm` of the same image printing the same thing with the
// isolation flags of the sandbox's body, to its first output byte. Target:
// p50 ratio ≤ 1.2.
//
// The runtime is opened once, before the loop (a cold sandbox, not a cold
// runtime: BenchmarkWardenRunOneShot times the whole CLI). The removal of
// each sandbox, and the anchor's (--rm: the daemon removes the container
// once it exits), happen after the timed part and are not timed.
//
// Two anchors, both timed to their first output byte. docker-client is
// what the docker CLI does for `docker run --rm IMAGE echo hi` (create with
// AutoRemove, attach stdout and stderr, start, read) through the Go client
// in this process: no CLI process start, the harder anchor; its body is the
// sandbox workload's (dockerio.ContainerBody: the user, read-only root,
// every capability dropped, no new privileges, private IPC and cgroup
// namespaces, network none, the limits, the two tmpfs, init) without the
// workspace volume and with `echo hi` as its command. docker-cli is the
// docker CLI itself (`docker run --rm` with the same flags as
// BenchmarkWardenRunOneShot's anchor), its process start included. The
// ratios are stockade's p50 (and p99) over each anchor's.
//
//	STOCKADE_PROFILE=linux-x64-engine20-cgroupv1 go test -run '^$' -bench BenchmarkColdStart -benchtime 20x ./test/bench/
func BenchmarkColdStart(b *testing.B) {
	cli := dockertest.Client(b)
	ctx := context.Background()
	rt, err := stockade.Open(ctx, stockade.Options{Journal: filepath.Join(b.TempDir(), "j.db")})
	if err != nil {
		b.Fatal(err)
	}
	dockertest.CleanupOwner(b, cli, rt.Owner())
	b.Cleanup(func() { _ = rt.Close() })
	owner := dockertest.Owner(b, cli)
	profile, err := profile.Select("")
	if err != nil {
		b.Fatal(err)
	}
	pol := spec.DefaultPolicy()
	body := dockerio.ContainerBody(profile, spec.Sandbox{Image: dockertest.ImageTag, Policy: pol}, owner, "anchor", dockerio.RoleWorkload, "", "")
	body.Config.Entrypoint, body.Config.Cmd = nil, []string{"echo", "hi"}
	body.Config.AttachStdout, body.Config.AttachStderr = true, true
	body.HostConfig.Mounts = nil
	body.HostConfig.AutoRemove = true

	image := dockertest.ImageID(b, cli)
	cliArgs := []string{"run", "--rm", "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
		"--user", pol.User.String(), "--network", "none", "--init", "--ipc", "private", "--cgroupns", "private",
		"--memory", fmt.Sprint(pol.MemoryBytes), "--memory-swap", fmt.Sprint(pol.MemoryBytes), "--pids-limit", fmt.Sprint(pol.Pids),
		"--cpus", fmt.Sprint(pol.CPUs), "--tmpfs", "/tmp:rw,nosuid,nodev,noexec,size=64m", "--tmpfs", "/home/sandbox:rw,nosuid,nodev,noexec,size=64m",
		image, "echo", "hi"}
	var ours, anchor, anchorCLI []time.Duration
	viaAPI := func() {
		t0 := time.Now()
		sb, err := rt.CreateSandbox(ctx, spec.Sandbox{Image: dockertest.ImageTag, Policy: pol, Lifetime: spec.OneShot})
		if err != nil {
			b.Fatal(err)
		}
		p, err := sb.Start(ctx, spec.Process{Argv: []string{"echo", "hi"}})
		if err != nil {
			b.Fatal(err)
		}
		first := make([]byte, 1)
		if _, err := io.ReadFull(p.Stdout(), first); err != nil {
			b.Fatalf("reading the first byte: %v", err)
		}
		ours = append(ours, time.Since(t0))
		go func() { _, _ = io.Copy(io.Discard, p.Stderr()) }()
		_, _ = io.Copy(io.Discard, p.Stdout())
		if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 {
			b.Fatalf("echo: %+v %v", res, err)
		}
		if err := sb.Remove(ctx); err != nil {
			b.Fatal(err)
		}
	}
	viaDocker := func() {
		t0 := time.Now()
		c, err := cli.ContainerCreate(ctx, body.Config, body.HostConfig, nil, nil, "")
		if err != nil {
			b.Fatal(err)
		}
		// Subscribed before the start, as the CLI does: an AutoRemove
		// container may be gone before a later wait could begin.
		removed, waitErr := cli.ContainerWait(ctx, c.ID, container.WaitConditionRemoved)
		hj, err := cli.ContainerAttach(ctx, c.ID, container.AttachOptions{Stream: true, Stdout: true, Stderr: true})
		if err != nil {
			b.Fatal(err)
		}
		defer hj.Close()
		if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
			b.Fatal(err)
		}
		// Docker's multiplexed framing: an 8-byte header, then the payload.
		first := make([]byte, 9)
		if _, err := io.ReadFull(hj.Reader, first); err != nil {
			b.Fatalf("reading the first byte: %v", err)
		}
		anchor = append(anchor, time.Since(t0))
		if first[0] != 1 || first[8] != 'h' {
			b.Fatalf("first frame %q: want stdout starting with h", first)
		}
		_, _ = io.Copy(io.Discard, hj.Reader)
		select {
		case w := <-removed:
			if w.StatusCode != 0 {
				b.Fatalf("docker run: exit %d", w.StatusCode)
			}
		case err := <-waitErr:
			b.Fatal(err)
		}
	}
	viaCLI := func() {
		cmd := exec.Command("docker", cliArgs...)
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		first := make([]byte, 1)
		if _, err := io.ReadFull(out, first); err != nil {
			b.Fatalf("docker run printed nothing: %v", err)
		}
		anchorCLI = append(anchorCLI, time.Since(t0))
		_, _ = io.Copy(io.Discard, out)
		if err := cmd.Wait(); err != nil {
			b.Fatalf("docker run: %v", err)
		}
	}
	runs := []func(){viaAPI, viaDocker, viaCLI}
	b.ResetTimer()
	for i := range b.N {
		for k := range runs {
			runs[(i+k)%len(runs)]() // each goes first in turn
		}
	}
	b.StopTimer()
	p50, p99 := percentiles(ours)
	b.ReportMetric(testkit.Ms(p50), "stockade-p50-ms")
	b.ReportMetric(testkit.Ms(p99), "stockade-p99-ms")
	b.Logf("stockade      %s", fmtDurations(ours))
	for _, a := range []struct {
		name string
		ds   []time.Duration
	}{{"docker-client", anchor}, {"docker-cli", anchorCLI}} {
		a50, a99 := percentiles(a.ds)
		b.ReportMetric(testkit.Ms(a50), a.name+"-p50-ms")
		b.ReportMetric(testkit.Ms(a99), a.name+"-p99-ms")
		b.ReportMetric(float64(p50)/float64(a50), "ratio-p50-"+a.name)
		b.ReportMetric(float64(p99)/float64(a99), "ratio-p99-"+a.name)
		b.Logf("%-13s %s", a.name, fmtDurations(a.ds))
	}
}

// percentiles returns the p50 and p99 of ds (nearest rank).
func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return rank(0.50), rank(0.99)
}

func fmtDurations(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	out := ""
	for _, d := range s {
		out += fmt.Sprintf(" %.0f", testkit.Ms(d))
	}
	return "ms, sorted:" + out
}
