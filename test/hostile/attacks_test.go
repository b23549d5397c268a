package hostile

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/volume"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
	"github.com/stockade/stockade/warden/wire"
)

// TestHostileResources: a workload that exhausts what its sandbox is given
// (tasks, memory, /tmp, the workspace, output, time) is stopped by its own
// limits, journaled with the right reason, its sandbox still answers, and
// the bystander is untouched.
func TestHostileResources(t *testing.T) {
	h := newHostile(t)

	// The sandbox's pids cgroup (64 tasks, testkit.SmallPolicy) bounds a fork
	// bomb: forks fail with EAGAIN (the shell's "can't fork"), and the
	// cgroup counts each refusal in pids.events. A classic bomb dies out
	// by itself (each member exits once its forks are refused): exited
	// (it is stopped, signaled, should it still run a minute after its
	// first refused fork). A flood of long sleepers fills the table, its
	// shell exits at the first refused fork, and the sleepers hold the
	// process's output open: it is stopped at once, and Stop kills the
	// group: signaled. Observed: the result then reads signaled with the
	// shell's own exit code (2), since the shell had exited before the
	// Stop and only the group's sleepers were killed.
	t.Run("fork bomb", func(t *testing.T) {
		for _, tc := range []struct {
			name, script string
			// grace: how long the bomb may run on after its first refused
			// fork before it is stopped.
			grace time.Duration
		}{
			{"classic", "bomb() { bomb | bomb & }; bomb; wait", time.Minute},
			{"sleepers until refused", "while :; do sleep 1000 & done", 0},
		} {
			t.Run(tc.name, func(t *testing.T) {
				h.attack(t, testkit.SmallPolicy(), func(ctx context.Context, sb host.Sandbox) {
					refused := func() int { return pidsRefused(t, ctx, sb) }
					before := refused()
					if r := shIn(ctx, sb, "cat /sys/fs/cgroup/pids/pids.max"); string(r.stdout) != "64\n" {
						t.Fatalf("pids.max %q, want the policy's 64", r.stdout)
					}
					p, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", tc.script}})
					if err != nil {
						t.Fatal(err)
					}
					// Both streams are read to their end throughout (an
					// unread stderr would block the bomb, not end it).
					firstRefusal := make(chan struct{})
					errc, outc := make(chan []byte, 1), make(chan []byte, 1)
					go func() {
						var all bytes.Buffer
						br := bufio.NewReader(p.Stderr())
						seen := false
						for {
							line, err := br.ReadBytes('\n')
							all.Write(line)
							if !seen && bytes.Contains(line, []byte("can't fork")) {
								seen = true
								close(firstRefusal)
							}
							if err != nil {
								break
							}
						}
						if !seen {
							close(firstRefusal)
						}
						errc <- all.Bytes()
					}()
					go func() { b, _ := io.ReadAll(p.Stdout()); outc <- b }()
					<-firstRefusal
					stopped := false
					select {
					case <-p.Done():
					case <-time.After(tc.grace):
						stopped = true
						if err := p.Stop(ctx); err != nil {
							t.Errorf("stop: %v", err)
						}
					}
					res, err := p.Wait(ctx)
					r := ran{id: p.ID(), stdout: <-outc, stderr: <-errc, res: res, err: err}
					if !bytes.Contains(r.stderr, []byte("can't fork")) {
						t.Errorf("stderr %q does not show a refused fork", clip(r.stderr))
					}
					want := lifecycle.ReasonExited
					if stopped {
						want = lifecycle.ReasonSignaled
					}
					h.wantEnd(t, ctx, sb, "the bomb", r, want, anyCode)
					t.Logf("the bomb (stopped: %v) ended %+v", stopped, res)
					if after := refused(); after <= before {
						t.Errorf("pids.events max %d before, %d after: the pids limit was never hit", before, after)
					}
					// Nothing of it is left, and the sandbox answers.
					okOut(t, "after the bomb", shIn(ctx, sb, "ps -o args | grep -c '^sleep 1000' || true"), "0\n")
					okOut(t, "after the bomb", shIn(ctx, sb, "echo alive"), "alive\n")
					if types := h.sandboxTypesOf(t, ctx, sb.ID()); testkit.Count(types, "sandbox.warden_lost") != 0 {
						t.Errorf("the bomb cost the warden: %v", types)
					}
				})
			})
		}
	})

	// The sandbox's memory cgroup (128 MiB, no swap): the kernel's OOM
	// killer ends the hog, and the runtime names it (reason oom, 137).
	t.Run("memory hog", func(t *testing.T) {
		for _, tc := range []struct{ name, script string }{
			{"a shell string doubling", "x=0123456789abcdef; while :; do x=$x$x; done"},
			{"one 256 MiB buffer", "exec dd if=/dev/zero of=/dev/null bs=256M count=1"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				h.attack(t, testkit.SmallPolicy(), func(ctx context.Context, sb host.Sandbox) {
					r := shIn(ctx, sb, tc.script)
					h.wantEnd(t, ctx, sb, tc.name, r, lifecycle.ReasonOOM, 137)
					okOut(t, "after the hog", shIn(ctx, sb, "echo alive"), "alive\n")
				})
			})
		}
	})

	// /tmp is a tmpfs of TmpBytes: filling it is ENOSPC for the writer,
	// and nothing else: /home/sandbox and the workspace still take
	// writes, a new process (spawned while /tmp is still full) runs, and
	// /tmp works again once the file is removed.
	t.Run("tmpfs fill", func(t *testing.T) {
		pol := testkit.SmallPolicy()
		pol.TmpBytes = 8 << 20
		h.attack(t, pol, func(ctx context.Context, sb host.Sandbox) {
			r := shIn(ctx, sb, "dd if=/dev/zero of=/tmp/fill bs=1M count=64")
			h.wantEnd(t, ctx, sb, "dd into /tmp", r, lifecycle.ReasonExited, 1)
			if !bytes.Contains(r.stderr, []byte("No space left on device")) {
				t.Errorf("dd's stderr %q, want ENOSPC", r.stderr)
			}
			r = shIn(ctx, sb, "echo more > /tmp/more")
			if r.res.ExitCode == 0 || !bytes.Contains(r.stderr, []byte("No space left on device")) {
				t.Errorf("a second write into the full /tmp: %+v %q, want ENOSPC", r.res, r.stderr)
			}
			okOut(t, "other paths while /tmp is full", shIn(ctx, sb,
				"echo h > /home/sandbox/f && cat /home/sandbox/f && echo w > /workspace/work/f && cat /workspace/work/f && df -k /tmp | tail -1 | awk '{print $2}'"),
				"h\nw\n8192\n")
			okOut(t, "a new process while /tmp is full", run(ctx, sb, spec.Process{Argv: []string{"echo", "ok"}}), "ok\n")
			okOut(t, "/tmp after the removal", shIn(ctx, sb, "rm /tmp/fill && echo again > /tmp/again && cat /tmp/again"), "again\n")
		})
	})

	// What bounds a disk fill of /workspace: /workspace is the sandbox's
	// own Docker volume, made with the local driver and no options, which
	// is a plain directory under the daemon's root
	// (/var/lib/docker/volumes/<name>/_data) on whatever filesystem holds
	// it. Nothing stockade sets bounds it: the memory, pids and tmpfs
	// limits do not apply to it, no volume option asks for a quota, and a
	// storage driver's size option (overlay2 on xfs with pquota) would
	// bound only the container's writable layer, which the read-only root
	// leaves unused. Only the host filesystem's free space bounds it. On
	// this machine the storage driver is fuse-overlayfs (not overlay2) and
	// the volumes sit on the host's own ext4 disk (/dev/vda, also /): a
	// workload can fill the host's disk through /workspace. UNBOUNDED here.
	// The test writes only 64 MiB (it must never fill the host's disk),
	// shows the write is not refused and that the volume is a directory of
	// the host's filesystem (same size inside and on the host).
	// `stockade doctor` says so in its workspace.disk check (unbounded, the
	// file system of the daemon's volumes and its free space) and names
	// the storage driver in datasets.image-store.
	t.Run("workspace fill", func(t *testing.T) {
		h.attack(t, testkit.SmallPolicy(), func(ctx context.Context, sb host.Sandbox) {
			r := shIn(ctx, sb, "dd if=/dev/zero of=/workspace/work/fill bs=1M count=64 2>/dev/null && sync && du -k /workspace/work/fill | cut -f1 && stat -f -c '%b %S' /workspace")
			var kib, blocks, bsize uint64
			h.wantEnd(t, ctx, sb, "64 MiB into /workspace", r, lifecycle.ReasonExited, 0)
			// du counts the file's blocks: 64 MiB of data, plus what the
			// file system spends on mapping them (an extent block or two).
			if _, err := fmt.Sscanf(string(r.stdout), "%d\n%d %d\n", &kib, &blocks, &bsize); err != nil || r.res.ExitCode != 0 || kib < 65536 || kib > 65536+64 {
				t.Fatalf("64 MiB into /workspace: %q %q %+v (%v), want them written (nothing bounds the workspace here)", r.stdout, r.stderr, r.res, err)
			}
			vol := workspaceVolume(t, ctx, h, sb)
			t.Logf("the workspace: a filesystem of %d blocks of %d bytes as the sandbox sees it; its volume: driver %s, options %v, at %s", blocks, bsize, vol.Driver, vol.Options, vol.Mountpoint)
			if vol.Driver != "local" || len(vol.Options) != 0 {
				t.Errorf("workspace volume driver %s options %v: the comment above no longer describes what bounds it", vol.Driver, vol.Options)
			}
			// The volume is a directory of the host's filesystem: the same
			// size seen from the host (where the daemon is local).
			var fs syscall.Statfs_t
			if err := syscall.Statfs(vol.Mountpoint, &fs); err != nil {
				if os.Getenv("DOCKER_HOST") == "" || strings.HasPrefix(os.Getenv("DOCKER_HOST"), "unix://") {
					t.Errorf("statfs of the volume on this host (the daemon is local): %v", err)
				} else {
					t.Logf("statfs of the volume: %v (a remote daemon): not compared", err)
				}
			} else if fs.Blocks*uint64(fs.Bsize) != blocks*bsize {
				t.Errorf("the workspace is %d bytes inside, its volume's filesystem %d bytes on the host: not the host's disk?", blocks*bsize, fs.Blocks*uint64(fs.Bsize))
			}
			okOut(t, "removing the fill", shIn(ctx, sb, "rm /workspace/work/fill && echo gone"), "gone\n")

			rep, err := h.c.Doctor(ctx)
			if err != nil {
				t.Fatalf("doctor: %v", err)
			}
			doc, err := json.Marshal(rep)
			if err != nil {
				t.Fatal(err)
			}
			info, err := h.docker.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(doc, []byte(info.Driver)) {
				t.Errorf("doctor does not name the storage driver %q:\n%s", info.Driver, doc)
			}
			// Doctor says what bounds the workspace: nothing per sandbox,
			// the file system under the daemon's root.
			bound := "unbounded: a local volume under " + info.DockerRootDir + "/volumes"
			if !bytes.Contains(doc, []byte(bound)) {
				t.Errorf("doctor does not say %q:\n%s", bound, doc)
			}
			// The CLI's doctor prints the same checks.
			if code, out, errOut := h.cli.Run(t, "", "doctor"); code != 0 || !strings.Contains(out, "workspace.disk") || !strings.Contains(out, bound) || !strings.Contains(out, info.Driver) {
				t.Errorf("stockade doctor: exit %d, does not say %q in workspace.disk, or name the storage driver %q:\n%s%s", code, bound, info.Driver, out, errOut)
			}
		})
	})

	// The output quota (spec.Process.OutputQuota, stdout and stderr
	// together) stops a flood: output_limit, within the quota, whichever
	// stream floods and whether or not the host reads it.
	t.Run("output flood", func(t *testing.T) {
		h.attack(t, testkit.SmallPolicy(), func(ctx context.Context, sb host.Sandbox) {
			for _, tc := range []struct {
				name string
				p    spec.Process
			}{
				{"stdout", spec.Process{Argv: []string{"yes"}}},
				{"stderr", spec.Process{Argv: []string{"sh", "-c", "yes >&2"}}},
				{"both, discarded", spec.Process{Argv: []string{"sh", "-c", "yes & yes >&2"}, Stdout: spec.Discard, Stderr: spec.Discard}},
			} {
				const quota = 1 << 20
				tc.p.OutputQuota = quota
				r := run(ctx, sb, tc.p)
				h.wantEnd(t, ctx, sb, "flood on "+tc.name, r, lifecycle.ReasonOutputLimit, anyCode)
				if !spec.IsCode(r.err, spec.CodeOutputLimit) || r.res.StdoutBytes+r.res.StderrBytes > quota || int64(len(r.stdout)+len(r.stderr)) > quota {
					t.Errorf("flood on %s: %d+%d bytes (%d+%d read), %v; want output_limit within %d", tc.name, r.res.StdoutBytes, r.res.StderrBytes, len(r.stdout), len(r.stderr), r.err, quota)
				}
			}
			okOut(t, "after the floods", shIn(ctx, sb, "ps -o args | grep -c '^yes' || true"), "0\n")
		})
	})

	// A process past its timeout is stopped (TERM to its group, KILL
	// after the server's stop grace when TERM is ignored): reason
	// timeout, error timeout.
	t.Run("past its timeout", func(t *testing.T) {
		h.attack(t, testkit.SmallPolicy(), func(ctx context.Context, sb host.Sandbox) {
			for _, tc := range []struct {
				name string
				argv []string
				code int
			}{
				{"sleeping", []string{"sleep", "300"}, 128 + int(syscall.SIGTERM)},
				{"spinning with TERM ignored", []string{"sh", "-c", "trap '' TERM; while :; do :; done"}, 128 + int(syscall.SIGKILL)},
			} {
				r := run(ctx, sb, spec.Process{Argv: tc.argv, Timeout: 2 * time.Second})
				h.wantEnd(t, ctx, sb, tc.name, r, lifecycle.ReasonTimeout, tc.code)
				if !errors.Is(r.err, spec.ErrTimeout) {
					t.Errorf("%s: %v, want a timeout error", tc.name, r.err)
				}
			}
			okOut(t, "after the timeouts", shIn(ctx, sb, "echo alive"), "alive\n")
		})
	})
}

// workspaceVolume returns the docker volume mounted at the sandbox's
// /workspace.
func workspaceVolume(t *testing.T, ctx context.Context, h *hostileEnv, sb host.Sandbox) volume.Volume {
	t.Helper()
	c, err := h.docker.ContainerInspect(ctx, workload(t, ctx, sb))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range c.Mounts {
		if m.Destination == "/workspace" {
			v, err := h.docker.VolumeInspect(ctx, m.Name)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("no volume at /workspace: %+v", c.Mounts)
	return volume.Volume{}
}

// TestHostileStreams: a workload that misuses its streams (never reads
// stdin, closes stdout and goes on, writes bytes that are not text) costs
// only itself, and what it wrote reaches the host and the recording
// unchanged.
func TestHostileStreams(t *testing.T) {
	h := newHostile(t)

	// The host writes 8 MiB to a process that never reads its stdin:
	// the child's pipe, the warden's stdin window, the server's and the
	// client's gRPC windows fill, and the host's Write blocks (stdin's
	// backpressure: nothing buffers 8 MiB). The process's timeout stops
	// it, and the blocked Write then returns an error: nothing hangs.
	t.Run("stdin never read", func(t *testing.T) {
		h.attack(t, testkit.SmallPolicy(), func(ctx context.Context, sb host.Sandbox) {
			p, err := sb.Start(ctx, spec.Process{Argv: []string{"sleep", "300"}, Stdin: true, Timeout: 3 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			const total = 8 << 20
			type wrote struct {
				n   int
				err error
			}
			wc := make(chan wrote, 1)
			go func() {
				n, err := p.Stdin().Write(make([]byte, total))
				wc <- wrote{n, err}
			}()
			r := finish(ctx, p)
			h.wantEnd(t, ctx, sb, "the process that never read its stdin", r, lifecycle.ReasonTimeout, 128+int(syscall.SIGTERM))
			select {
			case w := <-wc:
				if w.n >= total || w.err == nil {
					t.Errorf("the host wrote %d of %d bytes (%v) into a stdin nobody read: want a write that blocked, then failed", w.n, total, w.err)
				}
				t.Logf("the host's write ended after %d bytes: %v", w.n, w.err)
			case <-time.After(time.Minute):
				t.Fatal("the host's stdin write still blocks a minute after its process ended")
			}
			okOut(t, "after it", shIn(ctx, sb, "echo alive"), "alive\n")
		})
	})

	// A process that closes its stdout and stderr and goes on running.
	// Inside, its output descriptors are gone while it runs; the host's
	// stream holds what it wrote, and ends once the process does: neither
	// the warden's protocol nor the server's exec stream carries the end
	// of one stream (the warden's exited report comes once the child is
	// reaped and both pipes are closed). The process is still stopped by
	// Stop (TERM to its group): signaled, 143.
	t.Run("stdout closed early", func(t *testing.T) {
		h.attack(t, testkit.SmallPolicy(), func(ctx context.Context, sb host.Sandbox) {
			p, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", "echo bye; exec >&- 2>&-; sleep 301"}})
			if err != nil {
				t.Fatal(err)
			}
			outc := make(chan []byte, 1)
			go func() { b, _ := io.ReadAll(p.Stdout()); outc <- b }()
			go func() { _, _ = io.Copy(io.Discard, p.Stderr()) }()
			// From inside: the shell runs on with no fd 1 or 2.
			pid := h.startedPID(t, ctx, sb.ID(), p.ID())
			var fds string
			testutil.Eventually(t, "the shell to close its output", func() bool {
				r := shIn(ctx, sb, fmt.Sprintf("ls /proc/%d/fd | tr '\\n' ' '", pid))
				fds = string(r.stdout)
				return r.res.ExitCode == 0 && fds != "" && !strings.Contains(" "+fds, " 1 ") && !strings.Contains(" "+fds, " 2 ")
			})
			select {
			case <-p.Done():
				t.Fatal("the process ended when it closed its output")
			case b := <-outc:
				t.Logf("its stdout ended before the process did: %q", b)
				outc <- b
			default:
				t.Logf("its stdout has not ended while the process runs (open fds inside: %s)", fds)
			}
			if err := p.Stop(ctx); err != nil {
				t.Fatalf("stop: %v", err)
			}
			res, err := p.Wait(ctx)
			out := <-outc
			r := ran{id: p.ID(), stdout: out, res: res, err: err}
			h.wantEnd(t, ctx, sb, "the process that closed its output", r, lifecycle.ReasonSignaled, 128+int(syscall.SIGTERM))
			if string(out) != "bye\n" || res.StdoutBytes != 4 {
				t.Errorf("its stdout %q (%d bytes counted), want \"bye\\n\"", out, res.StdoutBytes)
			}
		})
	})

	// Every byte value, invalid UTF-8 (a lone continuation byte, an
	// overlong NUL, a UTF-16 surrogate, a truncated sequence, 0xfe/0xff),
	// terminal escapes and random bytes, on stdout and stderr: the host
	// reads them unchanged, the result counts them, and the recording
	// (through the server's Logs and `stockade logs`) holds them exactly.
	t.Run("binary garbage", func(t *testing.T) {
		h.attack(t, testkit.SmallPolicy(), func(ctx context.Context, sb host.Sandbox) {
			var blob bytes.Buffer
			for i := range 256 {
				blob.WriteByte(byte(i))
			}
			blob.Write([]byte("\x80 \xc0\x80 \xed\xa0\x80 \xe2\x82 \xfe\xff \x1b[2J\x1b]0;title\x07 \r\x00\n"))
			rnd := make([]byte, 256<<10)
			if _, err := rand.Read(rnd); err != nil {
				t.Fatal(err)
			}
			blob.Write(rnd)
			want := blob.Bytes()
			putFile(t, ctx, sb, "garbage", want, 0o644)
			r := run(ctx, sb, spec.Process{Argv: []string{"sh", "-c", "cat garbage; cat garbage >&2"}, Record: spec.Record{Head: 8 << 20}})
			h.wantEnd(t, ctx, sb, "cat of garbage", r, lifecycle.ReasonExited, 0)
			if !bytes.Equal(r.stdout, want) || !bytes.Equal(r.stderr, want) {
				t.Errorf("stdout %d bytes (first difference at %d), stderr %d bytes (at %d); want the %d bytes written", len(r.stdout), testkit.FirstDiff(string(r.stdout), string(want)), len(r.stderr), testkit.FirstDiff(string(r.stderr), string(want)), len(want))
			}
			if r.res.StdoutBytes != int64(len(want)) || r.res.StderrBytes != int64(len(want)) {
				t.Errorf("counted %d/%d bytes, want %d each", r.res.StdoutBytes, r.res.StderrBytes, len(want))
			}
			var recOut, recErr bytes.Buffer
			sum, err := h.c.Logs(ctx, r.id, func(c host.OutputChunk) error {
				switch c.Stream {
				case "stdout":
					recOut.Write(c.Data)
				case "stderr":
					recErr.Write(c.Data)
				default:
					return fmt.Errorf("a gap of %d bytes at %d", c.Gap, c.Offset)
				}
				return nil
			})
			if err != nil || !bytes.Equal(recOut.Bytes(), want) || !bytes.Equal(recErr.Bytes(), want) || !sum.Complete {
				t.Errorf("the recording: %d/%d bytes (%v), summary %+v; want both streams exactly, complete", recOut.Len(), recErr.Len(), err, sum)
			}
			code, cliOut, cliErr := h.cli.Run(t, "", "logs", "--stdout", r.id)
			if code != 0 || cliOut != string(want) {
				t.Errorf("stockade logs --stdout: exit %d, %d bytes (first difference at %d), %s; want the %d bytes", code, len(cliOut), testkit.FirstDiff(cliOut, string(want)), cliErr, len(want))
			}
		})
	})
}

// TestHostileProcessEscape: children that outlive their parent, and a
// descendant that leaves its process group with setsid.
//
// What Stop of one process reaches: the warden spawned the process as the
// leader of its own group (pgid = its pid); Stop sends SIGTERM, then
// SIGKILL after the stop grace, to that group (kill(-pgid) inside the
// sandbox, by the warden). It reaches the leader and every descendant
// still in the group (a non-interactive shell gives its background jobs no
// group of their own), even after the leader exited, as long as the
// process has not ended (a descendant holds its output open). It does not
// reach a descendant that moved to another group or session (setsid,
// setpgid): that one lives on until the sandbox stops. Once the process
// has ended (its leader reaped, its output closed), Stop has nothing to
// reach: its orphans in the old group live on too. Stop of the sandbox
// stops the workload container: its init dies and with it every process
// of its PID namespace.
func TestHostileProcessEscape(t *testing.T) {
	h := newHostile(t)
	h.attack(t, testkit.SmallPolicy(), func(ctx context.Context, sb host.Sandbox) {
		id := workload(t, ctx, sb)
		alive := func(args string) bool {
			r := shIn(ctx, sb, fmt.Sprintf("ps -o args | grep -c '^%s$' || true", args))
			return string(r.stdout) != "0\n"
		}
		// The leader runs: Stop reaches its group, not the setsid escape.
		p, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", "sleep 1001 & setsid sleep 1002 >/dev/null 2>&1 </dev/null & echo ready; wait"}, Stderr: spec.Discard})
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(p.Stdout())
		if line, err := br.ReadString('\n'); line != "ready\n" {
			t.Fatalf("first line %q %v", line, err)
		}
		testutil.Eventually(t, "both children", func() bool { return alive("sleep 1001") && alive("sleep 1002") })
		r := shIn(ctx, sb, "ps -o pid,pgid,sid,args | grep '[s]leep 100[12]'")
		t.Logf("before the process's Stop:\n%s", r.stdout)
		if err := p.Stop(ctx); err != nil {
			t.Fatalf("stop: %v", err)
		}
		_, _ = io.Copy(io.Discard, br)
		res, err := p.Wait(ctx)
		h.wantEnd(t, ctx, sb, "the stopped parent", ran{id: p.ID(), stdout: []byte("ready\n"), res: res, err: err}, lifecycle.ReasonSignaled, 128+int(syscall.SIGTERM))
		if alive("sleep 1001") {
			t.Error("a child in the process's group survived its Stop")
		}
		if !alive("sleep 1002") {
			t.Error("the setsid child did not survive its parent's Stop: the README says a signal to the group does not reach it")
		}

		// The leader exits at once: its orphans (one in its group, one in
		// a session of its own) live on; the process has ended.
		r = shIn(ctx, sb, "(sleep 1003 >/dev/null 2>&1 </dev/null &); setsid sleep 1004 >/dev/null 2>&1 </dev/null & echo bye")
		h.wantEnd(t, ctx, sb, "the parent that left orphans", r, lifecycle.ReasonExited, 0)
		testutil.Eventually(t, "the orphans", func() bool { return alive("sleep 1003") && alive("sleep 1004") })

		top, err := h.docker.ContainerTop(ctx, id, nil)
		if err != nil {
			t.Fatal(err)
		}
		var procs []string
		for _, p := range top.Processes {
			procs = append(procs, strings.Join(p, " "))
		}
		all := strings.Join(procs, "\n")
		if !has(all, "sleep 1002", "sleep 1003", "sleep 1004") {
			t.Fatalf("docker top before the sandbox's Stop:\n%s\nwant the three escapes", all)
		}
		if err := sb.Stop(ctx); err != nil {
			t.Fatalf("sandbox stop: %v", err)
		}
		c, err := h.docker.ContainerInspect(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if c.State.Running || c.State.Pid != 0 {
			t.Errorf("after the sandbox's Stop the workload is %+v, want stopped", c.State)
		}
		if top, err := h.docker.ContainerTop(ctx, id, nil); err == nil {
			t.Errorf("docker top after the sandbox's Stop answers %v, want an error (not running)", top.Processes)
		}
		if types := h.sandboxTypesOf(t, ctx, sb.ID()); testkit.Count(types, "sandbox.exited") != 1 {
			t.Errorf("sandbox history %v, want it exited", types)
		}
	})
}

// wardenPID is sh that sets $w to the pid of the sandbox's warden, read
// from its socket's name (/tmp/.stockade-warden-<pid>.sock).
const wardenPID = `w=$(ls /tmp/.stockade-warden-*.sock) && w=${w##*-} && w=${w%.sock} && `

// TestHostilePrivileges: the workload tries to write where it may not, to
// become someone else, to gain capabilities or namespaces, to reach the
// kernel's keyring, its warden's memory or the Docker socket. Each attempt
// fails with the kernel's refusal (journaled as the command's own exit),
// and nothing changes for the sandbox or the bystander. ptrace, keyctl
// and setuid(0) have no busybox applet: a static probe the test builds is
// put into the workspace and run, as a workload could bring its own.
func TestHostilePrivileges(t *testing.T) {
	h := newHostile(t)
	probe := buildProbe(t)
	const erofs, eacces, eperm = "Read-only file system", "Permission denied", "Operation not permitted"
	rows := []struct {
		name, script string
		// ok: exit 0 with stdout out; otherwise a non-zero exit whose
		// stdout or stderr says one of says's |-separated texts.
		ok   bool
		out  string
		says string
	}{
		// Writes to read-only paths: the root filesystem, the kernel's.
		{name: "write /", script: "echo x > /pwned", says: erofs},
		{name: "write /etc", script: "echo x > /etc/pwned", says: erofs},
		// A root-owned file on the read-only root: which refusal comes
		// first (EROFS or EACCES) is the filesystem's (fuse-overlayfs
		// here answers EACCES to an append).
		{name: "append to /etc/passwd", script: "echo 'r00t::0:0::/:/bin/sh' >> /etc/passwd", says: erofs + "|" + eacces},
		{name: "truncate /etc/passwd", script: "echo > /etc/passwd", says: erofs + "|" + eacces},
		{name: "make /usr", script: "mkdir -p /usr/local/bin", says: erofs},
		{name: "remove /bin/sh", script: "rm /bin/sh", says: erofs},
		{name: "setuid bit on busybox", script: "chmod u+s /bin/busybox", says: erofs},
		{name: "write /proc/sys", script: "echo 1 > /proc/sys/kernel/ns_last_pid", says: erofs},
		{name: "write a cgroup limit", script: "echo max > /sys/fs/cgroup/pids/pids.max", says: erofs},
		{name: "sysctl", script: "sysctl -w kernel.hostname=pwned", says: erofs},
		// Docker's bind-mounted /etc/hosts is root's; /workspace is root's.
		{name: "append to /etc/hosts", script: "echo '6.6.6.6 evil' >> /etc/hosts", says: eacces},
		{name: "write /workspace itself", script: "echo x > /workspace/pwned", says: eacces},
		{name: "replace the warden", script: "cp /bin/busybox /workspace/.stockade/stockade-warden", says: eacces},
		// The tmpfs mounts are noexec.
		{name: "exec from /tmp", script: "cp /bin/busybox /tmp/bb && /tmp/bb true", says: eacces},
		{name: "exec from /home/sandbox", script: "cp /bin/busybox /home/sandbox/bb && /home/sandbox/bb true", says: eacces},
		// Who it is and what it may.
		{name: "ids", script: "id -u; id -g; id -G", ok: true, out: "65532\n65532\n65532\n"},
		{name: "capabilities and no-new-privileges", script: "grep -E '^(Cap[A-Za-z]+|NoNewPrivs|Seccomp):' /proc/self/status", ok: true,
			out: "CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\n"},
		{name: "no setuid or setgid file", script: `find / \( -path /proc -o -path /sys \) -prune -o -type f \( -perm -4000 -o -perm -2000 \) -print`, ok: true, out: ""},
		{name: "su root", script: "su -c 'id -u' root </dev/null", says: "must be suid"},
		{name: "setuid(0)", script: "./probe setuid", says: "operation not permitted"},
		{name: "chroot", script: "chroot / true", says: eperm},
		{name: "mknod", script: "mknod /tmp/mem c 1 1", says: eperm},
		// init runs as the sandbox's user too (TestHostileWarden kills it).
		{name: "init is the sandbox user's", script: "kill -0 1 && echo init-is-ours", ok: true, out: "init-is-ours\n"},
		// Namespaces, mounts and the kernel.
		{name: "mount a tmpfs", script: "mkdir -p /tmp/m && mount -t tmpfs none /tmp/m", says: "permission denied"},
		{name: "unshare a user namespace", script: "unshare -U -r id -u", says: eperm},
		{name: "unshare a mount namespace", script: "unshare -m true", says: eperm},
		{name: "unshare a network namespace", script: "unshare -n true", says: eperm},
		{name: "nsenter init's namespaces", script: "nsenter -t 1 -m -n true", says: eperm},
		{name: "read the kernel log", script: "dmesg", says: eperm},
		{name: "add a network interface", script: "ip link add d0 type dummy", says: eperm},
		{name: "keyctl add_key", script: "./probe keyctl", says: "operation not permitted"},
		// The warden (same uid) is non-dumpable.
		{name: "ptrace the warden", script: wardenPID + "./probe ptrace $w", says: "operation not permitted"},
		{name: "the warden's fds", script: wardenPID + "ls /proc/$w/fd", says: eacces},
		{name: "the warden's memory", script: wardenPID + "head -c 1 /proc/$w/mem", says: eacces},
		// The Docker socket is nowhere.
		{name: "the docker socket", script: "ls /var/run/docker.sock /run/docker.sock", says: "No such file or directory"},
		{name: "no docker socket mounted", script: "grep -c docker.sock /proc/mounts", says: "0"},
	}
	h.attack(t, testkit.SmallPolicy(), func(ctx context.Context, sb host.Sandbox) {
		putFile(t, ctx, sb, "probe", probe, 0o755)
		for _, row := range rows {
			t.Run(row.name, func(t *testing.T) {
				r := shIn(ctx, sb, row.script)
				if r.id == "" {
					t.Fatalf("did not start: %v", r.err)
				}
				h.wantEnd(t, ctx, sb, row.name, r, lifecycle.ReasonExited, anyCode)
				all := string(r.stdout) + string(r.stderr)
				switch {
				case row.ok && (r.res.ExitCode != 0 || string(r.stdout) != row.out):
					t.Errorf("%s: exit %d, stdout %q, stderr %q; want 0 and %q", row.script, r.res.ExitCode, r.stdout, r.stderr, row.out)
				case !row.ok && (r.res.ExitCode == 0 || !slices.ContainsFunc(strings.Split(row.says, "|"), func(s string) bool { return strings.Contains(all, s) })):
					t.Errorf("%s: exit %d, stdout %q, stderr %q; want a failure saying %q", row.script, r.res.ExitCode, r.stdout, r.stderr, row.says)
				}
			})
		}
		// Only the warden's socket is a socket in the sandbox.
		r := shIn(ctx, sb, `find / \( -path /proc -o -path /sys \) -prune -o -type s -print`)
		if lines := strings.Split(strings.TrimSpace(string(r.stdout)), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "/tmp/.stockade-warden-") {
			t.Errorf("sockets in the sandbox: %q, want the warden's alone", r.stdout)
		}
		// ptrace of a process of its own (same uid, dumpable) is the
		// kernel's ordinary rule inside one sandbox: no boundary crossed.
		r = shIn(ctx, sb, "sleep 30 & ./probe ptrace $!; kill $!")
		t.Logf("ptrace of its own sleep: %q %q", r.stdout, r.stderr)
		// The sandbox is as it was: the probe's attempts changed nothing.
		okOut(t, "after the attempts", shIn(ctx, sb, "id -u; test -e /tmp/m/x || grep -c ' /tmp/m ' /proc/mounts || true"), "65532\n0\n")
		if types := h.sandboxTypesOf(t, ctx, sb.ID()); testkit.Count(types, "sandbox.warden_lost") != 0 {
			t.Errorf("the attempts cost the warden: %v", types)
		}
	})
}

// TestHostileNetwork: a workload reaching out where its network kind
// forbids. The "outside" is the host, at the default bridge's gateway: a
// TCP server, a UDP port, and (where the port is free) UDP 53 for DNS.
// Each probe is first shown to work from a sandbox with an open network
// (so a probe that cannot leak at all proves nothing); then, from an
// isolated sandbox (no interface but loopback) and from an allowlist
// sandbox (only its egress proxy is reachable, and the proxy admits only
// the rule's address and port), raw TCP, UDP, DNS and the metadata
// address reach nothing.
//
// busybox nc has no -u (it prints its usage and exits 1): UDP is sent with
// tftp (a read request to any host and port), DNS with nslookup.
func TestHostileNetwork(t *testing.T) {
	h := newHostile(t)
	gw := testkit.BridgeGateway(t, h.docker)
	outside := testkit.StartOutside(t)
	target := fmt.Sprintf("%s:%d", gw, outside.Port)
	udp, err := listenUDP(t, "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	dns, err := listenUDP(t, "0.0.0.0:53")
	if err != nil {
		// Without it a DNS query that leaked would go unseen.
		if os.Getenv("CI") == "true" {
			t.Fatalf("UDP port 53 of the host cannot be ours (%v): the DNS leak probes would observe nothing", err)
		}
		t.Logf("UDP port 53 of the host is not ours (%v): DNS leaks are not observed in this run", err)
		dns = nil
	}
	if b, err := os.ReadFile("/etc/resolv.conf"); err == nil {
		t.Logf("the host's resolv.conf (the daemon's upstream, where the daemon is local):\n%s", b)
	}
	tcpTo := func(addr string, port int) string {
		return fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 3 %s %d`, addr, port)
	}
	udpProbe := fmt.Sprintf("timeout 3 tftp -g -r leak -l /tmp/leak %s %d", gw, udp.port)
	dnsProbe := fmt.Sprintf("timeout 3 nslookup leak.example %s", gw)
	type counts struct{ tcp, udp, dns int64 }
	now := func() counts {
		c := counts{tcp: outside.Hits.Load(), udp: udp.n.Load()}
		if dns != nil {
			c.dns = dns.n.Load()
		}
		return c
	}

	t.Run("control: an open sandbox reaches the host", func(t *testing.T) {
		pol := testkit.SmallPolicy()
		pol.Network = spec.NetworkOpen
		h.attack(t, pol, func(ctx context.Context, sb host.Sandbox) {
			if r := shIn(ctx, sb, tcpTo(gw, outside.Port)); !bytes.Contains(r.stdout, []byte("hello")) {
				t.Fatalf("TCP from an open sandbox: %q %q: the probe cannot show a leak", r.stdout, r.stderr)
			}
			before := now()
			shIn(ctx, sb, udpProbe)
			testutil.Eventually(t, "tftp's datagram from an open sandbox", func() bool { return udp.n.Load() > before.udp })
			if dns != nil {
				shIn(ctx, sb, dnsProbe)
				testutil.Eventually(t, "nslookup's query from an open sandbox", func() bool { return dns.n.Load() > before.dns })
			}
		})
	})

	// The probes that must reach nothing, from a sandbox without a route.
	bypass := []struct{ name, script string }{
		{"raw TCP to the host", tcpTo(gw, outside.Port)},
		{"raw TCP to the metadata address", tcpTo("169.254.169.254", 80)},
		{"UDP to the host", udpProbe},
		{"DNS to the host", dnsProbe},
		// An allowlist sandbox's resolver is Docker's embedded one
		// (127.0.0.11). Engine 20.10 forwards what it cannot answer from
		// the container's namespace (no route here), except when the
		// host's own resolver is on a loopback address: then it forwards
		// from the host's namespace, and an internal network's queries
		// leave the machine (CVE-2024-29018, fixed in Engine 26.0 and
		// backports). This host's resolver is not on loopback; the test
		// logs it. The query would go to the host's upstream, which no
		// counter here sees: this probe checks only that the lookup
		// fails.
		{"DNS through the sandbox's own resolver", "cat /etc/resolv.conf; ip route; timeout 3 nslookup leak.example"},
	}
	noLeak := func(t *testing.T, ctx context.Context, sb host.Sandbox) {
		before := now()
		for _, b := range bypass {
			r := shIn(ctx, sb, b.script)
			h.wantEnd(t, ctx, sb, b.name, r, lifecycle.ReasonExited, anyCode)
			if r.res.ExitCode == 0 || bytes.Contains(r.stdout, []byte("hello")) {
				t.Errorf("%s: exit %d, %q: want a failure that reached nothing", b.name, r.res.ExitCode, r.stdout)
			}
			t.Logf("%s: exit %d, %q %q", b.name, r.res.ExitCode, clip(r.stdout), clip(r.stderr))
		}
		// Every probe above ran to its end (each waits 3 s for an answer),
		// so anything it sent has arrived by now.
		if after := now(); after != before {
			t.Errorf("probes reached the host: TCP requests, UDP datagrams, DNS queries %+v before, %+v after", before, after)
		}
	}

	t.Run("isolated", func(t *testing.T) {
		h.attack(t, testkit.SmallPolicy(), func(ctx context.Context, sb host.Sandbox) {
			okOut(t, "interfaces", shIn(ctx, sb, "ip -o link | cut -d: -f2"), " lo\n")
			noLeak(t, ctx, sb)
		})
	})

	t.Run("allowlist", func(t *testing.T) {
		h.attack(t, testkit.AllowlistPolicy(target), func(ctx context.Context, sb host.Sandbox) {
			// The proxy path works, for the rule's target only.
			if r := shIn(ctx, sb, testkit.ConnectVia(target)); !bytes.Contains(r.stdout, []byte(fmt.Sprintf("hello %d", outside.Port))) {
				t.Fatalf("CONNECT %s through the proxy: %q %q", target, r.stdout, r.stderr)
			}
			for _, script := range []string{testkit.ConnectVia("169.254.169.254:80"), testkit.GetVia("http://169.254.169.254/latest/meta-data/")} {
				if r := shIn(ctx, sb, script); !bytes.Contains(r.stdout, []byte(" 403 ")) {
					t.Errorf("the metadata address through the proxy: %q %q, want 403", r.stdout, r.stderr)
				}
			}
			noLeak(t, ctx, sb)
		})
	})
}

// TestHostileWarden: the workload turns on its warden, which runs as the
// same uid: it kills it, forges frames on its reattach socket, floods that
// socket with handshakes, and kills the sandbox's init.
func TestHostileWarden(t *testing.T) {
	h := newHostile(t)

	// A sibling kills the warden (kill -9, its pid from the socket's
	// name) while another process runs: both end lost (their outcome went
	// with the warden; their groups are killed through Docker), the loss
	// is journaled, and the next process gets a new warden.
	// (TestWardenKilledFromInside has a process kill its own parent, on
	// the embedded API.)
	t.Run("killed", func(t *testing.T) {
		h.attack(t, testkit.SmallPolicy(), func(ctx context.Context, sb host.Sandbox) {
			long, err := sb.Start(ctx, spec.Process{Argv: []string{"sleep", "302"}})
			if err != nil {
				t.Fatal(err)
			}
			killer := shIn(ctx, sb, wardenPID+"kill -9 $w; sleep 303")
			h.wantEnd(t, ctx, sb, "the killer", killer, lifecycle.ReasonLost, -1) // no code: none is invented
			r := finish(ctx, long)
			h.wantEnd(t, ctx, sb, "its sibling", r, lifecycle.ReasonLost, -1) // no code: none is invented
			for _, r := range []ran{killer, r} {
				if !spec.IsCode(r.err, spec.CodeStreamFailure) {
					t.Errorf("a process whose warden was killed: %v, want stream_failure", r.err)
				}
			}
			okOut(t, "after the kill", shIn(ctx, sb, "ps -o args | grep -c '^sleep 30[23]$' || true"), "0\n")
			if types := h.sandboxTypesOf(t, ctx, sb.ID()); testkit.Count(types, "sandbox.warden_lost") != 1 || testkit.Count(types, "sandbox.warden_started") != 2 {
				t.Errorf("sandbox history %v: want one warden lost and two started", types)
			}
		})
	})

	// Well-formed frames the warden must refuse on its reattach socket,
	// each on a connection of its own. busybox nc has no -U: the
	// workload connects with the warden's own bridge (`stockade-warden
	// attach`, executable by it in /workspace/.stockade), which copies
	// bytes both ways and nothing more. The warden answers each connection
	// with its challenge and closes it at the first frame that is not the
	// right answer; a process started before the forgeries keeps its
	// link, stdin and stdout, and nothing the forged frames asked for
	// happens.
	t.Run("forged frames", func(t *testing.T) {
		frame := func(write func(w *wire.Writer) error) []byte {
			var b bytes.Buffer
			if err := write(wire.NewWriter(&b)); err != nil {
				t.Fatal(err)
			}
			return b.Bytes()
		}
		forged := []struct {
			name string
			b    []byte
		}{
			{"an auth with a wrong MAC", frame(func(w *wire.Writer) error {
				return w.WriteJSON(wire.TAuth, 0, &wire.Auth{MAC: strings.Repeat("00", 32)})
			})},
			{"an init with a secret of its own", frame(func(w *wire.Writer) error {
				return w.WriteJSON(wire.TInit, 0, &wire.Init{Secret: strings.Repeat("11", wire.SecretSize)})
			})},
			{"a spawn without a handshake", frame(func(w *wire.Writer) error {
				return w.WriteJSON(wire.TSpawn, 1, &wire.Spawn{ID: "forged", Argv: []string{"sh", "-c", "echo pwned > /tmp/pwned"}})
			})},
			{"a signal without a handshake", frame(func(w *wire.Writer) error { return w.WriteSignal(1, int(syscall.SIGKILL)) })},
			{"a list without a handshake", frame(func(w *wire.Writer) error { return w.Write(wire.TList, 0) })},
			{"a frame over the size limit", []byte{byte(wire.TSpawn), 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff}},
			{"an unknown frame type", []byte{0xee, 0, 0, 0, 0, 0, 0, 0, 0}},
			{"a truncated header", []byte{byte(wire.TAuth), 0, 0}},
		}
		h.attack(t, testkit.SmallPolicy(), func(ctx context.Context, sb host.Sandbox) {
			victim, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c", "read x; echo got $x"}, Stdin: true})
			if err != nil {
				t.Fatal(err)
			}
			for i, f := range forged {
				putFile(t, ctx, sb, fmt.Sprintf("forged-%d", i), f.b, 0o644)
				r := shIn(ctx, sb, fmt.Sprintf(`s=$(ls /tmp/.stockade-warden-*.sock) && /workspace/.stockade/stockade-warden attach "$s" < forged-%d`, i))
				rd := wire.NewReader(bytes.NewReader(r.stdout))
				first, ferr := rd.Read()
				if ferr != nil || first.Type != wire.TChallenge || first.Channel != 0 {
					t.Errorf("%s: the warden answered %v on channel %d (%v), want its challenge", f.name, first.Type, first.Channel, ferr)
					continue
				}
				if next, err := rd.Read(); !errors.Is(err, io.EOF) {
					t.Errorf("%s: after the challenge, %v (%v); want the connection closed", f.name, next.Type, err)
				}
				h.wantEnd(t, ctx, sb, f.name+": the bridge", r, lifecycle.ReasonExited, 0)
			}
			// Twice the warden's handshake slots, each a connection that
			// says nothing: four wait out the handshake's deadline, the
			// rest are closed at once; meanwhile a process starts.
			flood, err := sb.Start(ctx, spec.Process{Argv: []string{"sh", "-c",
				`s=$(ls /tmp/.stockade-warden-*.sock); for i in 1 2 3 4 5 6 7 8; do (sleep 8 | /workspace/.stockade/stockade-warden attach "$s" >/dev/null 2>&1) & done; echo flooding; wait`}})
			if err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(flood.Stdout())
			if line, err := br.ReadString('\n'); line != "flooding\n" {
				t.Fatalf("the flood: %q %v", line, err)
			}
			okOut(t, "a process during the handshake flood", run(ctx, sb, spec.Process{Argv: []string{"echo", "during"}}), "during\n")
			h.wantEnd(t, ctx, sb, "the flood", finish(ctx, flood), lifecycle.ReasonExited, 0)

			if _, err := io.WriteString(victim.Stdin(), "hi\n"); err != nil {
				t.Fatal(err)
			}
			_ = victim.Stdin().Close()
			r := finish(ctx, victim)
			h.wantEnd(t, ctx, sb, "the process that lived through the forgeries", r, lifecycle.ReasonExited, 0)
			if string(r.stdout) != "got hi\n" {
				t.Errorf("its stdout %q, want \"got hi\\n\"", r.stdout)
			}
			okOut(t, "what the forged spawn asked for", shIn(ctx, sb, "test -e /tmp/pwned || echo absent"), "absent\n")
			if types := h.sandboxTypesOf(t, ctx, sb.ID()); testkit.Count(types, "sandbox.warden_lost") != 0 || testkit.Count(types, "sandbox.warden_started") != 1 {
				t.Errorf("sandbox history %v: want the one warden, never lost", types)
			}
		})
	})

	// init (docker-init, PID 1) runs as the sandbox's user: the workload
	// may signal it, and TERM makes it end the keeper and itself. The
	// workload has stopped its own sandbox: the runtime learns it from
	// Docker's die event, journals the sandbox exited with Docker's code,
	// and the sandbox takes no new process. Its processes should end
	// sandbox_stopped: README ("A lost warden": "they end lost (or
	// sandbox_stopped when the workload itself died)").
	//
	// The race this repeats for: the warden dies with the workload's PID
	// namespace, and in the instant after init's death Docker still
	// creates a kill exec (which fails, "cannot exec in a stopped state")
	// and still reports the workload running. Before the runtime watched
	// the workload for a moment (workloadDying) the processes were
	// journaled lost in about one run in three.
	t.Run("init killed", func(t *testing.T) {
		const trials = 10
		var lost []string
		for i := range trials {
			h.attack(t, testkit.SmallPolicy(), func(ctx context.Context, sb host.Sandbox) {
				id := workload(t, ctx, sb)
				logsBefore := len(h.srv.Logs.String())
				p, err := sb.Start(ctx, spec.Process{Argv: []string{"sleep", "304"}})
				if err != nil {
					t.Fatal(err)
				}
				killer := shIn(ctx, sb, "kill -TERM 1; sleep 305")
				sibling := finish(ctx, p)
				for _, x := range []struct {
					what string
					r    ran
				}{{"the killer", killer}, {"its sibling", sibling}} {
					switch x.r.res.Reason {
					case "":
						// Its start was never reported: the warden died
						// with its workload first. The start fails with
						// cancelled (the sandbox stopped), not lost.
						if !spec.IsCode(x.r.err, spec.CodeCancelled) {
							t.Errorf("trial %d, %s: its start failed with %v, want cancelled (the sandbox stopped)", i+1, x.what, x.r.err)
						}
					case string(lifecycle.ReasonSandboxStopped):
						h.wantEnd(t, ctx, sb, x.what, x.r, lifecycle.ReasonSandboxStopped, -1)
					case string(lifecycle.ReasonLost):
						h.wantEnd(t, ctx, sb, x.what, x.r, lifecycle.ReasonLost, -1)
						lost = append(lost, fmt.Sprintf("trial %d, %s: %v", i+1, x.what, x.r.err))
					default:
						t.Errorf("trial %d, %s: ended %+v %v, want sandbox_stopped", i+1, x.what, x.r.res, x.r.err)
					}
				}
				var st lifecycle.Sandbox
				testutil.Eventually(t, "the sandbox to be journaled exited", func() bool {
					st, err = sb.State(ctx)
					return err == nil && st.Phase == lifecycle.PhaseExited
				})
				c, err := h.docker.ContainerInspect(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if c.State.Running || st.Exit == nil || st.Exit.Reason != lifecycle.ReasonExited || st.Exit.ExitCode == nil || *st.Exit.ExitCode != c.State.ExitCode {
					t.Errorf("trial %d: the sandbox's journaled exit %+v, the workload's state %+v: want exited with Docker's code", i+1, st.Exit, c.State)
				}
				if _, err := sb.Start(ctx, spec.Process{Argv: []string{"true"}}); !spec.IsCode(err, spec.CodeAdmissionClosed) {
					t.Errorf("trial %d: a start after init was killed: %v, want admission_closed", i+1, err)
				}
				if logs := h.srv.Logs.String()[logsBefore:]; strings.Contains(logs, "warden was lost failed") {
					t.Logf("trial %d: the server logged:\n%s", i+1, logs)
				}
			})
		}
		if len(lost) > 0 {
			t.Errorf("of %d sandboxes whose workload itself died (its init killed from inside), processes were journaled lost, not sandbox_stopped (README: a lost warden's processes end sandbox_stopped when the workload itself died): the runtime's check that the workload is gone raced Docker's own notice of its death:\n%s", trials, strings.Join(lost, "\n"))
		}
	})
}

// TestHostileWardenImpostor: while the runtime is down (kill -9 of
// `stockade serve`), a program of the workload has taken the warden's
// socket over: it renamed the real one and listens in its place, relaying
// every byte to the warden, to sit inside the link the next runtime makes.
// The runtime's bridge sees that the listener is not the warden and sends
// nothing through it: the reattach fails, the warden is journaled lost
// (naming the impostor), its processes end lost with their groups killed,
// and the next process gets a warden of its own.
func TestHostileWardenImpostor(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e, first, c, sb := testkit.ServedKeptSandbox(t, ctx)
	st, err := sb.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	putFile(t, ctx, sb, "probe", buildProbe(t), 0o755)
	victim, err := sb.Start(ctx, spec.Process{Argv: []string{"sleep", "306"}, Stdout: spec.Discard, Stderr: spec.Discard})
	if err != nil {
		t.Fatal(err)
	}
	impostor, err := sb.Start(ctx, spec.Process{Argv: []string{"./probe", "relay"}, Stderr: spec.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(impostor.Stdout()).ReadString('\n'); line != "listening\n" {
		t.Fatalf("the impostor: %q %v", line, err)
	}
	victimID, impostorID := victim.ID(), impostor.ID()
	if err := first.Stop(t, syscall.SIGKILL); err == nil {
		t.Fatal("serve after SIGKILL exited 0")
	}
	_ = c.Close()

	second := e.Serve(t, ctx)
	c2 := second.Dial(t)
	for _, id := range []string{victimID, impostorID} {
		res, err := c2.Wait(ctx, id)
		if res.Reason != string(lifecycle.ReasonLost) || !spec.IsCode(err, spec.CodeStreamFailure) || !strings.Contains(err.Error(), "not the warden") {
			t.Errorf("process %s after the reattach through an impostor: %+v %v, want lost with stream_failure naming the impostor", id, res, err)
		}
	}
	hist, err := c2.History(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	var lostWhy []string
	for _, ev := range hist {
		if ev.Type == "sandbox.warden_lost" {
			lostWhy = append(lostWhy, string(ev.Payload))
		}
	}
	if len(lostWhy) != 1 || !strings.Contains(lostWhy[0], "not the warden") {
		t.Errorf("warden_lost events %q, want one naming the impostor", lostWhy)
	}
	if logs := second.Logs.String(); !strings.Contains(logs, "not the warden") {
		t.Errorf("the server's log does not name the impostor:\n%s", logs)
	}
	again, err := c2.Sandbox(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	// The relay saw the bridge connect and close, nothing more.
	r := shIn(ctx, again, "cat /tmp/relay.log; ps -o args | grep -c '^sleep 306$' || true")
	lines := strings.Split(strings.TrimSpace(string(r.stdout)), "\n")
	if r.err != nil || len(lines) < 2 || lines[0] != "connection 1" || lines[len(lines)-1] != "0" {
		t.Fatalf("after the reattach: %q %q %v; want the relay's log of a connection and no sleep 306 left", r.stdout, r.stderr, r.err)
	}
	for _, l := range lines[:len(lines)-1] {
		if strings.Contains(l, "bytes from the client") {
			t.Errorf("the impostor relayed bytes from the runtime: %q", l)
		}
	}
	okOut(t, "a process after the impostor", run(ctx, again, spec.Process{Argv: []string{"echo", "after"}}), "after\n")
	if err := again.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.AssertSandboxGone(t, dockertest.Client(t), st.Owner, sb.ID())
}

// TestHostilePython: the attacks busybox's shell makes awkward, from the
// realistic image (python3 from Debian's packages): a fork bomb whose
// members never give up (each retries its refused forks for ever), a
// thread bomb (threads count against the same pids limit), and a memory
// hog that writes every byte it asks for.
func TestHostilePython(t *testing.T) {
	h := newHostile(t)
	py := dockertest.PythonImageID(t, h.docker)

	t.Run("fork bomb", func(t *testing.T) {
		h.attackIn(t, py, testkit.SmallPolicy(), func(ctx context.Context, sb host.Sandbox) {
			refusedBefore := pidsRefused(t, ctx, sb)
			// It never ends by itself: its timeout ends it, and the kill
			// reaches every member (they all stay in its group).
			r := run(ctx, sb, spec.Process{Timeout: 5 * time.Second, Argv: []string{"python3", "-c", `
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
`}})
			h.wantEnd(t, ctx, sb, "the python fork bomb", r, lifecycle.ReasonTimeout, anyCode)
			if after := pidsRefused(t, ctx, sb); after <= refusedBefore {
				t.Errorf("pids.events max %d before, %d after: the pids limit was never hit", refusedBefore, after)
			}
			okOut(t, "after the bomb", shIn(ctx, sb, "ps -eo args | grep -c '^python3' || true"), "0\n")
			okOut(t, "after the bomb", run(ctx, sb, spec.Process{Argv: []string{"python3", "-c", "print('alive')"}}), "alive\n")
		})
	})

	t.Run("thread bomb", func(t *testing.T) {
		h.attackIn(t, py, testkit.SmallPolicy(), func(ctx context.Context, sb host.Sandbox) {
			r := run(ctx, sb, spec.Process{Argv: []string{"python3", "-c", `
import threading, time
n = 0
while True:
    try:
        threading.Thread(target=time.sleep, args=(1000,), daemon=True).start()
        n += 1
    except RuntimeError as e:
        print(n, e, flush=True)
        break
`}})
			h.wantEnd(t, ctx, sb, "the thread bomb", r, lifecycle.ReasonExited, 0)
			var n int
			var rest string
			if _, err := fmt.Sscanf(string(r.stdout), "%d %s", &n, &rest); err != nil || n <= 0 || n >= 64 || !strings.Contains(string(r.stdout), "can't start new thread") {
				t.Errorf("the thread bomb said %q; want fewer than the 64 tasks the policy allows, then a refusal", r.stdout)
			}
			okOut(t, "after the thread bomb", shIn(ctx, sb, "echo alive"), "alive\n")
		})
	})

	t.Run("memory hog", func(t *testing.T) {
		h.attackIn(t, py, testkit.SmallPolicy(), func(ctx context.Context, sb host.Sandbox) {
			r := run(ctx, sb, spec.Process{Argv: []string{"python3", "-c", `
b = []
while True:
    b.append(b"x" * (16 << 20))
`}})
			h.wantEnd(t, ctx, sb, "the python memory hog", r, lifecycle.ReasonOOM, 137)
			okOut(t, "after the hog", run(ctx, sb, spec.Process{Argv: []string{"python3", "-c", "print('alive')"}}), "alive\n")
		})
	})
}

// pidsRefused reads how many forks the sandbox's pids cgroup has refused.
func pidsRefused(t *testing.T, ctx context.Context, sb host.Sandbox) int {
	t.Helper()
	r := shIn(ctx, sb, "cat /sys/fs/cgroup/pids/pids.events")
	var n int
	if _, err := fmt.Sscanf(string(r.stdout), "max %d", &n); err != nil {
		t.Fatalf("pids.events: %q %q %v", r.stdout, r.stderr, err)
	}
	return n
}
