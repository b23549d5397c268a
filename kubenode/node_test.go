package kubenode

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/stockade/stockade/profile"
	"github.com/stockade/stockade/spec"
)

// Streams that run something in a pod need create on nodes/proxy whatever
// the method: a WebSocket exec is a GET.
func TestStreamsNeedCreate(t *testing.T) {
	a := streamsNeedCreate(nodeutil.NoAuth())
	u := &user.DefaultInfo{Name: "prober"}
	for _, c := range []struct {
		method, path, verb string
	}{
		{"GET", "/exec/default/p/main?command=sh", "create"},
		{"GET", "/attach/default/p/main", "create"},
		{"GET", "/portForward/default/p", "create"},
		{"POST", "/run/default/p/main", "create"},
		{"GET", "//exec/../exec/default/p/main", "create"},
		{"GET", "/containerLogs/default/p/main", "get"},
		{"GET", "/runningpods/", "get"},
		{"GET", "/executive/summary", "get"},
		{"POST", "/exec/default/p/main", "create"},
	} {
		r := httptest.NewRequest(c.method, "https://node:10250"+c.path, nil)
		attrs := a.GetRequestAttributes(u, r)
		if attrs.GetVerb() != c.verb || attrs.GetResource() != "nodes" || c.verb == "create" && attrs.GetSubresource() != "proxy" {
			t.Errorf("%s %s: verb %q on %q, want %q on nodes", c.method, c.path, attrs.GetVerb(), attrs.GetResource(), c.verb)
		}
		if _, ok := attrs.(authorizer.AttributesRecord); !ok {
			t.Errorf("%s %s: attributes of type %T", c.method, c.path, attrs)
		}
	}
}

func TestResources(t *testing.T) {
	capacity, alloc, err := resources(Config{MaxPods: 10, CPUs: 4, Memory: 8 << 30, ReservedCPUs: 0.5, ReservedMemory: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if c, a := capacity[corev1.ResourceCPU], alloc[corev1.ResourceCPU]; c.MilliValue() != 4000 || a.MilliValue() != 3500 {
		t.Errorf("cpu capacity %s allocatable %s, want 4 and 3500m", c.String(), a.String())
	}
	if c, a := capacity[corev1.ResourceMemory], alloc[corev1.ResourceMemory]; c.Value() != 8<<30 || a.Value() != 7<<30 {
		t.Errorf("memory capacity %s allocatable %s, want 8Gi and 7Gi", c.String(), a.String())
	}
	if _, ok := capacity[corev1.ResourceEphemeralStorage]; ok {
		t.Error("ephemeral-storage advertised: a sandbox's workspace is not bounded per pod")
	}
	if _, _, err := resources(Config{MaxPods: 1, CPUs: 1, ReservedCPUs: 1}); !spec.IsCode(err, spec.CodeInvalidArgument) {
		t.Errorf("a reservation of every CPU: %v, want invalid_argument", err)
	}
	// Default: the host's.
	capacity, alloc, err = resources(Config{MaxPods: 1})
	if err != nil {
		t.Fatal(err)
	}
	if c, a := capacity[corev1.ResourceMemory], alloc[corev1.ResourceMemory]; c.Value() <= 0 || c.Cmp(a) != 0 {
		t.Errorf("host memory %s, allocatable %s", c.String(), a.String())
	}
}

// Ready follows the runtime's health; the pressure conditions follow the
// host; a change is reported, the same state is not.
func TestNodeHealth(t *testing.T) {
	var doctorErr error
	rep := profile.Report{Checks: []profile.Check{{Name: "cgroup", Required: true, OK: true}}}
	facts := hostFacts{memAvailable: 4 << 30, diskFree: 0.5, pidsFree: 0.9}
	h := &nodeHealth{node: &corev1.Node{},
		doctor: func(context.Context) (profile.Report, error) { return rep, doctorErr },
		facts:  func() hostFacts { return facts }}
	status := func(n *corev1.Node, t corev1.NodeConditionType) (corev1.ConditionStatus, string) {
		c := findCondition(n.Status.Conditions, t)
		if c == nil {
			return "none", ""
		}
		return c.Status, c.Reason
	}
	ctx := context.Background()
	n, changed := h.check(ctx)
	if s, _ := status(n, corev1.NodeReady); s != corev1.ConditionTrue || !changed {
		t.Fatalf("healthy: Ready %s (changed %v)", s, changed)
	}
	if _, changed := h.check(ctx); changed {
		t.Error("the same health reported as a change")
	}
	doctorErr = errors.New("connection refused")
	n, changed = h.check(ctx)
	if s, r := status(n, corev1.NodeReady); s != corev1.ConditionFalse || r != "ContainerRuntimeDown" || !changed {
		t.Errorf("daemon down: Ready %s %s (changed %v)", s, r, changed)
	}
	doctorErr = nil
	rep.Checks[0].OK = false
	n, _ = h.check(ctx)
	if s, r := status(n, corev1.NodeReady); s != corev1.ConditionFalse || r != "PreflightFailed" {
		t.Errorf("preflight failing: Ready %s %s", s, r)
	}
	rep.Checks[0].OK = true
	facts = hostFacts{memAvailable: 50 << 20, diskFree: 0.05, pidsFree: 0.01}
	n, _ = h.check(ctx)
	for _, c := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		if s, _ := status(n, c); s != corev1.ConditionTrue {
			t.Errorf("%s %s under its threshold", c, s)
		}
	}
	if s, _ := status(n, corev1.NodeReady); s != corev1.ConditionTrue {
		t.Errorf("Ready %s: pressure is said by its own conditions", s)
	}
	facts = hostFacts{memAvailable: -1, diskFree: -1, pidsFree: -1}
	n, _ = h.check(ctx)
	if s, _ := status(n, corev1.NodeMemoryPressure); s != corev1.ConditionFalse {
		t.Errorf("unknown memory is pressure: %s", s)
	}
	if f := readHostFacts(t.TempDir()); f.memAvailable <= 0 || f.diskFree <= 0 || f.pidsFree <= 0 {
		t.Errorf("host facts unread here: %+v", f)
	}
}
