package kube

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/stockade/stockade/client"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/internal/kubecluster"
	"github.com/stockade/stockade/kubenode"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/server"
)

// TestKubeNodeAdmitted is issue 35's node as a cluster admin would admit
// it, on a control plane with the Node authorizer and NodeRestriction on
// (the node holds a kubelet's credential and nothing else):
//   - it registers (NodeRestriction refuses a node that sets labels of the
//     kubernetes.io namespace) with capacity and allocatable from its flags;
//   - a pod's env from a secret and a config map reaches its process, while
//     the node never lists or watches a secret or config map, reads only the
//     ones its pod names, and sends the value in no request (status writes
//     included) and serves it from no debug endpoint;
//   - a caller allowed only `get nodes/proxy` reads logs but cannot exec;
//   - Ready follows the runtime's health: False while its Docker daemon does
//     not answer, True again when it does.
func TestKubeNodeAdmitted(t *testing.T) {
	cli := dockertest.Client(t)
	dockertest.ImageID(t, cli)
	c, cs := kubeCluster(t, 15*time.Second)
	bin := buildNodeProgram(t)
	ctx := context.Background()
	const secretValue = "s3cr3t-in-env-7f3a" //nolint:gosec // G101: the test's sentinel, no credential

	proxy := newDockerProxy(t)
	n := newKubeNode(t, c, cli, bin, "stockade-a")
	n.env = []string{"DOCKER_HOST=unix://" + proxy.path}
	n.args = []string{"--cpus", "2", "--memory", "4Gi", "--reserved", "cpu=500m,memory=1Gi"}
	n.start(t)
	waitReady(t, cs, n.name, corev1.ConditionTrue, time.Minute)
	node, err := cs.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k := range node.Labels {
		if strings.HasPrefix(k, "kubernetes.io/role") || strings.HasPrefix(k, "node-role.kubernetes.io/") {
			t.Errorf("node label %s: a node may not set it on itself", k)
		}
	}
	capCPU, allocCPU := node.Status.Capacity[corev1.ResourceCPU], node.Status.Allocatable[corev1.ResourceCPU]
	capMem, allocMem := node.Status.Capacity[corev1.ResourceMemory], node.Status.Allocatable[corev1.ResourceMemory]
	if capCPU.MilliValue() != 2000 || allocCPU.MilliValue() != 1500 || capMem.Value() != 4<<30 || allocMem.Value() != 3<<30 {
		t.Errorf("capacity cpu %s memory %s, allocatable cpu %s memory %s; want 2, 4Gi, 1500m, 3Gi",
			capCPU.String(), capMem.String(), allocCPU.String(), allocMem.String())
	}
	if _, ok := node.Status.Allocatable[corev1.ResourceEphemeralStorage]; ok {
		t.Error("ephemeral-storage offered: a sandbox's workspace is not bounded per pod")
	}

	// Env from a secret and a config map.
	if _, err := cs.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"},
		Data: map[string][]byte{"API_KEY": []byte(secretValue)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "unrelated"},
		Data: map[string][]byte{"X": []byte("y")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"},
		Data: map[string]string{"MODE": "fast"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The process prints its secret's digest, not the secret: what it
	// prints is recorded (a process that prints its secret writes it down
	// itself).
	digest := fmt.Sprintf("%x", sha256.Sum256([]byte(secretValue)))
	pod := sandboxPod("env", corev1.RestartPolicyAlways, "sh", "-c", `echo "key=$(printf %s "$API_KEY" | sha256sum | cut -d' ' -f1) mode=$MODE"; sleep 3600`)
	pod.Spec.Containers[0].Env = append(pod.Spec.Containers[0].Env, corev1.EnvVar{Name: "API_KEY", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "API_KEY"}}})
	pod.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cs.CoreV1().Pods("default").Delete(ctx, "env", metav1.DeleteOptions{}) }()
	waitPods(t, cs, 2*time.Minute, []string{"env"}, "running", podRunning)
	deadline := time.Now().Add(time.Minute)
	for {
		out, code := kubectl(t, c, "", "logs", "env")
		if code == 0 && strings.Contains(out, "key="+digest+" mode=fast") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pod's process never printed its env from the secret and config map: exit %d %q", code, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
	// As the API server's kubelet client reads it (the API server will not
	// proxy to a loopback node address).
	if code, out := kubeletRead(t, c, n.listen, "/runningpods/", "apiserver-kubelet-client"); code != 200 || strings.Contains(out, secretValue) || !strings.Contains(out, "creds") {
		t.Errorf("/runningpods/: status %d; it must name the secret, never its value: %.2000s", code, out)
	}

	// Nothing the node writes down holds the value: its journal, its
	// recordings, anything under its state directory.
	noValueOnDisk := func() {
		t.Helper()
		root, err := os.OpenRoot(filepath.Dir(n.journal))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = root.Close() }()
		if err := fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			if b, err := fs.ReadFile(root.FS(), p); err == nil && strings.Contains(string(b), secretValue) {
				t.Errorf("%s holds the secret's value", p)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	noValueOnDisk()
	// A node killed -9 and started again has no value (none was written):
	// it reads the pod's references again and gives the re-adopted sandbox
	// its secrets, so kubectl exec has them as before.
	n.kill9(t)
	n.start(t)
	waitReady(t, cs, n.name, corev1.ConditionTrue, time.Minute)
	deadline = time.Now().Add(time.Minute)
	for {
		out, code := kubectl(t, c, "", "exec", "env", "--", "sh", "-c", `echo "key=$(printf %s "$API_KEY" | sha256sum | cut -d' ' -f1)"`)
		if code == 0 && strings.Contains(out, "key="+digest) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubectl exec after the node's restart: exit %d %q, want the secret's value", code, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
	noValueOnDisk()

	// A running sandbox takes neither an in-place resize nor an ephemeral
	// container (kubectl debug). The node advertises no resize support, so
	// the API server refuses a resize itself; a debug container, which it
	// admits, is refused in the pod's condition.
	if out, code := kubectl(t, c, "", "patch", "pod", "env", "--subresource", "resize", "--patch",
		`{"spec":{"containers":[{"name":"main","resources":{"limits":{"memory":"300Mi"}}}]}}`); code == 0 || !strings.Contains(out, "resize") {
		t.Errorf("kubectl patch --subresource resize: exit %d %s; want it refused (the node does not support resize)", code, out)
	}
	if out, code := kubectl(t, c, "", "debug", "env", "--image=stockade/toolbox:dev", "--", "true"); code != 0 {
		t.Errorf("kubectl debug: exit %d %s", code, out)
	} else {
		waitCondition(t, cs, "env", "kubectl debug")
	}

	// A sandbox that dies under a restarting pod is made again, as a
	// kubelet makes a dead pod sandbox again: the pod runs on, restarted.
	sandboxOf := func(pod string) string {
		t.Helper()
		rc, err := client.Dial(server.SocketPath(n.journal))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = rc.Close() }()
		infos, err := rc.Sandboxes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range infos {
			if in.Labels[kubenode.LabelPod] == pod && in.Phase == lifecycle.PhaseStarted {
				return in.ID
			}
		}
		t.Fatalf("no live sandbox of pod %s", pod)
		return ""
	}
	dead := sandboxOf("env")
	workloads, err := cli.ContainerList(ctx, container.ListOptions{Filters: filters.NewArgs(
		filters.Arg("label", dockerio.LabelSandbox+"="+dead), filters.Arg("label", dockerio.LabelRole+"="+string(dockerio.RoleWorkload)))})
	if err != nil || len(workloads) != 1 {
		t.Fatalf("the workload container of sandbox %s: %v %v", dead, workloads, err)
	}
	if err := cli.ContainerKill(ctx, workloads[0].ID, "KILL"); err != nil {
		t.Fatal(err)
	}
	waitPods(t, cs, 2*time.Minute, []string{"env"}, "running again in a new sandbox", func(p *corev1.Pod) bool {
		return podRunning(p) && p.Status.ContainerStatuses[0].RestartCount >= 1
	})
	if again := sandboxOf("env"); again == dead {
		t.Errorf("the pod runs on in its dead sandbox %s", dead)
	}

	// A caller allowed only `get nodes/proxy` reads logs, never execs.
	if _, _, err := c.UserCert("prober", "prober"); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(ctx, proberRBAC); err != nil {
		t.Fatal(err)
	}
	if got := kubeletGet(t, c, n.listen, "/containerLogs/default/env/main", "prober"); got != 200 {
		t.Errorf("logs with get nodes/proxy: status %d, want 200", got)
	}
	for _, p := range []string{"/exec/default/env/main?command=true&output=1", "/attach/default/env/main?output=1", "/portForward/default/env"} {
		if got := kubeletGet(t, c, n.listen, p, "prober"); got != 403 {
			t.Errorf("GET %s with only get nodes/proxy: status %d, want 403", p, got)
		}
	}

	// What the node asked of the API server.
	events := auditOf(t, c, "system:node:"+n.name)
	var secretGets, statusWrites int
	for _, e := range events {
		res := e.ObjectRef.Resource
		if (res == "secrets" || res == "configmaps") && (e.Verb == "list" || e.Verb == "watch") {
			t.Errorf("the node did %s %s: a kubelet-sized credential reads only what its pods name", e.Verb, res)
		}
		if res == "secrets" && e.Verb == "get" {
			secretGets++
			if e.ObjectRef.Name != "creds" {
				t.Errorf("the node read secret %s, which its pod does not name", e.ObjectRef.Name)
			}
		}
		if res == "pods" && e.ObjectRef.Subresource == "status" {
			statusWrites++
		}
		if strings.Contains(e.raw, secretValue) {
			t.Errorf("the secret's value went to the API server in %s %s/%s", e.Verb, res, e.ObjectRef.Subresource)
		}
	}
	if secretGets == 0 || statusWrites == 0 {
		t.Errorf("the audit log holds %d gets of the secret and %d status writes of the node's: the checks above saw nothing", secretGets, statusWrites)
	}

	// A reference to a secret not made yet keeps the pod Pending (its
	// logs an error, not an empty answer); once made, the pod runs.
	later := sandboxPod("later", corev1.RestartPolicyAlways, "sh", "-c", `echo "late=$LATE"; sleep 3600`)
	later.Spec.Containers[0].Env = append(later.Spec.Containers[0].Env, corev1.EnvVar{Name: "LATE", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "later-creds"}, Key: "v"}}})
	if _, err := cs.CoreV1().Pods("default").Create(ctx, later, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cs.CoreV1().Pods("default").Delete(ctx, "later", metav1.DeleteOptions{}) }()
	waitPods(t, cs, time.Minute, []string{"later"}, "pending on the node", func(p *corev1.Pod) bool {
		w := p.Status.ContainerStatuses
		return p.Spec.NodeName != "" && p.Status.Phase == corev1.PodPending && len(w) == 1 && w[0].State.Waiting != nil &&
			w[0].State.Waiting.Reason == "CreateContainerConfigError" && strings.Contains(w[0].State.Waiting.Message, "later-creds")
	})
	if out, code := kubectl(t, c, "", "logs", "later"); code == 0 {
		t.Errorf("kubectl logs of a pod whose container has not started: exit 0 %q, want an error", out)
	}
	if _, err := cs.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "later-creds"},
		Data: map[string][]byte{"v": []byte("now")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPods(t, cs, 2*time.Minute, []string{"later"}, "running once its secret exists", podRunning)

	// Output past the runtime's default quota (64 MiB) kills neither a
	// container nor an exec: logs rotate, an exec's stream is its caller's.
	const big = 70_000_000
	chatty := sandboxPod("chatty", corev1.RestartPolicyAlways, "sh", "-c", fmt.Sprintf(`head -c %d /dev/zero | tr '\0' x; echo; echo done; sleep 3600`, big))
	if _, err := cs.CoreV1().Pods("default").Create(ctx, chatty, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cs.CoreV1().Pods("default").Delete(ctx, "chatty", metav1.DeleteOptions{}) }()
	waitPods(t, cs, 2*time.Minute, []string{"chatty"}, "running", podRunning)
	deadline = time.Now().Add(2 * time.Minute)
	for {
		out, code := kubectl(t, c, "", "logs", "--tail=1", "chatty")
		if code == 0 && out == "done\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the chatty pod never finished writing: exit %d %.200q", code, out)
		}
		time.Sleep(time.Second)
	}
	if p := waitPods(t, cs, time.Minute, []string{"chatty"}, "running", podRunning)["chatty"]; p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("the chatty pod's container was restarted %d times: its output killed it", p.Status.ContainerStatuses[0].RestartCount)
	}
	if out, code := kubectl(t, c, "", "exec", "chatty", "--", "head", "-c", strconv.Itoa(big), "/dev/zero"); code != 0 || len(out) != big {
		t.Errorf("kubectl exec of %d bytes: exit %d, %d bytes", big, code, len(out))
	}

	// Ready follows the runtime's health.
	proxy.down()
	waitReady(t, cs, n.name, corev1.ConditionFalse, time.Minute)
	if c := readyCondition(t, cs, n.name); c.Reason != "ContainerRuntimeDown" {
		t.Errorf("Ready False for %s (%s), want ContainerRuntimeDown", c.Reason, c.Message)
	}
	proxy.up(t)
	waitReady(t, cs, n.name, corev1.ConditionTrue, time.Minute)
}

const proberRBAC = `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: node-proxy-get
rules:
- apiGroups: [""]
  resources: ["nodes/proxy"]
  verbs: ["get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: node-proxy-get
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: node-proxy-get
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: prober
`

func waitReady(t *testing.T, cs *kubernetes.Clientset, name string, want corev1.ConditionStatus, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for nodeReady(cs, name) != want {
		if time.Now().After(deadline) {
			c := readyCondition(t, cs, name)
			t.Fatalf("node %s Ready %s (%s: %s), want %s after %v", name, c.Status, c.Reason, c.Message, want, limit)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func readyCondition(t *testing.T, cs *kubernetes.Clientset, name string) corev1.NodeCondition {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c
		}
	}
	return corev1.NodeCondition{}
}

// waitCondition waits until the pod's stockade.io/Supported condition is
// False saying what.
func waitCondition(t *testing.T, cs *kubernetes.Clientset, pod, what string) {
	t.Helper()
	waitPods(t, cs, time.Minute, []string{pod}, "saying "+what+" is not applied", func(p *corev1.Pod) bool {
		for _, c := range p.Status.Conditions {
			if c.Type == kubenode.ConditionSupported && c.Status == corev1.ConditionFalse && c.Reason == "UpdateNotApplied" && strings.Contains(c.Message, what) {
				return true
			}
		}
		return false
	})
}

// auditEvent is what the test reads of an audit log line.
type auditEvent struct {
	Verb string `json:"verb"`
	User struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	raw string
}

// auditOf is every audited request of user.
func auditOf(t *testing.T, c *kubecluster.Cluster, user string) []auditEvent {
	t.Helper()
	f, err := os.Open(c.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var out []auditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit log line: %v", err)
		}
		if e.User.Username == user {
			e.raw = sc.Text()
			out = append(out, e)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// dockerProxy is a unix socket forwarded to the Docker daemon's, which the
// test can take down (the daemon does not answer the node) and bring back.
type dockerProxy struct {
	path, target string

	mu    sync.Mutex
	l     net.Listener
	conns map[net.Conn]struct{}
}

func newDockerProxy(t *testing.T) *dockerProxy {
	t.Helper()
	target := "/var/run/docker.sock"
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		rest, ok := strings.CutPrefix(h, "unix://")
		if !ok {
			if os.Getenv("CI") == "true" {
				t.Fatalf("DOCKER_HOST %s is not a unix socket: the proxy forwards one, and CI=true fails rather than skip", h)
			}
			t.Skipf("DOCKER_HOST %s is not a unix socket: the proxy forwards one", h)
		}
		target = rest
	}
	dir, err := os.MkdirTemp("", "stockade-dproxy-") // short: a socket path is at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	p := &dockerProxy{path: filepath.Join(dir, "docker.sock"), target: target, conns: map[net.Conn]struct{}{}}
	p.up(t)
	t.Cleanup(p.down)
	return p
}

func (p *dockerProxy) up(t *testing.T) {
	t.Helper()
	l, err := net.Listen("unix", p.path)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.l = l
	p.mu.Unlock()
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("unix", p.target)
			if err != nil {
				_ = in.Close()
				continue
			}
			p.mu.Lock()
			if p.l != l { // taken down meanwhile
				p.mu.Unlock()
				_, _ = in.Close(), out.Close()
				return
			}
			p.conns[in], p.conns[out] = struct{}{}, struct{}{}
			p.mu.Unlock()
			go p.pipe(in, out)
			go p.pipe(out, in)
		}
	}()
}

func (p *dockerProxy) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	_, _ = dst.Close(), src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// down closes the socket and every connection through it.
func (p *dockerProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.l != nil {
		_ = p.l.Close()
		p.l = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}
