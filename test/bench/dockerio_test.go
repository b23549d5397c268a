package bench

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// The dockerio benchmarks each run stockade's path and its anchor
// alternately in the same loop (the machine is shared, so interleaving keeps
// drift out of the ratio) and report both times and their ratio.
//
//	go test -run '^$' -bench BenchmarkDockerio -benchtime 10x ./test/bench/

// BenchmarkDockerioSandboxCreate: create+start+verify through dockerio vs
// the same resources (volume, export and workload containers, the seed
// archive, start) made with raw client calls and no verification. Target
// ratio ≤ 1.15.
func BenchmarkDockerioSandboxCreate(b *testing.B) {
	e := testkit.NewDio(b)
	ctx := context.Background()
	s := e.Spec(nil)
	var dio, raw time.Duration
	for i := 0; i < b.N; i++ {
		id := testkit.NewID()
		t0 := time.Now()
		sb, err := e.Adapter.CreateSandbox(ctx, dockerio.SandboxRequest{Owner: e.Owner, ID: id, Spec: s})
		if err != nil {
			b.Fatal(err)
		}
		if err := e.Adapter.StartSandbox(ctx, sb); err != nil {
			b.Fatal(err)
		}
		dio += time.Since(t0)
		if err := e.Adapter.RemoveSandbox(ctx, sb); err != nil {
			b.Fatal(err)
		}

		id = testkit.NewID()
		p := e.Adapter.Profile()
		t0 = time.Now()
		vol := dockerio.Name(e.Owner, id, dockerio.RoleVolume)
		if _, err := e.Docker.VolumeCreate(ctx, volume.CreateOptions{Name: vol, Labels: dockerio.Labels(e.Owner, id, dockerio.RoleVolume, p.Revision())}); err != nil {
			b.Fatal(err)
		}
		var ids []string
		for _, role := range []dockerio.Role{dockerio.RoleExport, dockerio.RoleWorkload} {
			body := dockerio.ContainerBody(p, s, e.Owner, id, role, vol, "")
			c, err := e.Docker.ContainerCreate(ctx, body.Config, body.HostConfig, nil, nil, dockerio.Name(e.Owner, id, role))
			if err != nil {
				b.Fatal(err)
			}
			ids = append(ids, c.ID)
		}
		var seed bytes.Buffer
		tw := tar.NewWriter(&seed)
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "work/", Mode: 0o755, Uid: 65532, Gid: 65532}); err != nil {
			b.Fatal(err)
		}
		if err := tw.Close(); err != nil {
			b.Fatal(err)
		}
		if err := e.Docker.CopyToContainer(ctx, ids[0], dockerio.WorkspaceDir, &seed, container.CopyToContainerOptions{}); err != nil {
			b.Fatal(err)
		}
		if err := e.Docker.ContainerStart(ctx, ids[1], container.StartOptions{}); err != nil {
			b.Fatal(err)
		}
		raw += time.Since(t0)
		if err := e.Adapter.RemoveSandbox(ctx, dockerio.Sandbox{Owner: e.Owner, ID: id}); err != nil {
			b.Fatal(err)
		}
	}
	report(b, "dockerio", dio, "raw", raw)
}

// BenchmarkDockerioExecTrue: `true` through dockerio (create, attach, read
// to EOF, wait for the exit code) vs `docker exec` on the CLI. Target ratio
// ≤ 0.5.
func BenchmarkDockerioExecTrue(b *testing.B) {
	e := testkit.NewDio(b)
	sb := e.Sandbox(b, nil)
	ctx := context.Background()
	var dio, cli, floor time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if r, err := e.TryExec(sb, nil, "true"); err != nil || r.Code != 0 {
			b.Fatalf("dockerio: %+v %v", r, err)
		}
		dio += time.Since(t0)
		// The floor: the raw client running `true` with no wrapper, no
		// group record, no checks (create, attach, read to EOF, inspect).
		t0 = time.Now()
		cr, err := e.Docker.ContainerExecCreate(ctx, sb.Workload, container.ExecOptions{User: "65532:65532", AttachStdout: true, AttachStderr: true, Cmd: []string{"true"}})
		if err != nil {
			b.Fatal(err)
		}
		hj, err := e.Docker.ContainerExecAttach(ctx, cr.ID, container.ExecAttachOptions{})
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, hj.Reader)
		hj.Close()
		if _, err := e.Docker.ContainerExecInspect(ctx, cr.ID); err != nil {
			b.Fatal(err)
		}
		floor += time.Since(t0)
		t0 = time.Now()
		if out, err := exec.Command("docker", "exec", "-u", "65532:65532", sb.Workload, "true").CombinedOutput(); err != nil {
			b.Fatalf("docker exec: %v %s", err, out)
		}
		cli += time.Since(t0)
	}
	report(b, "dockerio", dio, "cli", cli)
	b.ReportMetric(float64(floor.Milliseconds())/float64(b.N), "raw-floor-ms/op")
	b.ReportMetric(floor.Seconds()/cli.Seconds(), "floor-ratio")
}

// BenchmarkDockerioOutput1GiB: 1 GiB of stdout through dockerio (hashing
// nothing, just Next to EOF) vs the raw client + stdcopy.StdCopy into
// io.Discard, same sandbox, same command. The ratio is dockerio's throughput
// over raw's. Target ≥ 0.95.
func BenchmarkDockerioOutput1GiB(b *testing.B) {
	e := testkit.NewDio(b)
	sb := e.Sandbox(b, func(s *spec.Sandbox) { s.Policy.CPUs = 2 })
	size := 1 << 30
	if mib, err := strconv.Atoi(os.Getenv("STOCKADE_BENCH_OUTPUT_MIB")); err == nil && mib > 0 {
		size = mib << 20 // a smaller run for a quick look; the figure is for 1 GiB
	}
	cmd := []string{"/bin/sh", "-c", "yes " + testkit.PatternLine + " | head -c " + strconv.Itoa(size)}
	ctx := context.Background()
	var dio, raw time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		drainOutput(b, e, sb, cmd, size)
		dio += time.Since(t0)

		t0 = time.Now()
		cr, err := e.Docker.ContainerExecCreate(ctx, sb.Workload, container.ExecOptions{User: "65532:65532", AttachStdout: true, AttachStderr: true, Cmd: cmd})
		if err != nil {
			b.Fatal(err)
		}
		hj, err := e.Docker.ContainerExecAttach(ctx, cr.ID, container.ExecAttachOptions{})
		if err != nil {
			b.Fatal(err)
		}
		m, err := stdcopy.StdCopy(io.Discard, io.Discard, hj.Reader)
		hj.Close()
		if err != nil || m != int64(size) {
			b.Fatalf("raw: %d bytes, %v", m, err)
		}
		for {
			ins, err := e.Docker.ContainerExecInspect(ctx, cr.ID)
			if err != nil {
				b.Fatal(err)
			}
			if !ins.Running {
				break
			}
			time.Sleep(time.Millisecond)
		}
		raw += time.Since(t0)
	}
	b.ReportMetric(float64(size)*float64(b.N)/dio.Seconds()/(1<<20), "dockerio-MiB/s")
	b.ReportMetric(float64(size)*float64(b.N)/raw.Seconds()/(1<<20), "raw-MiB/s")
	b.ReportMetric(raw.Seconds()/dio.Seconds(), "throughput-ratio")
}

// drainOutput runs cmd through dockerio (create, attach, Next to EOF, wait)
// and checks it wrote size bytes and exited 0.
func drainOutput(b *testing.B, e *testkit.DioEnv, sb dockerio.Sandbox, cmd []string, size int) {
	b.Helper()
	ctx := context.Background()
	req := dockerio.ExecRequest{ProcessID: testkit.NewID(), Spec: spec.Process{Argv: cmd, Stdout: spec.Pipe, Stderr: spec.Pipe}}
	id, err := e.Adapter.CreateExec(ctx, sb, req)
	if err != nil {
		b.Fatal(err)
	}
	att, err := e.Adapter.AttachExec(ctx, sb, id, req)
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for {
		_, p, err := att.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		n += int64(len(p))
	}
	_ = att.Close()
	if st, err := dockerio.WaitExec(ctx, e.Adapter, id); err != nil || st.ExitCode != 0 || n != int64(size) {
		b.Fatalf("dockerio: %+v %v, %d bytes", st, err, n)
	}
}

func report(b *testing.B, aName string, a time.Duration, bName string, bd time.Duration) {
	b.ReportMetric(float64(a.Milliseconds())/float64(b.N), aName+"-ms/op")
	b.ReportMetric(float64(bd.Milliseconds())/float64(b.N), bName+"-ms/op")
	b.ReportMetric(a.Seconds()/bd.Seconds(), "ratio")
}
