package bench

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// BenchmarkChangesTrees: what tracking costs on real trees no one here
// wrote, in a sandbox of the developer image (git, python3; 1 CPU, then 2):
// each command run tracked (the default: a stockade process) and by
// `docker exec` in the same container (the untracked floor: no warden, no
// filter), interleaved, b.N pairs; the ratio of the medians.
//
//   - unpack: `tar xf` of this machine's Go src/ (~11k files, ~150 MiB);
//   - grep: `grep -r` over that tree (a reader: nothing to track);
//   - remove: `rm -rf` of it;
//   - clone: `git clone --no-local` of this repository (every commit);
//   - compileall: `python3 -m compileall` of a copy of the standard library.
//
// Each tracked run's report is checked to name every change (the unpack's
// and the remove's counts against the archive's entries). Issue 34's
// target: ≤ 1.25× on the writers, ≤ 1.02× on the reader.
//
//	go test -run '^$' -bench BenchmarkChangesTrees -benchtime 5x -timeout 60m ./test/bench/
func BenchmarkChangesTrees(b *testing.B) {
	archive, entries := goSrcArchive(b)
	repo := bareRepo(b)
	for _, cpus := range []float64{1, 2} {
		b.Run(fmt.Sprintf("cpus=%g", cpus), func(b *testing.B) { changesTrees(b, cpus, archive, entries, repo) })
	}
}

func changesTrees(b *testing.B, cpus float64, archive string, entries int, repo string) {
	e := testkit.NewAPI(b, stockade.Options{})
	image := dockertest.DevtoolsImageID(b, e.Docker)
	pol := testkit.SmallPolicy()
	pol.CPUs = cpus
	pol.MemoryBytes = 1 << 30
	pol.Pids = 256
	ctx := context.Background()
	sb, err := e.RT.CreateSandbox(ctx, spec.Sandbox{Image: image, Policy: pol})
	if err != nil {
		b.Fatal(err)
	}
	putFiles(b, sb, map[string]string{"src.tar": archive})
	putDir(b, sb, repo, "repo.git")
	workload := dockerio.Name(e.RT.Owner(), sb.ID(), dockerio.RoleWorkload)
	// A Put freezes the workload and answers before its unpause lands.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		ins, err := e.Docker.ContainerInspect(ctx, workload)
		if err != nil || time.Now().After(deadline) {
			b.Fatalf("the workload stays paused after a Put: %v", err)
		}
		if !ins.State.Paused {
			break
		}
	}
	floor := func(script string) time.Duration { return dockerExec(b, e, workload, script) }
	trackedRun(b, e.RT, sb, "true") // the warden starts with the sandbox's first process
	idle := wardenMemory(b, e, workload)
	floor("cp -a /usr/lib/python3.11 py && rm -rf py/site-packages py/test && find py -name __pycache__ -prune -exec rm -rf {} +")

	type mode struct {
		name string
		run  func(script string) (time.Duration, *lifecycle.Changes)
	}
	tracked := func(script string) (time.Duration, *lifecycle.Changes) {
		return trackedRun(b, e.RT, sb, script)
	}
	untracked := func(script string) (time.Duration, *lifecycle.Changes) { return floor(script), nil }
	modes := []mode{{"tracked", tracked}, {"exec", untracked}}

	cases := []struct {
		name   string
		script string
		reset  string // run by docker exec after each run, untimed
		check  func(c *lifecycle.Changes) error
		before string // run by docker exec before each run, untimed
	}{
		{name: "unpack", script: "tar xf src.tar", reset: "rm -rf go",
			check: counted(func(c *lifecycle.Changes) int { return c.Created }, entries)},
		{name: "grep", before: "tar xf src.tar", script: "grep -r -q zqxjzqxj go || true", reset: "rm -rf go",
			check: counted(func(c *lifecycle.Changes) int { return c.Total() }, 0)},
		{name: "remove", before: "tar xf src.tar", script: "rm -rf go",
			check: counted(func(c *lifecycle.Changes) int { return c.Deleted }, entries)},
		{name: "clone", script: "git clone -q --no-local repo.git clone", reset: "rm -rf clone",
			check: atLeast(func(c *lifecycle.Changes) int { return c.Created }, 500)},
		{name: "compileall", script: "python3 -m compileall -q py >/dev/null", reset: "find py -name __pycache__ -prune -exec rm -rf {} +",
			check: atLeast(func(c *lifecycle.Changes) int { return c.Created }, 500)},
	}
	times := make(map[string][]time.Duration)
	var afterUnpack int64
	for b.Loop() {
		for _, c := range cases {
			order := modes
			if len(times[c.name+"/tracked"])%2 == 1 {
				order = []mode{modes[1], modes[0]} // neither always runs first
			}
			for _, m := range order {
				if c.before != "" {
					floor(c.before)
				}
				d, ch := m.run(c.script)
				if ch != nil {
					if err := c.check(ch); err != nil {
						b.Fatalf("%s: %v (%+v)", c.name, err, summary(ch))
					}
					if c.name == "unpack" {
						// What the warden keeps once the heaviest process
						// is over (its report sent, its tracker dropped).
						time.Sleep(time.Second)
						afterUnpack = max(afterUnpack, wardenMemory(b, e, workload).rss)
					}
				}
				times[c.name+"/"+m.name] = append(times[c.name+"/"+m.name], d)
				if c.reset != "" {
					floor(c.reset)
				}
			}
		}
	}
	// What the warden holds once the heavy processes are over (their
	// trackers released), against what it held at the start.
	time.Sleep(time.Second)
	after := wardenMemory(b, e, workload)
	b.ReportMetric(float64(idle.rss)/(1<<20), "warden-idle-rss-MiB")
	b.ReportMetric(float64(after.rss)/(1<<20), "warden-after-rss-MiB")
	b.ReportMetric(float64(afterUnpack)/(1<<20), "warden-after-unpack-rss-MiB")
	b.ReportMetric(float64(after.hwm)/(1<<20), "warden-peak-rss-MiB")
	for _, c := range cases {
		t, _ := percentiles(times[c.name+"/tracked"])
		x, _ := percentiles(times[c.name+"/exec"])
		b.ReportMetric(float64(t.Microseconds())/1000, c.name+"-tracked-ms")
		b.ReportMetric(float64(x.Microseconds())/1000, c.name+"-exec-ms")
		b.ReportMetric(t.Seconds()/x.Seconds(), c.name+"-ratio")
	}
}

func counted(n func(*lifecycle.Changes) int, want int) func(*lifecycle.Changes) error {
	return func(c *lifecycle.Changes) error {
		if c.Untracked != "" || c.Incomplete != "" || n(c) != want {
			return fmt.Errorf("report counts %d, want %d", n(c), want)
		}
		return nil
	}
}

func atLeast(n func(*lifecycle.Changes) int, want int) func(*lifecycle.Changes) error {
	return func(c *lifecycle.Changes) error {
		if c.Untracked != "" || c.Incomplete != "" || n(c) < want {
			return fmt.Errorf("report counts %d, want at least %d", n(c), want)
		}
		return nil
	}
}

func summary(c *lifecycle.Changes) string {
	return fmt.Sprintf("created %d modified %d deleted %d renamed %d omitted %d incomplete %q untracked %q",
		c.Created, c.Modified, c.Deleted, c.Renamed, c.Omitted, c.Incomplete, c.Untracked)
}

// trackedRun runs script by sh -c as a stockade process (tracked) in
// /workspace/work and returns the time from Start to the end of Wait and
// the changes journaled with its exit.
func trackedRun(b *testing.B, rt *stockade.Runtime, sb *stockade.Sandbox, script string) (time.Duration, *lifecycle.Changes) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t0 := time.Now()
	p, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", script}, Stdout: spec.Discard, Stderr: spec.Pipe})
	if err != nil {
		b.Fatal(err)
	}
	errOut, _ := io.ReadAll(p.Stderr())
	res, err := p.Wait(ctx)
	d := time.Since(t0)
	if err != nil || res.ExitCode != 0 {
		b.Fatalf("%s: %+v %v %s", script, res, err, errOut)
	}
	ch, err := rt.Changes(ctx, p.ID())
	if err != nil || ch.Changes == nil {
		b.Fatalf("changes of %s: %v", script, err)
	}
	return d, ch.Changes
}

// dockerExec runs script by sh -c with `docker exec` semantics (create,
// attach, read to EOF, inspect) as the sandbox user in /workspace/work and
// returns how long it took.
func dockerExec(b *testing.B, e *testkit.APIEnv, workload, script string) time.Duration {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t0 := time.Now()
	cr, err := e.Docker.ContainerExecCreate(ctx, workload, container.ExecOptions{User: "65532:65532", WorkingDir: "/workspace/work", AttachStdout: true, AttachStderr: true, Cmd: []string{"sh", "-c", script}})
	if err != nil {
		b.Fatal(err)
	}
	hj, err := e.Docker.ContainerExecAttach(ctx, cr.ID, container.ExecAttachOptions{})
	if err != nil {
		b.Fatal(err)
	}
	var errOut bytes.Buffer
	_, _ = stdcopy.StdCopy(io.Discard, &errOut, hj.Reader)
	hj.Close()
	ins, err := e.Docker.ContainerExecInspect(ctx, cr.ID)
	d := time.Since(t0)
	if err != nil || ins.ExitCode != 0 {
		b.Fatalf("docker exec %s: %+v %v %s", script, ins, err, errOut.String())
	}
	return d
}

// memory is a process's resident set now and at its peak, in bytes.
type memory struct{ rss, hwm int64 }

// wardenMemory reads the sandbox's warden's memory from the host's /proc
// (the warden is not dumpable: its own /proc files are root's).
func wardenMemory(b *testing.B, e *testkit.APIEnv, workload string) memory {
	b.Helper()
	top, err := e.Docker.ContainerTop(context.Background(), workload, []string{"-eo", "pid,comm"})
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range top.Processes {
		if len(p) == 2 && p[1] == "stockade-warden" {
			st, err := os.ReadFile("/proc/" + p[0] + "/status")
			if err != nil {
				b.Fatal(err)
			}
			var m memory
			for _, line := range strings.Split(string(st), "\n") {
				f := strings.Fields(line)
				if len(f) == 3 && f[2] == "kB" {
					n, _ := strconv.ParseInt(f[1], 10, 64)
					switch f[0] {
					case "VmRSS:":
						m.rss = n << 10
					case "VmHWM:":
						m.hwm = n << 10
					}
				}
			}
			return m
		}
	}
	b.Fatalf("no stockade-warden in %s: %v", workload, top.Processes)
	return memory{}
}

// goSrcArchive is a tar of this machine's Go src/ (under go/src) in the
// benchmark's temporary directory, and the number of its entries.
func goSrcArchive(b *testing.B) (string, int) {
	b.Helper()
	out := filepath.Join(b.TempDir(), "src.tar")
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		b.Fatalf("go env GOROOT: %v", err)
	}
	cmd := exec.Command("tar", "cf", out, "--transform", "s,^src,go/src,", "src")
	cmd.Dir = strings.TrimSpace(string(goroot))
	if o, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("tar of %s/src: %v %s", cmd.Dir, err, o)
	}
	list, err := exec.Command("tar", "tf", out).Output()
	if err != nil {
		b.Fatal(err)
	}
	// One entry per member, and the go/ directory tar x makes for them.
	return out, strings.Count(string(list), "\n") + 1
}

// bareRepo is a bare clone of this repository (its whole history) in the
// benchmark's temporary directory.
func bareRepo(b *testing.B) string {
	b.Helper()
	root, err := dockertest.ModuleRoot()
	if err != nil {
		b.Fatal(err)
	}
	out := filepath.Join(b.TempDir(), "repo.git")
	if o, err := exec.Command("git", "clone", "-q", "--bare", "--no-local", root, out).CombinedOutput(); err != nil {
		b.Fatalf("bare clone of %s: %v %s", root, err, o)
	}
	o, err := exec.Command("git", "-C", out, "rev-list", "--count", "HEAD").Output()
	if n, cerr := strconv.Atoi(strings.TrimSpace(string(o))); err != nil || cerr != nil || n < 500 {
		b.Fatalf("the repository has %q commits (%v): the clone case wants at least 500", o, err)
	}
	return out
}

// putFiles copies host files into /workspace/work under the given names.
func putFiles(b *testing.B, sb *stockade.Sandbox, files map[string]string) {
	b.Helper()
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		for name, src := range files {
			f, err := os.Open(src)
			if err != nil {
				_ = pw.CloseWithError(err)
				return
			}
			fi, _ := f.Stat()
			err = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: fi.Size(), Uid: 65532, Gid: 65532})
			if err == nil {
				_, err = io.Copy(tw, f)
			}
			_ = f.Close() // read-only
			if err != nil {
				_ = pw.CloseWithError(err)
				return
			}
		}
		_ = pw.CloseWithError(tw.Close())
	}()
	if err := sb.Put(context.Background(), "/workspace/work", pr); err != nil {
		b.Fatal(err)
	}
}

// putDir copies a host directory into /workspace/work/name.
func putDir(b *testing.B, sb *stockade.Sandbox, dir, name string) {
	b.Helper()
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		root, err := os.OpenRoot(dir)
		if err != nil {
			_ = pw.CloseWithError(err)
			return
		}
		defer func() { _ = root.Close() }() // read-only
		err = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, p)
			h, err := tar.FileInfoHeader(fi, "")
			if err != nil {
				return err
			}
			h.Name, h.Uid, h.Gid, h.Uname, h.Gname = filepath.ToSlash(filepath.Join(name, rel)), 65532, 65532, "", ""
			if fi.IsDir() {
				h.Name += "/"
			}
			if err := tw.WriteHeader(h); err != nil || !fi.Mode().IsRegular() {
				return err
			}
			f, err := root.Open(rel)
			if err != nil {
				return err
			}
			defer func() { _ = f.Close() }() // read-only
			_, err = io.Copy(tw, f)
			return err
		})
		if err == nil {
			err = tw.Close()
		}
		_ = pw.CloseWithError(err)
	}()
	if err := sb.Put(context.Background(), "/workspace/work", pr); err != nil {
		b.Fatal(err)
	}
}

// notifyLatency is a python3 program that times each of n calls that the
// tracker hears of (a new file opened O_CREAT|O_EXCL, written and closed;
// its directory made), as the writer sees them, and prints the p50 and p99
// of the open in microseconds.
const notifyLatency = `
import os, sys, time
n = int(sys.argv[1])
os.mkdir("lat")
ts = []
for i in range(n):
    p = "lat/f%d" % i
    t0 = time.perf_counter_ns()
    fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    ts.append(time.perf_counter_ns() - t0)
    os.close(fd)
ts.sort()
print("%.1f %.1f" % (ts[len(ts)//2] / 1000, ts[len(ts)*99//100] / 1000))
`

// BenchmarkChangesNotifyLatency: what one notified call costs the writer
// in a sandbox under its CPU quota (1 CPU, then 2): the p50 and p99 of
// 5,000 opens that create a file, tracked and untracked (NoChanges) in
// the same sandbox, from python3's clock around each open. Run with
// STOCKADE_WARDEN=<an older stockade-warden> for the figures before a
// change.
//
//	go test -run '^$' -bench BenchmarkChangesNotifyLatency -benchtime 5x ./test/bench/
func BenchmarkChangesNotifyLatency(b *testing.B) {
	for _, cpus := range []float64{1, 2} {
		b.Run(fmt.Sprintf("cpus=%g", cpus), func(b *testing.B) {
			e := testkit.NewAPI(b, stockade.Options{})
			image := dockertest.DevtoolsImageID(b, e.Docker)
			pol := testkit.SmallPolicy()
			pol.CPUs = cpus
			sb, err := e.RT.CreateSandbox(context.Background(), spec.Sandbox{Image: image, Policy: pol})
			if err != nil {
				b.Fatal(err)
			}
			var p50, p99, u50, u99 []float64
			for b.Loop() {
				for _, untracked := range []bool{false, true} {
					out, errOut, res, err := testkit.RunOut(b, sb, spec.Process{Argv: []string{"sh", "-c", "rm -rf lat && python3 -c \"$0\" 5000 && rm -rf lat", notifyLatency}, NoChanges: untracked})
					var a, c float64
					if _, serr := fmt.Sscan(out, &a, &c); err != nil || serr != nil || res.ExitCode != 0 {
						b.Fatalf("%+v %v %v %q %s", res, err, serr, out, errOut)
					}
					if untracked {
						u50, u99 = append(u50, a), append(u99, c)
					} else {
						p50, p99 = append(p50, a), append(p99, c)
					}
				}
			}
			med := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
			b.ReportMetric(med(p50), "tracked-p50-µs")
			b.ReportMetric(med(p99), "tracked-p99-µs")
			b.ReportMetric(med(u50), "untracked-p50-µs")
			b.ReportMetric(med(u99), "untracked-p99-µs")
		})
	}
}
