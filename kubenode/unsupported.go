package kubenode

import (
	"context"
	"io"

	dto "github.com/prometheus/client_model/go"
	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// The kubelet API's remaining endpoints, refused by name: a sandbox serves
// no ports (its network is none or an egress allowlist), and the runtime's
// figures are served by `stockade serve`'s metrics, not the kubelet's
// summary API.

// GetStatsSummary is not served: see the package's metrics.
func (p *Provider) GetStatsSummary(context.Context) (*statsv1alpha1.Summary, error) {
	return nil, errdefs.InvalidInput("a stockade node serves no stats summary (its runtime's metrics are stockade's own)")
}

// GetMetricsResource is not served, as GetStatsSummary.
func (p *Provider) GetMetricsResource(context.Context) ([]*dto.MetricFamily, error) {
	return nil, errdefs.InvalidInput("a stockade node serves no resource metrics (its runtime's metrics are stockade's own)")
}

// PortForward is refused: a sandbox listens on no port anyone can reach.
func (p *Provider) PortForward(context.Context, string, string, int32, io.ReadWriteCloser) error {
	return errdefs.InvalidInput("port-forward is not supported: a sandbox's network admits no inbound connection")
}
