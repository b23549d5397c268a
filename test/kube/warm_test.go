package kube

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/stockade/stockade/client"
	"github.com/stockade/stockade/internal/dockertest"
	"github.com/stockade/stockade/kubenode"
	"github.com/stockade/stockade/server"
	"github.com/stockade/stockade/test/testkit"
)

// TestKubeNodeWarmPool: a node's warm pool is offered to pods. The node
// advertises its ready pooled sandboxes as a label the scheduler can use;
// a pod whose sandbox has the pool's key (image, limits) claims one at its
// create, the pool refills; a pod of another key is a cold create. The
// time from pod create to Running is measured for both, one pod at a time
// (`make cluster` prints it).
func TestKubeNodeWarmPool(t *testing.T) {
	cli := dockertest.Client(t)
	dockertest.ImageID(t, cli)
	c, cs := kubeCluster(t, 15*time.Second)
	bin := buildNodeProgram(t)
	ctx := context.Background()
	const size = 2
	label := kubenode.PoolLabelPrefix + "tb"

	n := newKubeNode(t, c, cli, bin, "stockade-w")
	n.args = []string{"--pool", "tb=image=stockade/toolbox:dev,memory=256m,size=" + strconv.Itoa(size)}
	n.start(t)
	waitReady(t, cs, n.name, corev1.ConditionTrue, time.Minute)
	waitLabel(t, cs, n.name, label, strconv.Itoa(size), 2*time.Minute)

	warmPod := func(name string) *corev1.Pod {
		p := sandboxPod(name, corev1.RestartPolicyNever, "sleep", "600") // limits: memory 256Mi, the pool's key
		p.Spec.TopologySpreadConstraints = nil
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
			Weight: 100, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: label, Operator: corev1.NodeSelectorOpGt, Values: []string{"0"}}}},
		}}}}
		return p
	}
	coldPod := func(name string) *corev1.Pod {
		p := warmPod(name)
		p.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = resource.MustParse("300Mi") // no pool has this key
		return p
	}
	var warm, cold []time.Duration
	var names []string
	run := func(p *corev1.Pod) time.Duration {
		t.Helper()
		t0 := time.Now()
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, p.Name)
		d := watchRunning(t, cs, []string{p.Name}, map[string]time.Time{p.Name: t0}, 2*time.Minute)[0]
		return d
	}
	defer func() {
		for _, name := range names {
			_ = cs.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		}
		waitGone(t, cs, names, 2*time.Minute)
	}()
	for i := range size {
		warm = append(warm, run(warmPod(fmt.Sprintf("warm-%d", i))))
		cold = append(cold, run(coldPod(fmt.Sprintf("cold-%d", i))))
		// The pool refills before the next warm pod, as a warm pool's
		// user sees it between claims.
		waitLabel(t, cs, n.name, label, strconv.Itoa(size), 2*time.Minute)
	}

	// The warm pods' sandboxes were claimed from the pool, the cold ones'
	// made for them: as the node's journal says, through its socket.
	rc, err := client.Dial(server.SocketPath(n.journal))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	infos, err := rc.Sandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	claimed := map[string]bool{}
	for _, in := range infos {
		if pod := in.Labels[kubenode.LabelPod]; pod != "" {
			claimed[pod] = in.Pool == "tb" && in.Claimed
		}
	}
	for i := range size {
		if w, c := fmt.Sprintf("warm-%d", i), fmt.Sprintf("cold-%d", i); !claimed[w] || claimed[c] {
			t.Errorf("pod %s claimed from the pool: %v (want true); pod %s: %v (want false)", w, claimed[w], c, claimed[c])
		}
	}
	t.Logf("pod create to Running, one at a time: warm (claimed from the node's pool) %v, cold %v", warm, cold)
	if os.Getenv("STOCKADE_CLUSTER_FIGURES") != "" {
		_, _ = fmt.Printf("\n== figures: pod create to Running on one stockade node, one pod at a time, 2 cores ==\nwarm (claimed from the node's pool): p50 %v  each %v\ncold (a create):                    p50 %v  each %v\n",
			testkit.Percentile(warm, 0.5).Round(time.Millisecond), warm, testkit.Percentile(cold, 0.5).Round(time.Millisecond), cold)
	}
}

// waitLabel waits until the node's label has the value.
func waitLabel(t *testing.T, cs *kubernetes.Clientset, node, key, value string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		n, err := cs.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err == nil && n.Labels[key] == value {
			return
		}
		if time.Now().After(deadline) {
			got := "?"
			if err == nil {
				got = n.Labels[key]
			}
			t.Fatalf("node %s label %s = %q, want %q after %v (%v)", node, key, got, value, limit, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
