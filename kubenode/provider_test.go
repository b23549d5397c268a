package kubenode

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/internal/testutil"
	"github.com/stockade/stockade/lifecycle"
)

// fakeNode is a provider over a runtime on the fake engine (no Docker, no
// API server): what a pod becomes and what its status says, straight from
// the journal.
type fakeNode struct {
	p       *Provider
	rt      *stockade.Runtime
	eng     *dockerio.Fake
	indexer cache.Indexer
	mu      sync.Mutex
	runs    map[string]int // the container's runs so far, by pod name
	script  func(pod string, run int) dockerio.FakeRun
}

func newFakeNode(t *testing.T, script func(pod string, run int) dockerio.FakeRun) *fakeNode {
	t.Helper()
	saved := restartBackoff
	restartBackoff = [2]time.Duration{10 * time.Millisecond, 40 * time.Millisecond}
	t.Cleanup(func() { restartBackoff = saved })
	n := &fakeNode{eng: testutil.NewFake(t), runs: map[string]int{}, script: script}
	n.eng.SetTag("stockade/toolbox:dev", "sha256:"+strings.Repeat("a", 64))
	n.eng.Script = func(sb dockerio.Sandbox, req dockerio.ExecRequest) dockerio.FakeRun {
		pod := ""
		for _, e := range req.Spec.Env {
			if v, ok := strings.CutPrefix(e, ContainerEnv+"="); ok {
				pod = v
			}
		}
		if pod == "" {
			return dockerio.FakeRun{}
		}
		n.mu.Lock()
		run := n.runs[pod]
		n.runs[pod]++
		n.mu.Unlock()
		return n.script(pod, run)
	}
	// Closed at the end of the test, after the provider (its cleanup below
	// runs first).
	rt := testutil.OpenFake(t, n.eng, "")
	n.rt = rt
	n.indexer = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	n.p = newProvider(rt, "node-a", "10.0.0.9", 3, corev1listers.NewPodLister(n.indexer), nil)
	n.p.NotifyPods(context.Background(), func(*corev1.Pod) {})
	t.Cleanup(n.p.Close)
	return n
}

// pod makes a pod whose container is named after the pod (the fake
// engine's script tells them apart by it).
func fakePod(name string, restart corev1.RestartPolicy) *corev1.Pod {
	p := basePod()
	p.Name, p.UID = name, types.UID("uid-"+name)
	p.Spec.RestartPolicy = restart
	p.Spec.Containers[0].Name = name
	return p
}

func (n *fakeNode) waitStatus(t *testing.T, name string, what string, ok func(corev1.PodStatus) bool) corev1.PodStatus {
	t.Helper()
	var last corev1.PodStatus
	defer func() {
		if t.Failed() {
			t.Logf("pod %s's last status: %+v", name, last)
		}
	}()
	testutil.Eventually(t, "pod "+name+" "+what, func() bool {
		st, err := n.p.GetPodStatus(context.Background(), "ns", name)
		if err != nil {
			return false
		}
		last = *st
		return ok(last)
	})
	return last
}

func term(st corev1.PodStatus) *corev1.ContainerStateTerminated {
	if len(st.ContainerStatuses) != 1 {
		return nil
	}
	return st.ContainerStatuses[0].State.Terminated
}

func TestProviderRestartPolicies(t *testing.T) {
	n := newFakeNode(t, func(pod string, run int) dockerio.FakeRun {
		switch pod {
		case "onfailure": // fails twice, then succeeds
			if run < 2 {
				return dockerio.FakeRun{ExitCode: 1}
			}
			return dockerio.FakeRun{}
		case "never-oom":
			return dockerio.FakeRun{OOM: true}
		case "never-ok":
			return dockerio.FakeRun{ExitCode: 0}
		}
		return dockerio.FakeRun{ExitCode: 2}
	})
	ctx := context.Background()
	for _, p := range []*corev1.Pod{fakePod("onfailure", corev1.RestartPolicyOnFailure), fakePod("never-oom", corev1.RestartPolicyNever), fakePod("never-ok", corev1.RestartPolicyNever)} {
		if err := n.p.CreatePod(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	st := n.waitStatus(t, "onfailure", "succeeded", func(s corev1.PodStatus) bool { return s.Phase == corev1.PodSucceeded })
	cs := st.ContainerStatuses[0]
	if cs.RestartCount != 2 || cs.State.Terminated == nil || cs.State.Terminated.Reason != "Completed" {
		t.Errorf("onfailure: restarts %d, state %+v; want 2 restarts, Completed", cs.RestartCount, cs.State)
	}
	if lt := cs.LastTerminationState.Terminated; lt == nil || lt.ExitCode != 1 || lt.Reason != "Error" {
		t.Errorf("onfailure: last termination %+v, want exit 1 Error", cs.LastTerminationState)
	}
	if !strings.HasPrefix(cs.ContainerID, "stockade://") {
		t.Errorf("container id %q", cs.ContainerID)
	}
	st = n.waitStatus(t, "never-oom", "failed", func(s corev1.PodStatus) bool { return s.Phase == corev1.PodFailed })
	if tt := term(st); tt == nil || tt.Reason != "OOMKilled" || tt.ExitCode != 137 {
		t.Errorf("never-oom: %+v, want OOMKilled 137", st.ContainerStatuses)
	}
	st = n.waitStatus(t, "never-ok", "succeeded", func(s corev1.PodStatus) bool { return s.Phase == corev1.PodSucceeded })
	if st.HostIP != "10.0.0.9" || st.StartTime == nil {
		t.Errorf("never-ok: host ip %q start %v", st.HostIP, st.StartTime)
	}
	// A finished pod's sandbox is stopped (kept until the pod is
	// deleted), and the pod still reads Succeeded.
	testutil.Eventually(t, "never-ok's sandbox exited (stopped) once the pod finished", func() bool {
		infos, err := n.rt.Sandboxes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		phase := lifecycle.Phase("none")
		for _, in := range infos {
			if in.Labels[LabelPod] == "never-ok" {
				phase = in.Phase
			}
		}
		return phase == lifecycle.PhaseExited
	})
	if st, err := n.p.GetPodStatus(ctx, "ns", "never-ok"); err != nil || st.Phase != corev1.PodSucceeded {
		t.Errorf("never-ok after its sandbox stopped: %v %v", st.Phase, err)
	}
}

func TestProviderRefusesAndLimits(t *testing.T) {
	n := newFakeNode(t, func(string, int) dockerio.FakeRun { return dockerio.FakeRun{Hold: make(chan struct{})} })
	ctx := context.Background()
	bad := fakePod("bad", corev1.RestartPolicyNever)
	bad.Spec.HostNetwork = true
	if err := n.p.CreatePod(ctx, bad); err != nil {
		t.Fatal(err)
	}
	st := n.waitStatus(t, "bad", "refused", func(s corev1.PodStatus) bool { return s.Phase == corev1.PodFailed })
	if st.Reason != "Unsupported" || !strings.Contains(st.Message, "hostNetwork") {
		t.Errorf("refused pod: reason %q message %q", st.Reason, st.Message)
	}
	found := false
	for _, c := range st.Conditions {
		if c.Type == ConditionSupported && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "hostNetwork") {
			found = true
		}
	}
	if !found {
		t.Errorf("refused pod has no %s=False condition: %+v", ConditionSupported, st.Conditions)
	}
	// The node's limit is 3 pods: a refused one does not count, three
	// run, the fourth is refused for the limit (not as unsupported).
	for _, name := range []string{"a", "b", "c", "d"} {
		if err := n.p.CreatePod(ctx, fakePod(name, corev1.RestartPolicyAlways)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"a", "b", "c"} {
		n.waitStatus(t, name, "running", func(s corev1.PodStatus) bool { return s.Phase == corev1.PodRunning })
	}
	st = n.waitStatus(t, "d", "refused", func(s corev1.PodStatus) bool { return s.Phase == corev1.PodFailed })
	if st.Reason != "OutOfpods" || !strings.Contains(st.Message, "limit") {
		t.Errorf("pod past the limit: reason %q message %q", st.Reason, st.Message)
	}

	// Deleting a pod removes its sandbox (in the background: the pod
	// controller's workers never wait out a grace); the provider forgets it.
	before, err := n.rt.Sandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.p.DeletePod(ctx, fakePod("a", corev1.RestartPolicyAlways)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the deleted pod's sandbox removed and the pod forgotten", func() bool {
		after, err := n.rt.Sandboxes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, gerr := n.p.GetPod(ctx, "ns", "a")
		return len(after) == len(before)-1 && errdefs.IsNotFound(gerr)
	})
	if err := n.p.DeletePod(ctx, fakePod("a", corev1.RestartPolicyAlways)); !errdefs.IsNotFound(err) {
		t.Errorf("a second delete: %v, want not found", err)
	}
}

// A pod made again under the same name (a new UID) while the old one's
// sandbox still runs gets a new sandbox; the old one is removed.
func TestProviderNewUIDReplaces(t *testing.T) {
	n := newFakeNode(t, func(string, int) dockerio.FakeRun { return dockerio.FakeRun{Hold: make(chan struct{})} })
	ctx := context.Background()
	p := fakePod("x", corev1.RestartPolicyAlways)
	if err := n.p.CreatePod(ctx, p); err != nil {
		t.Fatal(err)
	}
	n.waitStatus(t, "x", "running", func(s corev1.PodStatus) bool { return s.Phase == corev1.PodRunning })
	old, _ := n.rt.Sandboxes(ctx)
	p2 := p.DeepCopy()
	p2.UID = "uid-x-2"
	if err := n.p.CreatePod(ctx, p2); err != nil {
		t.Fatal(err)
	}
	n.waitStatus(t, "x", "running again", func(s corev1.PodStatus) bool { return s.Phase == corev1.PodRunning })
	now, _ := n.rt.Sandboxes(ctx)
	if len(old) != 1 || len(now) != 1 || old[0].ID == now[0].ID || now[0].Labels[LabelUID] != "uid-x-2" {
		t.Errorf("sandboxes before %+v after %+v: want the old one replaced by the new UID's", old, now)
	}
}

func TestReasonWord(t *testing.T) {
	for in, want := range map[string]string{"sandbox_stopped": "SandboxStopped", "timeout": "Timeout", "output_limit": "OutputLimit"} {
		if got := reasonWord(lifecycleReason(in)); got != want {
			t.Errorf("reasonWord(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLastLines(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{{"a\nb\nc\n", 2, "b\nc\n"}, {"a\nb\nc", 1, "c"}, {"a\n", 5, "a\n"}, {"", 3, ""}, {"a\nb\n", 0, ""}} {
		if got := string(lastLines([]byte(tc.in), tc.n)); got != tc.want {
			t.Errorf("lastLines(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func lifecycleReason(s string) lifecycle.Reason { return lifecycle.Reason(s) }

// A pod whose env names a secret not made yet waits, as a kubelet's
// CreateContainerConfigError (never Failed, even under restartPolicy
// Never), and runs once the secret exists; the pod the node reports keeps
// the reference, never the value.
func TestProviderEnvNotReadableYet(t *testing.T) {
	n := newFakeNode(t, func(string, int) dockerio.FakeRun { return dockerio.FakeRun{} })
	var envMu sync.Mutex
	var env []string
	script := n.eng.Script
	n.eng.Script = func(sb dockerio.Sandbox, req dockerio.ExecRequest) dockerio.FakeRun {
		envMu.Lock()
		env = append(env, req.Spec.Env...)
		envMu.Unlock()
		return script(sb, req)
	}
	src := &fakeEnvSource{secrets: map[string]map[string][]byte{}}
	var mu sync.Mutex
	n.p.env = lockedEnvSource{src, &mu}
	ctx := context.Background()
	pod := fakePod("waits", corev1.RestartPolicyNever)
	pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "token"}}}}
	if err := n.p.CreatePod(ctx, pod); err != nil {
		t.Fatalf("a pod whose secret is not made yet: %v, want it accepted and waiting", err)
	}
	n.waitStatus(t, "waits", "waiting for its secret", func(s corev1.PodStatus) bool {
		return s.Phase == corev1.PodPending && len(s.ContainerStatuses) == 1 && s.ContainerStatuses[0].State.Waiting != nil &&
			s.ContainerStatuses[0].State.Waiting.Reason == "CreateContainerConfigError" && strings.Contains(s.ContainerStatuses[0].State.Waiting.Message, "ns/creds")
	})
	mu.Lock()
	src.secrets["ns/creds"] = map[string][]byte{"token": []byte("s3cret")}
	mu.Unlock()
	n.waitStatus(t, "waits", "succeeded once its secret exists", func(s corev1.PodStatus) bool { return s.Phase == corev1.PodSucceeded })
	got, err := n.p.GetPod(ctx, "ns", "waits")
	if err != nil {
		t.Fatal(err)
	}
	if e := got.Spec.Containers[0].Env[0]; e.Value != "" || e.ValueFrom == nil {
		t.Errorf("the reported pod's env %+v: the value went into it", e)
	}
	envMu.Lock()
	if !slices.Contains(env, "TOKEN=s3cret") {
		t.Errorf("the container's process env %q lacks the secret", env)
	}
	envMu.Unlock()
	// The value reached the process, not the journal: a secret variable.
	infos, err := n.rt.Sandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range infos {
		hist, err := n.rt.History(ctx, in.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range hist {
			if strings.Contains(string(e.Payload), "s3cret") {
				t.Errorf("the journal's %s holds the secret's value: %s", e.Type, e.Payload)
			}
		}
	}
}

type lockedEnvSource struct {
	src *fakeEnvSource
	mu  *sync.Mutex
}

func (l lockedEnvSource) object(ctx context.Context, kind, ns, name string) (map[string]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.src.object(ctx, kind, ns, name)
}

// A sandbox that dies under a pod whose policy restarts it is made again
// (as a kubelet makes a dead pod sandbox again): the pod runs on in a new
// sandbox, its restart counted, instead of ending Failed.
func TestProviderRemakesADeadSandbox(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	n := newFakeNode(t, func(string, int) dockerio.FakeRun { return dockerio.FakeRun{Hold: hold} })
	var mu sync.Mutex
	var sandboxes []dockerio.Sandbox
	script := n.eng.Script
	n.eng.Script = func(sb dockerio.Sandbox, req dockerio.ExecRequest) dockerio.FakeRun {
		mu.Lock()
		sandboxes = append(sandboxes, sb)
		mu.Unlock()
		return script(sb, req)
	}
	ctx := context.Background()
	if err := n.p.CreatePod(ctx, fakePod("remade", corev1.RestartPolicyAlways)); err != nil {
		t.Fatal(err)
	}
	n.waitStatus(t, "remade", "running", func(s corev1.PodStatus) bool {
		return s.Phase == corev1.PodRunning && len(s.ContainerStatuses) == 1 && s.ContainerStatuses[0].State.Running != nil
	})
	mu.Lock()
	first := sandboxes[len(sandboxes)-1]
	mu.Unlock()
	n.eng.SetExited(first, dockerio.ContainerExit{ExitCode: 137})
	st := n.waitStatus(t, "remade", "running again in a new sandbox", func(s corev1.PodStatus) bool {
		return s.Phase == corev1.PodRunning && len(s.ContainerStatuses) == 1 && s.ContainerStatuses[0].State.Running != nil && s.ContainerStatuses[0].RestartCount == 1
	})
	mu.Lock()
	last := sandboxes[len(sandboxes)-1]
	mu.Unlock()
	if last.ID == first.ID {
		t.Fatalf("the process runs again in the dead sandbox %s", first.ID)
	}
	if lt := st.ContainerStatuses[0].LastTerminationState.Terminated; lt == nil {
		t.Errorf("no last termination: %+v", st.ContainerStatuses[0])
	}
	infos, err := n.rt.Sandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range infos {
		if in.ID == first.ID {
			t.Errorf("the dead sandbox %s is still listed (%s)", first.ID, in.Phase)
		}
	}
}

// activeDeadlineSeconds ends a restarting pod (its sandbox's TTL stops it):
// a sandbox stopped on purpose is not a dead one to make again.
func TestProviderDeadlineEndsARestartingPod(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	n := newFakeNode(t, func(string, int) dockerio.FakeRun { return dockerio.FakeRun{Hold: hold} })
	ctx := context.Background()
	pod := fakePod("deadline", corev1.RestartPolicyAlways)
	d := int64(1)
	pod.Spec.ActiveDeadlineSeconds = &d
	if err := n.p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	st := n.waitStatus(t, "deadline", "failed past its deadline", func(s corev1.PodStatus) bool { return s.Phase == corev1.PodFailed })
	if st.Reason != "DeadlineExceeded" {
		t.Errorf("reason %q (%s), want DeadlineExceeded", st.Reason, st.Message)
	}
	infos, err := n.rt.Sandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	made := 0
	for _, in := range infos {
		if in.Labels[LabelPod] == "deadline" {
			made++
		}
	}
	if made != 1 {
		t.Errorf("%d sandboxes for the pod, want its one (not made again after its deadline)", made)
	}
}

// A pod's grace is waited for apart from the pod controller: DeletePod
// returns at once though the process ignores TERM for its whole grace, and
// a deletion again with no grace ends the wait.
func TestProviderDeleteWaitsItsGraceApart(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	n := newFakeNode(t, func(string, int) dockerio.FakeRun { return dockerio.FakeRun{Hold: hold, IgnoreTERM: true} })
	ctx := context.Background()
	pod := fakePod("slow", corev1.RestartPolicyAlways)
	year := int64(365 * 24 * 3600)
	pod.Spec.TerminationGracePeriodSeconds = &year
	if err := n.p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	n.waitStatus(t, "slow", "running", func(s corev1.PodStatus) bool { return s.Phase == corev1.PodRunning })
	del := pod.DeepCopy()
	del.DeletionGracePeriodSeconds = &year
	done := make(chan error, 1)
	go func() { done <- n.p.DeletePod(ctx, del) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("DeletePod waited out the pod's grace in the pod controller's worker")
	}
	if _, err := n.p.GetPod(ctx, "ns", "slow"); err != nil {
		t.Fatalf("the pod is forgotten before its grace ended: %v", err)
	}
	force := del.DeepCopy()
	zero := int64(0)
	force.DeletionGracePeriodSeconds = &zero
	if err := n.p.DeletePod(ctx, force); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the pod removed once deleted again with no grace", func() bool {
		_, err := n.p.GetPod(ctx, "ns", "slow")
		return errdefs.IsNotFound(err)
	})
}
