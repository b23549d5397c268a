//go:build load

package load

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stockade/stockade/profile"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"

	clientpkg "github.com/stockade/stockade/client"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/framing"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// The load test (make load): 100 sandboxes of the realistic image
// (python3) created, used (3 python3 processes each) and removed at once through one server on this machine, then the
// same work with the raw Docker client at the same concurrency. It reports
// p50/p99 of create and exec for both and their ratios; it fails on any
// error, on a resource left behind, or on a journal that does not verify.
//
//	CI=true go test -tags load -run TestLoad -v -timeout 30m ./test/load/

const (
	loadSandboxes = 100
	loadExecs     = 3
)

// loadTimes collects durations from many goroutines.
type loadTimes struct {
	mu           sync.Mutex
	create, exec []time.Duration
	errs         []error
}

func (l *loadTimes) add(create time.Duration, execs []time.Duration, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.errs = append(l.errs, err)
		return
	}
	l.create = append(l.create, create)
	l.exec = append(l.exec, execs...)
}

func TestLoad100(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	e := testkit.NewCLI(t)
	cli := dockertest.Client(t)
	// The realistic image: each process is a python3 interpreter.
	image := dockertest.PythonImageID(t, cli)
	srv := e.Serve(t, ctx)
	c, err := clientpkg.Dial(srv.Sock)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	pol := testkit.SmallPolicy()
	pol.MemoryBytes = 64 << 20

	var served loadTimes
	start := time.Now()
	var wg sync.WaitGroup
	for i := range loadSandboxes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			served.add(servedRound(ctx, c, image, pol, i))
		}()
	}
	wg.Wait()
	servedWall := time.Since(start)
	if len(served.errs) > 0 {
		t.Fatalf("%d of %d sandboxes failed through the server; first: %v", len(served.errs), loadSandboxes, served.errs[0])
	}
	if err := srv.Stop(t, syscall.SIGTERM); err != nil {
		t.Fatalf("serve: %v\n%s", err, srv.Logs.String())
	}
	owner := testkit.OwnerOfJournal(t, e)
	if n, err := dockertest.Owned(ctx, cli, owner); err != nil || n != 0 {
		t.Errorf("after the served load, %d resources of owner %s are left (%v)", n, owner, err)
	}
	if code, out, errOut := e.Run(t, "", "journal", "verify"); code != 0 {
		t.Errorf("journal verify: %d %s %s", code, out, errOut)
	}

	// The anchor: the same work with the raw Docker client, same
	// concurrency, the same container bodies.
	a, err := dockerio.NewAdapter(dockerio.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Preflight(ctx); err != nil {
		t.Fatal(err)
	}
	rawOwner := "load" + dockertest.RandomHex(6)
	dockertest.CleanupOwner(t, cli, rawOwner)
	var raw loadTimes
	start = time.Now()
	for i := range loadSandboxes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			raw.add(rawRound(ctx, cli, a.Profile(), rawOwner, image, pol, i))
		}()
	}
	wg.Wait()
	rawWall := time.Since(start)
	if len(raw.errs) > 0 {
		t.Fatalf("%d of %d raw rounds failed; first: %v", len(raw.errs), loadSandboxes, raw.errs[0])
	}

	line := func(name string, s, r []time.Duration) string {
		return fmt.Sprintf("%-7s stockade p50 %7.1f ms p99 %7.1f ms | raw p50 %7.1f ms p99 %7.1f ms | ratio p50 %.2f p99 %.2f",
			name, testkit.Ms(testkit.Percentile(s, 0.5)), testkit.Ms(testkit.Percentile(s, 0.99)), testkit.Ms(testkit.Percentile(r, 0.5)), testkit.Ms(testkit.Percentile(r, 0.99)),
			float64(testkit.Percentile(s, 0.5))/float64(testkit.Percentile(r, 0.5)), float64(testkit.Percentile(s, 0.99))/float64(testkit.Percentile(r, 0.99)))
	}
	report := strings.Join([]string{
		fmt.Sprintf("%d sandboxes × %d processes at once, through one server vs the raw client", loadSandboxes, loadExecs),
		line("create", served.create, raw.create),
		line("exec", served.exec, raw.exec),
		fmt.Sprintf("wall    stockade %.1f s | raw %.1f s | ratio %.2f", servedWall.Seconds(), rawWall.Seconds(), servedWall.Seconds()/rawWall.Seconds()),
	}, "\n")
	t.Log("\n" + report)
	fmt.Fprintln(os.Stderr, report)
}

// loadArgv is process k of sandbox i: a python3 that prints "i k".
func loadArgv(i, k int) []string {
	return []string{"python3", "-c", "import sys; print(sys.argv[1], sys.argv[2])", fmt.Sprint(i), fmt.Sprint(k)}
}

// servedRound is one sandbox's life through the server: create, three
// processes one after another, remove.
func servedRound(ctx context.Context, c *clientpkg.Client, image string, pol spec.Policy, i int) (time.Duration, []time.Duration, error) {
	t0 := time.Now()
	sb, err := c.CreateSandbox(ctx, spec.Sandbox{Image: image, Policy: pol, Lifetime: spec.Kept})
	if err != nil {
		return 0, nil, fmt.Errorf("create %d: %w", i, err)
	}
	create := time.Since(t0)
	var execs []time.Duration
	for k := range loadExecs {
		t0 := time.Now()
		p, err := sb.Start(ctx, spec.Process{Argv: loadArgv(i, k)})
		if err != nil {
			return 0, nil, fmt.Errorf("start %d/%d: %w", i, k, err)
		}
		go func() { _, _ = io.Copy(io.Discard, p.Stderr()) }()
		out, _ := io.ReadAll(p.Stdout())
		res, err := p.Wait(ctx)
		if err != nil || res.ExitCode != 0 || string(out) != fmt.Sprintln(i, k) {
			return 0, nil, fmt.Errorf("process %d/%d: %q %+v %v", i, k, out, res, err) //nolint:errorlint // err is nil when the result is what failed: %w would print %!w(<nil>)
		}
		execs = append(execs, time.Since(t0))
	}
	if err := sb.Remove(ctx); err != nil {
		return 0, nil, fmt.Errorf("remove %d: %w", i, err)
	}
	return create, execs, nil
}

// rawRound is the same work with the Docker client alone: the volume, the
// export and workload containers with stockade's bodies, the workspace
// seeded, the workload started; three execs read to their end and
// inspected; everything removed.
func rawRound(ctx context.Context, cli *client.Client, p profile.Profile, owner, image string, pol spec.Policy, i int) (time.Duration, []time.Duration, error) {
	id := fmt.Sprintf("raw%d", i)
	s := spec.Sandbox{Image: image, Policy: pol, Lifetime: spec.Kept}
	t0 := time.Now()
	vol := dockerio.Name(owner, id, dockerio.RoleVolume)
	if _, err := cli.VolumeCreate(ctx, volume.CreateOptions{Name: vol, Labels: dockerio.Labels(owner, id, dockerio.RoleVolume, p.Revision())}); err != nil {
		return 0, nil, err
	}
	var ids []string
	for _, role := range []dockerio.Role{dockerio.RoleExport, dockerio.RoleWorkload} {
		body := dockerio.ContainerBody(p, s, owner, id, role, vol, "")
		c, err := cli.ContainerCreate(ctx, body.Config, body.HostConfig, nil, nil, dockerio.Name(owner, id, role))
		if err != nil {
			return 0, nil, err
		}
		ids = append(ids, c.ID)
	}
	var seed bytes.Buffer
	tw := tar.NewWriter(&seed)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "work/", Mode: 0o755, Uid: 65532, Gid: 65532}); err != nil {
		return 0, nil, err
	}
	if err := tw.Close(); err != nil {
		return 0, nil, err
	}
	if err := cli.CopyToContainer(ctx, ids[0], dockerio.WorkspaceDir, &seed, container.CopyToContainerOptions{}); err != nil {
		return 0, nil, err
	}
	if err := cli.ContainerStart(ctx, ids[1], container.StartOptions{}); err != nil {
		return 0, nil, err
	}
	create := time.Since(t0)
	var execs []time.Duration
	for k := range loadExecs {
		t0 := time.Now()
		cr, err := cli.ContainerExecCreate(ctx, ids[1], container.ExecOptions{User: "65532:65532", AttachStdout: true, AttachStderr: true, Cmd: loadArgv(i, k)})
		if err != nil {
			return 0, nil, err
		}
		hj, err := cli.ContainerExecAttach(ctx, cr.ID, container.ExecAttachOptions{})
		if err != nil {
			return 0, nil, err
		}
		var out, errOut bytes.Buffer
		_, _ = framing.Copy(&out, &errOut, hj.Reader)
		hj.Close()
		ins, err := cli.ContainerExecInspect(ctx, cr.ID)
		if err != nil || ins.ExitCode != 0 || out.String() != fmt.Sprintln(i, k) {
			return 0, nil, fmt.Errorf("raw exec %d/%d: %q %q %+v %v", i, k, out.String(), errOut.String(), ins, err) //nolint:errorlint // err is nil when the result is what failed: %w would print %!w(<nil>)
		}
		execs = append(execs, time.Since(t0))
	}
	for _, c := range ids {
		if err := cli.ContainerRemove(ctx, c, container.RemoveOptions{Force: true}); err != nil {
			return 0, nil, err
		}
	}
	if err := cli.VolumeRemove(ctx, vol, true); err != nil {
		return 0, nil, err
	}
	return create, execs, nil
}
