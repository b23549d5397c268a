package kube

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	dockerclient "github.com/docker/docker/client"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/stockade/stockade/client"
	"github.com/stockade/stockade/dockerio"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/internal/kubecluster"
	"github.com/stockade/stockade/kubenode"
	"github.com/stockade/stockade/spec"
	"github.com/stockade/stockade/test/testkit"
)

// TestKubeNodes is issue 23's scenario on a real control plane (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler) and three
// `stockade node` agents, three owners on the one Docker daemon: sandbox
// pods are scheduled across the nodes and run; kubectl exec (stdout, exit
// code, stdin), a terminal with its size, and kubectl logs -f work through
// the nodes' kubelet APIs; an unsupported pod is refused in its status; a
// node killed -9 goes NotReady by its lease, a pod of it deleted meanwhile
// and one evicted by Kubernetes (the taint manager) stay Terminating, and the
// node on return re-adopts its other pods (the same processes, running),
// removes the two pods' sandboxes and reports truly;
// at the end every pod is deleted and nothing any node owns is left.
// `make cluster` runs it with 30 pods and prints its figures
// (STOCKADE_CLUSTER_PODS, STOCKADE_CLUSTER_FIGURES).
func TestKubeNodes(t *testing.T) {
	cli := dockertest.Client(t)
	dockertest.ImageID(t, cli)
	pods := 9
	if v := os.Getenv("STOCKADE_CLUSTER_PODS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 3 {
			t.Fatalf("STOCKADE_CLUSTER_PODS=%q: a number of at least 3", v)
		}
		pods = n
	}
	c, cs := kubeCluster(t, 15*time.Second)
	bin := buildNodeProgram(t)
	ctx := context.Background()

	nodes := map[string]*kubeNode{}
	var names []string
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("stockade-%d", i)
		nodes[name] = newKubeNode(t, c, cli, bin, name)
		names = append(names, name)
	}
	for _, name := range names {
		nodes[name].start(t)
	}
	for _, name := range names {
		deadline := time.Now().Add(time.Minute)
		for nodeReady(cs, name) != corev1.ConditionTrue {
			if time.Now().After(deadline) {
				t.Fatalf("node %s not Ready in the API a minute after it said so: %s", name, nodeReady(cs, name))
			}
			time.Sleep(200 * time.Millisecond)
		}
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(n.Spec.Taints, func(tt corev1.Taint) bool { return tt.Key == kubenode.TaintKey }) {
			t.Errorf("node %s has no %s taint: %v", name, kubenode.TaintKey, n.Spec.Taints)
		}
		if p := n.Status.Capacity[corev1.ResourcePods]; p.Value() != 60 {
			t.Errorf("node %s capacity pods = %v, want 60 (--max-pods)", name, p.String())
		}
	}

	// A pod that does not tolerate the taint is never placed on a node.
	untolerated := sandboxPod("untolerated", corev1.RestartPolicyNever, "sleep", "1")
	untolerated.Spec.Tolerations = nil
	if _, err := cs.CoreV1().Pods("default").Create(ctx, untolerated, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The sandbox pods, created at once; each one's time to Running.
	var podNames []string
	created := map[string]time.Time{}
	for i := range pods {
		name := fmt.Sprintf("sb-%02d", i)
		podNames = append(podNames, name)
		p := sandboxPod(name, corev1.RestartPolicyAlways, "sh", "-c", `i=0; while true; do echo tick $i; i=$((i+1)); sleep 1; done`)
		created[name] = time.Now()
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	toRunning := watchRunning(t, cs, podNames, created, 4*time.Minute)
	wall := time.Since(start)
	running := waitPods(t, cs, time.Minute, podNames, "running", podRunning)
	perNode := map[string][]string{}
	for name, p := range running {
		perNode[p.Spec.NodeName] = append(perNode[p.Spec.NodeName], name)
		if !strings.HasPrefix(p.Status.ContainerStatuses[0].ContainerID, "stockade://") {
			t.Errorf("pod %s's container id %q is not a stockade process", name, p.Status.ContainerStatuses[0].ContainerID)
		}
	}
	for _, name := range names {
		t.Logf("node %s runs %d pods", name, len(perNode[name]))
		if len(perNode[name]) < pods/3 {
			t.Errorf("node %s runs %d of %d pods: the scheduler did not spread them (%v)", name, len(perNode[name]), pods, perNode)
		}
	}
	if p, err := cs.CoreV1().Pods("default").Get(ctx, "untolerated", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Errorf("a pod without the toleration was placed: %v %v", p.Spec.NodeName, err)
	}

	// kubectl exec: output, exit code, environment, stdin.
	target := podNames[0]
	out, code := kubectl(t, c, "", "exec", target, "--", "sh", "-c", `echo "$GREETING from $(pwd)"; echo err >&2; exit 3`)
	if code != 3 || !strings.Contains(out, "hello from /workspace/work") || !strings.Contains(out, "err") {
		t.Errorf("kubectl exec: exit %d, output %q; want 3 and the container's env", code, out)
	}
	if out, code := kubectl(t, c, "hello through stdin\n", "exec", "-i", target, "--", "cat"); code != 0 || out != "hello through stdin\n" {
		t.Errorf("kubectl exec -i: exit %d, output %q", code, out)
	}
	// A terminal: its size is what the client said.
	if got := execTTY(t, c, target, []string{"sh", "-c", "stty size"}, 33, 101); !strings.Contains(got, "33 101") {
		t.Errorf("exec -t: stty size printed %q, want 33 101", got)
	}

	// The kubelet API answers only whom the API server authorises: no
	// client certificate is 401, a node's own certificate (its user may
	// not proxy to nodes) is 403; kubectl's requests above came through
	// the API server's kubelet client certificate.
	api := nodes[running[target].Spec.NodeName]
	for _, tc := range []struct {
		cert string
		want int
	}{{"", http.StatusUnauthorized}, {"node-stockade-2", http.StatusForbidden}} {
		if got := kubeletGet(t, c, api.listen, "/containerLogs/default/"+target+"/main", tc.cert); got != tc.want {
			t.Errorf("kubelet API with certificate %q: status %d, want %d", tc.cert, got, tc.want)
		}
	}

	// kubectl logs -f follows a running process to its end: the process
	// writes a line, waits for a file that a kubectl exec makes once the
	// follow has printed that line, then writes another and ends.
	lp := sandboxPod("logs", corev1.RestartPolicyNever, "sh", "-c", `echo line 1; while [ ! -e go ]; do sleep 0.1; done; echo line 2`)
	if _, err := cs.CoreV1().Pods("default").Create(ctx, lp, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPods(t, cs, 2*time.Minute, []string{"logs"}, "running", podRunning)
	followed := followLogs(t, c, "logs", "line 1\n", func() {
		if out, code := kubectl(t, c, "", "exec", "logs", "--", "touch", "go"); code != 0 {
			t.Errorf("kubectl exec touch: exit %d: %s", code, out)
		}
	})
	if followed != "line 1\nline 2\n" {
		t.Errorf("kubectl logs -f printed %q, want both lines and its end", followed)
	}
	done := waitPods(t, cs, time.Minute, []string{"logs"}, "succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	if st := done["logs"].Status.ContainerStatuses[0].State.Terminated; st == nil || st.ExitCode != 0 || st.Reason != "Completed" {
		t.Errorf("the logs pod's container: %+v, want terminated 0 Completed", done["logs"].Status.ContainerStatuses[0].State)
	}
	if out, code := kubectl(t, c, "", "logs", "--previous", "logs"); code == 0 || !strings.Contains(out, "no previous process") {
		t.Errorf("kubectl logs --previous of a container never restarted: exit %d, %q", code, out)
	}
	if out, code := kubectl(t, c, "", "logs", "--tail=2", target); code != 0 || !strings.HasPrefix(out, "tick ") || strings.Count(out, "\n") != 2 {
		t.Errorf("kubectl logs --tail=2: exit %d, output %q", code, out)
	}

	// kubectl attach -i: the client's input reaches the container's
	// process, its output comes back.
	ap := sandboxPod("attach", corev1.RestartPolicyNever, "sh", "-c", `read line; echo "got $line"`)
	ap.Spec.Containers[0].Stdin = true
	if _, err := cs.CoreV1().Pods("default").Create(ctx, ap, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPods(t, cs, 2*time.Minute, []string{"attach"}, "running", podRunning)
	if out, code := kubectl(t, c, "through attach\n", "attach", "-i", "attach"); code != 0 || !strings.Contains(out, "got through attach") {
		t.Errorf("kubectl attach -i: exit %d, output %q", code, out)
	}

	// An unsupported pod is refused in its status, naming the field.
	bad := sandboxPod("unsupported", corev1.RestartPolicyNever, "sleep", "100")
	bad.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80}}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, bad, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	refused := waitPods(t, cs, time.Minute, []string{"unsupported"}, "refused", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if p := refused["unsupported"]; p.Status.Reason != "Unsupported" || !strings.Contains(p.Status.Message, "ports") {
		t.Errorf("unsupported pod: reason %q message %q", p.Status.Reason, p.Status.Message)
	}

	// Kill -9 the node with the most pods mid-run.
	victim := names[0]
	for _, name := range names {
		if len(perNode[name]) > len(perNode[victim]) {
			victim = name
		}
	}
	vpods := perNode[victim]
	slices.Sort(vpods)
	before := map[string]string{}
	for _, name := range vpods {
		before[name] = running[name].Status.ContainerStatuses[0].ContainerID
	}
	// One of its pods asks to be evicted 2 s after its node is
	// unreachable (Kubernetes' own eviction: the taint manager deletes it
	// once the lease expires and the node is tainted).
	evicted := vpods[1]
	// First: a taint is judged by the first toleration that matches it.
	patch := `[{"op":"add","path":"/spec/tolerations/0","value":{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":2}}]`
	if _, err := cs.CoreV1().Pods("default").Patch(ctx, evicted, types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	nodes[victim].kill9(t)
	killedAt := time.Now()
	// A pod of it deleted while it is down stays Terminating (nobody
	// confirms) until the node is back.
	gone := vpods[0]
	if err := cs.CoreV1().Pods("default").Delete(ctx, gone, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for nodeReady(cs, victim) == corev1.ConditionTrue {
		if time.Now().After(deadline) {
			t.Fatalf("node %s still Ready 90 s after it was killed", victim)
		}
		time.Sleep(500 * time.Millisecond)
	}
	notReadyAfter := time.Since(killedAt)
	t.Logf("node %s NotReady %v after kill -9", victim, notReadyAfter.Round(time.Second))
	if p, err := cs.CoreV1().Pods("default").Get(ctx, gone, metav1.GetOptions{}); err != nil || p.DeletionTimestamp == nil {
		t.Fatalf("pod %s should be Terminating while its node is down: %v", gone, err)
	}

	deadline = time.Now().Add(time.Minute)
	for {
		p, err := cs.CoreV1().Pods("default").Get(ctx, evicted, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.DeletionTimestamp != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s (tolerating an unreachable node for 2 s) was not evicted a minute after its node went NotReady", evicted)
		}
		time.Sleep(250 * time.Millisecond)
	}

	nodes[victim].start(t)
	survivors := vpods[2:]
	back := waitPods(t, cs, 2*time.Minute, survivors, "running after the node's return", podRunning)
	for _, name := range survivors {
		cs0 := back[name].Status.ContainerStatuses[0]
		if cs0.ContainerID != before[name] || cs0.RestartCount != 0 {
			t.Errorf("pod %s after the node's return: container %s (restarts %d), want %s: a process was lost or restarted", name, cs0.ContainerID, cs0.RestartCount, before[name])
		}
	}
	if out, code := kubectl(t, c, "", "exec", survivors[0], "--", "echo", "re-adopted"); code != 0 || out != "re-adopted\n" {
		t.Errorf("exec after re-adoption: exit %d, output %q", code, out)
	}
	waitGone(t, cs, []string{gone, evicted}, 2*time.Minute)
	// The deleted and evicted pods' sandboxes are gone from Docker: the
	// victim's containers belong to exactly its survivors' sandboxes.
	ownedBy := func(n *kubeNode) int {
		count, err := dockertest.Owned(ctx, cli, n.owner)
		if err != nil {
			t.Fatal(err)
		}
		return count
	}
	bound, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + victim})
	if err != nil {
		t.Fatal(err)
	}
	var withSandbox []string // the victim's pods but a refused one (it has no sandbox)
	for _, p := range bound.Items {
		if p.Status.Reason != "Unsupported" {
			withSandbox = append(withSandbox, p.Name)
		}
	}
	if got := sandboxesOwned(t, cli, nodes[victim].owner); len(got) != len(withSandbox) {
		t.Errorf("node %s's containers belong to %d sandboxes %v; its pods are %d (%v): a deleted pod's sandbox was left\n%s",
			victim, len(got), got, len(withSandbox), withSandbox, nodes[victim].tail())
	}

	// Everything deleted: no pod left, nothing any node owns left.
	all := append(slices.Clone(podNames), "logs", "attach", "unsupported", "untolerated")
	for _, name := range all {
		if err := cs.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !strings.Contains(err.Error(), "not found") {
			t.Fatal(err)
		}
	}
	waitGone(t, cs, all, 3*time.Minute)
	for _, name := range names {
		if got := ownedBy(nodes[name]); got != 0 {
			t.Errorf("node %s still owns %d Docker resources after every pod was deleted", name, got)
		}
	}

	slices.Sort(toRunning)
	p50, p99 := testkit.Percentile(toRunning, 0.5), testkit.Percentile(toRunning, 0.99)
	t.Logf("%d pods: scheduled and Running in %v (%.1f pods/s); time to Running p50 %v p99 %v", pods, wall.Round(time.Millisecond), float64(pods)/wall.Seconds(), p50.Round(time.Millisecond), p99.Round(time.Millisecond))
	if os.Getenv("STOCKADE_CLUSTER_FIGURES") != "" {
		figures(t, pods, wall, toRunning)
	}
}

// sandboxesOwned lists the sandboxes (their label) of owner's containers.
func sandboxesOwned(t *testing.T, cli *dockerclient.Client, owner string) []string {
	t.Helper()
	cs, err := cli.ContainerList(context.Background(), container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", dockertest.OwnerLabel+"="+owner))})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range cs {
		if id := c.Labels[dockerio.LabelSandbox]; id != "" && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// watchRunning records, for each pod, the time from its create to the
// first status that says Running (from a watch, so no poll interval is in
// the figure).
func watchRunning(t *testing.T, cs *kubernetes.Clientset, names []string, created map[string]time.Time, limit time.Duration) []time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	w, err := cs.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{LabelSelector: "app=stockade-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var out []time.Duration
	for len(want) > 0 {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch ended with %d pods not Running", len(want))
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || !want[p.Name] || !podRunning(p) {
				continue
			}
			delete(want, p.Name)
			out = append(out, time.Since(created[p.Name]))
		case <-ctx.Done():
			var left []string
			for n := range want {
				left = append(left, n)
			}
			t.Fatalf("pods not Running in %v: %v", limit, left)
		}
	}
	return out
}

func waitGone(t *testing.T, cs *kubernetes.Clientset, names []string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		var left []string
		for _, n := range names {
			if _, err := cs.CoreV1().Pods("default").Get(context.Background(), n, metav1.GetOptions{}); err == nil {
				left = append(left, n)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pods not deleted in %v: %v", limit, left)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// kubeletGet asks a node's kubelet API for path, with the client
// certificate c.Dir/NAME.crt (none if ""), and returns the HTTP status.
func kubeletGet(t *testing.T, c *kubecluster.Cluster, addr, path, cert string) int {
	t.Helper()
	code, _ := kubeletRead(t, c, addr, path, cert)
	return code
}

// kubeletRead is a GET of a node's kubelet API with a client certificate
// of the cluster's CA (cert names its files in the cluster's directory;
// "": none): the status and the body.
func kubeletRead(t *testing.T, c *kubecluster.Cluster, addr, path, cert string) (int, string) {
	t.Helper()
	cfg := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} //nolint:gosec // the node's serving certificate is self-signed here; the client side is what is tested
	if cert != "" {
		kp, err := tls.LoadX509KeyPair(filepath.Join(c.Dir, cert+".crt"), filepath.Join(c.Dir, cert+".key"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{kp}
	}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	resp, err := hc.Get("https://" + addr + path)
	if err != nil {
		t.Fatalf("kubelet API %s: %v", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		t.Fatalf("kubelet API %s: %v", path, err)
	}
	return resp.StatusCode, string(body)
}

// followLogs runs kubectl logs -f on pod, calls then once its output holds
// first, and returns what it printed by the time it exited.
func followLogs(t *testing.T, c *kubecluster.Cluster, pod, first string, then func()) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := c.Kubectl(ctx, "logs", "-f", pod)
	var out testkit.LockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for !strings.Contains(out.String(), first) {
		select {
		case err := <-exited:
			t.Fatalf("kubectl logs -f ended (%v) before printing %q: %q", err, first, out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	select {
	case err := <-exited:
		t.Fatalf("kubectl logs -f ended (%v) while its process ran: %q", err, out.String())
	default:
	}
	then()
	if err := <-exited; err != nil {
		t.Errorf("kubectl logs -f: %v: %q", err, out.String())
	}
	return out.String()
}

// kubectl runs kubectl as admin and returns its combined output and exit
// code.
func kubectl(t *testing.T, c *kubecluster.Cluster, stdin string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := c.Kubectl(ctx, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("kubectl %v: %v", args, err)
	}
	return out.String(), 0
}

// fixedSize is a terminal that has one size.
type fixedSize struct {
	once sync.Once
	size remotecommand.TerminalSize
}

func (f *fixedSize) Next() *remotecommand.TerminalSize {
	var s *remotecommand.TerminalSize
	f.once.Do(func() { s = &f.size })
	return s // nil after the first: no more resizes
}

// execTTY runs argv in the pod on a terminal of rows×cols through the API
// server's exec (as kubectl exec -t does) and returns its output.
func execTTY(t *testing.T, c *kubecluster.Cluster, pod string, argv []string, rows, cols uint16) string {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Admin)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "main", Command: argv, Stdin: true, Stdout: true, TTY: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	pr, pw := io.Pipe()
	defer func() { _ = pw.Close() }()
	if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: pr, Stdout: &out, Tty: true, TerminalSizeQueue: &fixedSize{size: remotecommand.TerminalSize{Width: cols, Height: rows}}}); err != nil {
		t.Errorf("exec -t: %v (output %q)", err, out.String())
	}
	return out.String()
}

// figures compares the cluster's time to Running with the same sandboxes
// made through one `stockade serve` (each a create and its first process
// running, all at once, as the pods were), and prints both.
func figures(t *testing.T, pods int, wall time.Duration, toRunning []time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e := testkit.NewCLI(t)
	srv := e.Serve(t, ctx)
	defer func() { _ = srv.Stop(t, syscall.SIGTERM) }()
	c, err := client.Dial(srv.Sock)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	var mu sync.Mutex
	var served []time.Duration
	var servedWall time.Duration // from the first create to the last first process running
	var wg sync.WaitGroup
	startAll := time.Now()
	for range pods {
		wg.Go(func() {
			t0 := time.Now()
			sb, err := c.CreateSandbox(ctx, spec.Sandbox{Image: "stockade/toolbox:dev", Lifetime: spec.Kept})
			if err != nil {
				t.Errorf("create through serve: %v", err)
				return
			}
			defer func() { _ = sb.Remove(context.Background()) }() // measured before; the test's cleanup is the backstop
			p, err := sb.Start(ctx, spec.Process{Argv: []string{"sleep", "1"}, Stdout: spec.Discard, Stderr: spec.Discard})
			if err != nil {
				t.Errorf("start through serve: %v", err)
				return
			}
			d, since := time.Since(t0), time.Since(startAll)
			mu.Lock()
			served = append(served, d)
			servedWall = max(servedWall, since)
			mu.Unlock()
			_, _ = p.Wait(ctx) // the figure is taken; its end is not measured
		})
	}
	wg.Wait()
	slices.Sort(served)
	w := bufio.NewWriter(os.Stdout)
	defer func() { _ = w.Flush() }()
	_, _ = fmt.Fprintf(w, "\n== figures: %d sandboxes, 3 stockade nodes on one Docker daemon, 2 cores ==\n", pods)
	_, _ = fmt.Fprintf(w, "kubernetes:     all %d pods Running %v after the first create = %.2f pods/s scheduled and started; create to Running p50 %v p99 %v\n",
		pods, wall.Round(time.Millisecond), float64(pods)/wall.Seconds(), testkit.Percentile(toRunning, 0.5).Round(time.Millisecond), testkit.Percentile(toRunning, 0.99).Round(time.Millisecond))
	_, _ = fmt.Fprintf(w, "stockade serve: all %d sandboxes' first process running %v after the first create = %.2f /s; create to running p50 %v p99 %v\n",
		len(served), servedWall.Round(time.Millisecond), float64(len(served))/servedWall.Seconds(), testkit.Percentile(served, 0.5).Round(time.Millisecond), testkit.Percentile(served, 0.99).Round(time.Millisecond))
	if p := testkit.Percentile(served, 0.5); p > 0 {
		_, _ = fmt.Fprintf(w, "kubernetes / serve: p50 %.2f×, p99 %.2f×\n", float64(testkit.Percentile(toRunning, 0.5))/float64(p), float64(testkit.Percentile(toRunning, 0.99))/float64(testkit.Percentile(served, 0.99)))
	}
}
