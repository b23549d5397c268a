package dockerio

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/client"
)

// A workload's cgroup, read from the host's cgroupfs when the runtime
// shares the daemon's host (its /proc and /sys): a read is microseconds,
// where the daemon's one-shot stats wait for its collector's next tick (up
// to a second when another container was read within one). Elsewhere (a
// remote daemon, a runtime in a container of its own) the stats API
// serves.

// cgroupRoot is where the host's cgroup hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// cgroupFiles are one container's counters' files ("" where the kernel has
// none).
type cgroupFiles struct {
	cpu, cpuStat       string // v1 cpuacct.usage (ns); v2 cpu.stat (usage_usec)
	memory, peak, stat string
	pids, pidsPeak     string // pids.peak: Linux 6.1 on (v1 and v2)
	v2                 bool
}

// maxCgroupCache bounds the containers whose files are kept (a removed
// sandbox's are forgotten at its next failed read, or here).
const maxCgroupCache = 4096

// cgroups caches each container's files (found once, from its init's
// /proc/PID/cgroup); a failed read forgets them.
type cgroups struct {
	mu    sync.Mutex
	files map[string]*cgroupFiles
	// off: this runtime cannot read the host's cgroups; the stats API
	// serves every sample.
	off bool
}

// sample reads a container's cgroup from the host; ok false: not readable
// here (the caller asks the daemon).
func (g *cgroups) sample(ctx context.Context, cli *client.Client, id string) (CgroupSample, bool) {
	g.mu.Lock()
	f, off := g.files[id], g.off
	g.mu.Unlock()
	if off {
		return CgroupSample{}, false
	}
	if f == nil {
		c, err := cli.ContainerInspect(ctx, id)
		if err != nil || c.State == nil || !c.State.Running || c.State.Pid <= 0 {
			return CgroupSample{}, false
		}
		found, err := findCgroup(c.State.Pid, c.ID)
		if err == nil {
			// The pid read is still the container's init, started when
			// it was: what it named is the container's cgroup, not a
			// reused pid's.
			again, ierr := cli.ContainerInspect(ctx, id)
			if ierr != nil || again.State == nil || again.State.Pid != c.State.Pid || again.State.StartedAt != c.State.StartedAt {
				return CgroupSample{}, false
			}
		} else {
			if again, ierr := cli.ContainerInspect(ctx, id); ierr == nil && again.State != nil && again.State.Running && again.State.Pid == c.State.Pid {
				// The container runs on and its cgroup cannot be read
				// here: the host's /proc or cgroupfs is not this
				// runtime's to read (a remote daemon, a runtime in a
				// container of its own). Every sample asks the daemon.
				g.mu.Lock()
				g.off = true
				g.mu.Unlock()
			}
			return CgroupSample{}, false
		}
		f = found
		g.mu.Lock()
		if g.files == nil || len(g.files) >= maxCgroupCache {
			g.files = map[string]*cgroupFiles{} // found again as each is read
		}
		g.files[id] = f
		g.mu.Unlock()
	}
	s, err := f.read()
	if err != nil {
		g.forget(id)
		return CgroupSample{}, false
	}
	return s, true
}

func (g *cgroups) forget(id string) {
	g.mu.Lock()
	delete(g.files, id)
	g.mu.Unlock()
}

// findCgroup reads pid's cgroups and names the files of its counters. The
// paths must name the container's full id (cgroupfs' /docker/ID, systemd's
// docker-ID.scope): a pid reused by another process since the inspect is
// refused, never read.
func findCgroup(pid int, id string) (*cgroupFiles, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return nil, err
	}
	paths := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, ctrl := range strings.Split(parts[1], ",") {
			paths[ctrl] = parts[2]
		}
	}
	ok := func(p string) bool { return cgroupNamesContainer(p, id) }
	f := &cgroupFiles{}
	if p, v1 := paths["cpuacct"]; v1 {
		mem, pids := paths["memory"], paths["pids"]
		if !ok(p) || !ok(mem) {
			return nil, fmt.Errorf("pid %d's cgroups (%q, %q) are not container %s's", pid, p, mem, id)
		}
		f.cpu = filepath.Join(cgroupRoot, "cpuacct", p, "cpuacct.usage")
		f.memory = filepath.Join(cgroupRoot, "memory", mem, "memory.usage_in_bytes")
		f.peak = filepath.Join(cgroupRoot, "memory", mem, "memory.max_usage_in_bytes")
		f.stat = filepath.Join(cgroupRoot, "memory", mem, "memory.stat")
		if ok(pids) {
			f.pids = filepath.Join(cgroupRoot, "pids", pids, "pids.current")
			f.pidsPeak = filepath.Join(cgroupRoot, "pids", pids, "pids.peak")
		}
	} else if p, v2 := paths[""]; v2 && ok(p) {
		dir := filepath.Join(cgroupRoot, p)
		f.v2 = true
		f.cpuStat = filepath.Join(dir, "cpu.stat")
		f.memory = filepath.Join(dir, "memory.current")
		f.peak = filepath.Join(dir, "memory.peak")
		f.stat = filepath.Join(dir, "memory.stat")
		f.pids = filepath.Join(dir, "pids.current")
		f.pidsPeak = filepath.Join(dir, "pids.peak")
	} else {
		return nil, fmt.Errorf("pid %d has no cgroup of container %s", pid, id)
	}
	if _, err := f.read(); err != nil {
		return nil, err
	}
	return f, nil
}

// read takes one sample.
func (f *cgroupFiles) read() (CgroupSample, error) {
	s := CgroupSample{At: time.Now()}
	if f.v2 {
		usec, err := statField(f.cpuStat, "usage_usec")
		if err != nil {
			return s, err
		}
		s.CPU = time.Duration(usec) * time.Microsecond
	} else {
		ns, err := readInt(f.cpu)
		if err != nil {
			return s, err
		}
		s.CPU = time.Duration(ns)
	}
	mem, err := readInt(f.memory)
	if err != nil {
		return s, err
	}
	key := "total_inactive_file" // v1's name; v2's has no prefix
	if f.v2 {
		key = "inactive_file"
	}
	inactive, err := statField(f.stat, key)
	if err != nil {
		return s, err
	}
	s.Memory = max(mem-inactive, 0)
	if peak, err := readInt(f.peak); err == nil { // absent on v2 before Linux 5.19
		s.MemoryPeak = peak
	}
	if f.pids != "" {
		if n, err := readInt(f.pids); err == nil {
			s.Pids = n
		}
		if n, err := readInt(f.pidsPeak); err == nil {
			s.PidsPeak = n
		}
	}
	return s, nil
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s holds %q", path, bytes.TrimSpace(b))
	}
	return n, nil
}

// statField reads one "key value" line of a stat file.
func statField(path, key string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil || n < 0 {
				return 0, fmt.Errorf("%s: %s is %q", path, key, v)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("%s has no %s", path, key)
}

// cgroupNamesContainer reports whether a cgroup path is the container's:
// named for its full id, cgroupfs' .../docker/ID (or a --cgroup-parent's
// .../ID), systemd's .../docker-ID.scope; absolute and clean.
func cgroupNamesContainer(p, id string) bool {
	base := filepath.Base(p)
	return strings.HasPrefix(p, "/") && !strings.Contains(p, "..") && filepath.Clean(p) == p && (base == id || base == "docker-"+id+".scope")
}
