package kube

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/client"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/internal/kubecluster"
	"github.com/stockade/stockade/kubenode"
	"github.com/stockade/stockade/test/testkit"
)

// kubeCluster starts the control plane for a test (stopped at its end):
// under CI=true a missing binary fails the test, elsewhere it skips saying
// how to build it.
func kubeCluster(t *testing.T, grace time.Duration) (*kubecluster.Cluster, *kubernetes.Clientset) {
	t.Helper()
	if _, err := kubecluster.BinDir(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the Kubernetes control plane is needed: %v", err)
		}
		t.Skipf("the Kubernetes control plane is not built here: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := kubecluster.Start(ctx, filepath.Join(t.TempDir(), "controlplane"), kubecluster.Options{NodeGrace: grace})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Admin)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, cs
}

// buildNodeProgram builds cmd/stockade-node.
func buildNodeProgram(t testing.TB) string {
	t.Helper()
	root, err := dockertest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "stockade-node")
	if out, err := exec.Command("go", "build", "-o", bin, filepath.Join(root, "cmd", "stockade-node")).CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// kubeNode is one `stockade-node` process: a journal of its own (so an
// owner of its own) on the one Docker daemon.
type kubeNode struct {
	name, bin, journal, kubeconfig, listen string

	args []string // more flags, set before start
	env  []string // more environment, set before start

	mu    sync.Mutex
	cmd   *exec.Cmd
	owner string
	logs  *os.File
}

var ownerLine = regexp.MustCompile(`node \S+ ready: journal \S+ \(owner (\S+)\)`)

func newKubeNode(t *testing.T, c *kubecluster.Cluster, cli *client.Client, bin, name string) *kubeNode {
	t.Helper()
	kc, err := c.NodeKubeconfig(name)
	if err != nil {
		t.Fatal(err)
	}
	port, err := kubecluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	logs, err := os.Create(filepath.Join(c.Dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	n := &kubeNode{name: name, bin: bin, journal: filepath.Join(state, "journal.db"), kubeconfig: kc,
		listen: "127.0.0.1:" + strconv.Itoa(port), logs: logs}
	testkit.RemoveJournalOwned(t, cli, n.journal) // registered first: runs after the node is stopped
	t.Cleanup(func() {
		n.stop(t)
		_ = logs.Close()
	})
	return n
}

// start runs the node and waits until it says it is ready.
func (n *kubeNode) start(t *testing.T) {
	t.Helper()
	cmd := exec.Command(n.bin, "--journal", n.journal, "--kubeconfig", n.kubeconfig, "--name", n.name,
		"--listen", n.listen, "--max-pods", "60", "-v")
	cmd.Args = append(cmd.Args, n.args...)
	cmd.Env = append(append(os.Environ(), "STOCKADE_PROFILE="+os.Getenv("STOCKADE_PROFILE")), n.env...)
	// Killed with the test binary (a timeout's panic runs no cleanup).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			_, _ = fmt.Fprintln(n.logs, line) // kept for a failure's report
			if m := ownerLine.FindStringSubmatch(line); m != nil {
				select {
				case ready <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case owner := <-ready:
		n.mu.Lock()
		n.cmd, n.owner = cmd, owner
		n.mu.Unlock()
		go func() {
			err := <-exited
			n.mu.Lock()
			if n.cmd == cmd {
				n.cmd = nil
			}
			n.mu.Unlock()
			_, _ = fmt.Fprintf(n.logs, "-- node exited: %v\n", err)
		}()
	case err := <-exited:
		t.Fatalf("node %s exited before it was ready: %v\n%s", n.name, err, n.tail())
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("node %s was not ready in 2 minutes\n%s", n.name, n.tail())
	}
}

func (n *kubeNode) tail() string {
	b, _ := os.ReadFile(n.logs.Name())
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

// kill9 kills the node without warning.
func (n *kubeNode) kill9(t *testing.T) {
	t.Helper()
	n.mu.Lock()
	cmd := n.cmd
	n.mu.Unlock()
	if cmd == nil {
		t.Fatalf("node %s is not running", n.name)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !n.waitExit(5 * time.Second) {
		t.Fatalf("node %s did not die", n.name)
	}
}

// waitExit waits for the node's process to be reaped.
func (n *kubeNode) waitExit(limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		n.mu.Lock()
		gone := n.cmd == nil
		n.mu.Unlock()
		if gone {
			return true
		}
		time.Sleep(25 * time.Millisecond)
	}
	return false
}

// stop ends the node with SIGTERM (its sandboxes stay: kept).
func (n *kubeNode) stop(t *testing.T) {
	n.mu.Lock()
	cmd := n.cmd
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if n.waitExit(10 * time.Second) {
		return
	}
	_ = cmd.Process.Kill()
	t.Errorf("node %s did not stop on SIGTERM in 10 s\n%s", n.name, n.tail())
}

// sandboxPod is a pod a stockade node runs: it tolerates the node's taint
// and asks for a little CPU and memory (so the scheduler's scoring spreads
// pods over equal nodes).
func sandboxPod(name string, restart corev1.RestartPolicy, argv ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": "stockade-test"}},
		Spec: corev1.PodSpec{
			RestartPolicy: restart,
			Tolerations: []corev1.Toleration{
				{Key: kubenode.TaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
			},
			NodeSelector: map[string]string{"stockade.io/node": "true"},
			// Spread evenly over the nodes, as a user asks it of the
			// scheduler (bare pods get no default spreading).
			TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
				MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.DoNotSchedule,
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "stockade-test"}},
			}},
			Containers: []corev1.Container{{
				Name:    "main",
				Image:   "stockade/toolbox:dev",
				Command: argv,
				Env:     []corev1.EnvVar{{Name: "GREETING", Value: "hello"}},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
				},
			}},
		},
	}
}

// waitPods polls until every named pod satisfies ok, or fails the test
// with what each was.
func waitPods(t *testing.T, cs *kubernetes.Clientset, limit time.Duration, names []string, what string, ok func(*corev1.Pod) bool) map[string]*corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		got := map[string]*corev1.Pod{}
		var notYet []string
		for _, name := range names {
			p, err := cs.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
			if err == nil && ok(p) {
				got[name] = p
				continue
			}
			desc := fmt.Sprint(err)
			if err == nil {
				desc = fmt.Sprintf("%s on %q: %s %s", p.Status.Phase, p.Spec.NodeName, p.Status.Reason, p.Status.Message)
				for _, c := range p.Status.ContainerStatuses {
					desc += fmt.Sprintf(" container %+v", c.State)
				}
			}
			notYet = append(notYet, name+": "+desc)
		}
		if len(notYet) == 0 {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("pods not %s in %v:\n  %s", what, limit, strings.Join(notYet, "\n  "))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func podRunning(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
}

func nodeReady(cs *kubernetes.Clientset, name string) corev1.ConditionStatus {
	n, err := cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return "error: " + corev1.ConditionStatus(err.Error())
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return "none"
}
