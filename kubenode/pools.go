package kubenode

import (
	"context"
	"encoding/json"
	"maps"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/stockade/stockade/host"
	"github.com/stockade/stockade/spec"
)

// PoolLabelPrefix names a node's label for each of its warm pools; its
// value is how many pooled sandboxes are ready. A pod whose sandbox has a
// pool's key (image and limits) claims one at its create, with no create
// on its critical path; a pod that prefers such a node says so with node
// affinity on the label (operator Gt, value 0).
const PoolLabelPrefix = "pool.stockade.io/"

// poolsEvery is how often the node reads its pools' ready counts.
var poolsEvery = time.Second

// advertisePools keeps the node's pool labels at its pools' ready counts
// until ctx ends: a merge patch of its own Node's labels when a count
// changes (NodeRestriction lets a node set labels outside kubernetes.io on
// itself). A failed patch is tried again at the next reading.
func advertisePools(ctx context.Context, client kubernetes.Interface, node string, pools func(context.Context) ([]host.PoolInfo, error), log func(string, ...any)) {
	var shown map[string]*string
	stale := staleLabels(ctx, client, node) // an earlier run's pools, gone from the flags
	t := time.NewTicker(poolsEvery)
	defer t.Stop()
	for {
		if infos, err := pools(ctx); err == nil && (len(infos) > 0 || len(stale) > 0) {
			want := poolLabels(infos)
			for k := range stale {
				if _, ok := want[k]; !ok {
					want[k] = nil // removed by the merge patch
				}
			}
			if !maps.EqualFunc(want, shown, func(a, b *string) bool { return a == nil && b == nil || a != nil && b != nil && *a == *b }) {
				if err := patchLabels(ctx, client, node, want); err != nil {
					log("advertising the warm pools on the node", "err", err)
				} else {
					shown, stale = want, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// poolLabels are the labels of infos' ready counts.
func poolLabels(infos []host.PoolInfo) map[string]*string {
	out := make(map[string]*string, len(infos))
	for _, p := range infos {
		v := strconv.Itoa(p.Ready)
		out[PoolLabelPrefix+p.Name] = &v
	}
	return out
}

// staleLabels are the node's pool labels as the API server has them now
// (nil when it cannot say: nothing is removed then).
func staleLabels(ctx context.Context, client kubernetes.Interface, node string) map[string]bool {
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := client.CoreV1().Nodes().Get(gctx, node, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	out := map[string]bool{}
	for k := range n.Labels {
		if strings.HasPrefix(k, PoolLabelPrefix) {
			out[k] = true
		}
	}
	return out
}

// PoolLabelName checks that a pool's name makes a valid node label name
// (what PoolLabelPrefix is followed by), so the node can advertise it.
func PoolLabelName(pool string) error {
	if errs := validation.IsQualifiedName(PoolLabelPrefix + pool); len(errs) > 0 {
		return spec.Errorf(spec.CodeInvalidArgument, "kubenode", "pool %q: %s%s is not a label name a node can carry (%s): name it with letters and digits at both ends", pool, PoolLabelPrefix, pool, strings.Join(errs, "; "))
	}
	return nil
}

func patchLabels(ctx context.Context, client kubernetes.Interface, node string, labels map[string]*string) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = client.CoreV1().Nodes().Patch(pctx, node, types.MergePatchType, body, metav1.PatchOptions{})
	return err
}
