# The `make run` demo, run by /bin/sh inside a one-shot sandbox: it shows the
# sandbox's identity and limits from the inside.
echo "== identity";  id
echo "== root filesystem (read-only)"; grep ' / ' /proc/self/mounts
touch /probe 2>&1 || true
echo "== privileges"; grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status
echo "== limits"
if [ -f /sys/fs/cgroup/memory.max ]; then
	echo "memory $(cat /sys/fs/cgroup/memory.max) bytes, pids $(cat /sys/fs/cgroup/pids.max)"
else
	echo "memory $(cat /sys/fs/cgroup/memory/memory.limit_in_bytes) bytes, pids $(cat /sys/fs/cgroup/pids/pids.max)"
fi
echo "== network (isolated: loopback only)"; ls /sys/class/net
echo "== workspace"; echo hello > /workspace/work/hello && ls -ln /workspace/work
