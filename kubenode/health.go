package kubenode

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stockade/stockade/profile"
)

// healthInterval is how often the node checks what its Ready condition
// says (the kubelet's node status update frequency is 10 s).
var healthInterval = 10 * time.Second

// Pressure thresholds, the kubelet's default hard eviction thresholds: a
// node under them takes no new pods (the node lifecycle controller taints
// it) rather than fail them in their sandbox.
const (
	memoryAvailableMin = 100 << 20 // memory.available<100Mi
	diskAvailableMin   = 0.10      // nodefs.available<10%
	pidsAvailableMin   = 0.10      // 10% of pid_max left
)

// hostFacts is what a health check reads of the host.
type hostFacts struct {
	memAvailable int64   // bytes; -1 unknown
	diskFree     float64 // fraction of the state directory's filesystem; -1 unknown
	pidsFree     float64 // fraction of pid_max not in use; -1 unknown
}

// nodeHealth is the node's status as the cluster sees it: Ready follows the
// runtime's own health (the Docker daemon answers and the preflight profile
// holds), and the kubelet's pressure conditions
// follow the host. A node that cannot run pods says so (Ready False, with
// why) instead of taking pods that then fail SandboxFailed. Ping answers
// while the agent runs: a lost lease means the agent is gone, Ready False
// means it is here and cannot work.
type nodeHealth struct {
	doctor func(context.Context) (profile.Report, error)
	facts  func() hostFacts

	mu   sync.Mutex
	node *corev1.Node // the status last given to the controller
}

func newNodeHealth(n *corev1.Node, doctor func(context.Context) (profile.Report, error), stateDir string) *nodeHealth {
	return &nodeHealth{node: n.DeepCopy(), doctor: doctor, facts: func() hostFacts { return readHostFacts(stateDir) }}
}

// Ping says the agent is alive; what it can do is in the conditions.
func (h *nodeHealth) Ping(context.Context) error { return nil }

// NotifyNodeStatus checks now and every healthInterval, and hands the
// controller each status whose conditions changed.
func (h *nodeHealth) NotifyNodeStatus(ctx context.Context, cb func(*corev1.Node)) {
	go func() {
		t := time.NewTicker(healthInterval)
		defer t.Stop()
		for {
			if n, changed := h.check(ctx); changed {
				cb(n)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// check computes the conditions; changed when one's status or reason moved.
func (h *nodeHealth) check(ctx context.Context) (*corev1.Node, bool) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ready, why := corev1.ConditionTrue, "stockade is ready: the Docker daemon answers and its preflight holds"
	reason := "KubeletReady"
	rep, err := h.doctor(cctx)
	switch {
	case err != nil:
		ready, reason, why = corev1.ConditionFalse, "ContainerRuntimeDown", "the Docker daemon does not answer: "+err.Error()
	case !rep.OK():
		ready, reason, why = corev1.ConditionFalse, "PreflightFailed", "the Docker daemon no longer passes the preflight: "+rep.Err().Error()
	}
	f := h.facts()
	conds := []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: ready, Reason: reason, Message: why},
		pressure(corev1.NodeMemoryPressure, f.memAvailable >= 0 && f.memAvailable < memoryAvailableMin, "KubeletHasInsufficientMemory", "KubeletHasSufficientMemory",
			known(f.memAvailable >= 0, fmt.Sprintf("memory available %d MiB (threshold %d MiB)", f.memAvailable>>20, memoryAvailableMin>>20), "memory available unknown")),
		pressure(corev1.NodeDiskPressure, f.diskFree >= 0 && f.diskFree < diskAvailableMin, "KubeletHasDiskPressure", "KubeletHasNoDiskPressure",
			known(f.diskFree >= 0, fmt.Sprintf("the journal's filesystem is %.0f%% free (threshold %.0f%%)", 100*f.diskFree, 100*diskAvailableMin), "the journal's filesystem's free space unknown")),
		pressure(corev1.NodePIDPressure, f.pidsFree >= 0 && f.pidsFree < pidsAvailableMin, "KubeletHasInsufficientPID", "KubeletHasSufficientPID",
			known(f.pidsFree >= 0, fmt.Sprintf("%.0f%% of pid_max free (threshold %.0f%%)", 100*f.pidsFree, 100*pidsAvailableMin), "pids in use unknown")),
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	now := metav1.Now()
	changed := false
	for i, c := range conds {
		c.LastHeartbeatTime = now
		c.LastTransitionTime = now
		if old := findCondition(h.node.Status.Conditions, c.Type); old != nil {
			if old.Status == c.Status {
				c.LastTransitionTime = old.LastTransitionTime
			}
			changed = changed || old.Status != c.Status || old.Reason != c.Reason
		} else {
			changed = true
		}
		conds[i] = c
	}
	h.node.Status.Conditions = conds
	return h.node.DeepCopy(), changed
}

// known is what a condition says of a fact: its figure, or that it is not
// known.
func known(ok bool, figure, unknown string) string {
	if ok {
		return figure
	}
	return unknown
}

func pressure(t corev1.NodeConditionType, under bool, yes, no, msg string) corev1.NodeCondition {
	if under {
		return corev1.NodeCondition{Type: t, Status: corev1.ConditionTrue, Reason: yes, Message: msg}
	}
	return corev1.NodeCondition{Type: t, Status: corev1.ConditionFalse, Reason: no, Message: msg}
}

func findCondition(cs []corev1.NodeCondition, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}

// readHostFacts reads the host's memory, the state directory's free space
// and the pids in use; what cannot be read is unknown (-1), never pressure.
func readHostFacts(stateDir string) hostFacts {
	f := hostFacts{memAvailable: -1, diskFree: -1, pidsFree: -1}
	if v, ok := meminfo("MemAvailable:"); ok {
		f.memAvailable = v
	}
	var st unix.Statfs_t
	if stateDir != "" && unix.Statfs(stateDir, &st) == nil && st.Blocks > 0 {
		f.diskFree = float64(st.Bavail) / float64(st.Blocks)
	}
	if b, err := os.ReadFile("/proc/sys/kernel/pid_max"); err == nil {
		max, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
		var si unix.Sysinfo_t
		if err == nil && max > 0 && unix.Sysinfo(&si) == nil {
			f.pidsFree = 1 - float64(si.Procs)/max
		}
	}
	return f
}

// meminfo is a /proc/meminfo field in bytes.
func meminfo(field string) (int64, bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
			kib, err := strconv.ParseInt(f[1], 10, 64)
			return kib * 1024, err == nil
		}
	}
	return 0, false
}
