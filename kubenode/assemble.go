package kubenode

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"path"
	goruntime "runtime"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/node"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/stockade/stockade/spec"
)

// assembled is a node's parts, put together here rather than by
// virtual-kubelet's nodeutil.NewNode, which lists and watches every secret,
// config map and service of the cluster (its env resolution reads them from
// informers) and keeps the node Ready whatever its runtime can do. Here the
// only informer is the one on this node's pods; env is read one reference
// at a time (env.go); the node's status comes from nodeHealth.
type assembled struct {
	prov    *Provider
	health  *nodeHealth
	nc      *node.NodeController
	pc      *node.PodController
	pods    informers.SharedInformerFactory
	events  record.EventBroadcaster
	client  kubernetes.Interface
	handler http.Handler
	name    string
	listen  string
	workers int
}

func assemble(_ context.Context, cfg Config, client kubernetes.Interface, authn nodeutil.Auth, port int32) (*assembled, error) {
	log := cfg.Logger.With("node", cfg.Name)
	pods := informers.NewSharedInformerFactoryWithOptions(client, time.Minute, nodeutil.PodInformerFilter(cfg.Name))
	podInformer := pods.Core().V1().Pods()
	prov := newProvider(cfg.Runtime, cfg.Name, cfg.Address, cfg.MaxPods, podInformer.Lister(), log)
	prov.env = apiEnvSource{client: client}

	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: cfg.Name, Labels: map[string]string{}}}
	if err := describeNode(n, cfg, port); err != nil {
		return nil, err
	}
	health := newNodeHealth(n, cfg.Runtime.Doctor, cfg.StateDir)
	n, _ = health.check(context.Background())
	nc, err := node.NewNodeController(health, n, client.CoreV1().Nodes(),
		node.WithNodeEnableLeaseV1(nodeutil.NodeLeaseV1Client(client), node.DefaultLeaseDuration))
	if err != nil {
		return nil, spec.Wrap(spec.CodeInternal, "kubenode", err, "node %s: its node controller", cfg.Name)
	}

	events := record.NewBroadcaster()
	// The pod controller takes secret, config map and service informers
	// for the env resolution it is told to skip (SkipDownwardAPIResolution:
	// env.go does it). They come from a factory that is never started, so
	// they make no request.
	unstarted := informers.NewSharedInformerFactory(client, 0)
	pc, err := node.NewPodController(node.PodControllerConfig{
		PodClient:                 client.CoreV1(),
		EventRecorder:             events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: path.Join(cfg.Name, "pod-controller")}),
		Provider:                  prov,
		PodInformer:               podInformer,
		SecretInformer:            unstarted.Core().V1().Secrets(),
		ConfigMapInformer:         unstarted.Core().V1().ConfigMaps(),
		ServiceInformer:           unstarted.Core().V1().Services(),
		SkipDownwardAPIResolution: true,
	})
	if err != nil {
		return nil, spec.Wrap(spec.CodeInternal, "kubenode", err, "node %s: its pod controller", cfg.Name)
	}

	mux := http.NewServeMux()
	mux.Handle("/", api.PodHandler(api.PodHandlerConfig{
		RunInContainer:    prov.RunInContainer,
		AttachToContainer: prov.AttachToContainer,
		GetContainerLogs:  prov.GetContainerLogs,
		GetPods:           prov.GetPods,
		GetPodsFromKubernetes: func(context.Context) ([]*corev1.Pod, error) {
			return podInformer.Lister().List(labels.Everything())
		},
	}, true))
	return &assembled{
		prov: prov, health: health, nc: nc, pc: pc, pods: pods, events: events, client: client,
		handler: nodeutil.WithAuth(streamsNeedCreate(authn), mux),
		name:    cfg.Name, listen: cfg.Listen, workers: max(4, goruntime.NumCPU()),
	}, nil
}

// run serves the kubelet API, then runs the pod controller and, once it is
// ready, the node controller (which registers the node and keeps its
// lease); ready is called when both are. It returns when ctx ends or a
// controller fails.
func (a *assembled) run(ctx context.Context, tlsCfg *tls.Config, ready func()) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a.events.StartRecordingToSink(&corev1client.EventSinkImpl{Interface: a.client.CoreV1().Events(corev1.NamespaceAll)})
	defer a.events.Shutdown()

	l, err := tls.Listen("tcp", a.listen, tlsCfg)
	if err != nil {
		return spec.Wrap(spec.CodeInvalidArgument, "kubenode", err, "the kubelet API's listener on %s", a.listen)
	}
	srv := &http.Server{Handler: a.handler, TLSConfig: tlsCfg, ReadHeaderTimeout: 30 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() { _ = srv.Serve(l) }() // ends with Close below
	defer func() { _ = srv.Close() }()

	a.pods.Start(ctx.Done())
	go func() { _ = a.pc.Run(ctx, a.workers) }() // its error is pc.Err
	defer func() {
		cancel()
		<-a.pc.Done()
	}()
	if up, err := started(ctx, a.pc.Ready(), a.pc.Done(), a.pc.Err); !up {
		return err
	}
	go func() { _ = a.nc.Run(ctx) }() // its error is nc.Err
	defer func() {
		cancel()
		<-a.nc.Done()
	}()
	if up, err := started(ctx, a.nc.Ready(), a.nc.Done(), a.nc.Err); !up {
		return err
	}
	ready()
	go advertisePools(ctx, a.client, a.name, a.prov.rt.Pools, a.prov.log.Warn)
	select {
	case <-ctx.Done():
		return nil
	case <-a.nc.Done():
		return a.nc.Err()
	case <-a.pc.Done():
		return a.pc.Err()
	}
}

// started waits for a controller to be ready; false when ctx ended first
// (no error) or the controller stopped (its error).
func started(ctx context.Context, ready, done <-chan struct{}, errOf func() error) (bool, error) {
	select {
	case <-ctx.Done():
		return false, nil
	case <-ready:
		return true, nil
	case <-done:
		return false, errOf()
	}
}
