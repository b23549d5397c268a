// Package kubenode makes a stockade runtime a Kubernetes node, virtual-kubelet
// style: the host registers as a node with a taint only sandbox pods
// tolerate, the Kubernetes scheduler places pods on it, each pod becomes a
// sandbox and its container a process, pod status is read from the node's
// journal, and `kubectl logs`, `exec` and `attach` reach the node's kubelet
// API on its own TLS port (clients authenticated by certificate, authorised
// by the API server). Each node keeps its own journal, recorder and wardens;
// nothing is shared between nodes but the API server.
//
// It is built on github.com/virtual-kubelet/virtual-kubelet: its node
// controller (registration, status, the lease that says the node is alive),
// its pod controller (the informer on this node's pods, create, update,
// delete, status write-back, the sweep of pods deleted while the node was
// away) and its kubelet API handlers (the SPDY and WebSocket streams of
// exec and attach) are the parts of a kubelet a node needs and the ones
// least worth writing again; this package is the provider that runs pods as
// sandboxes.
package kubenode

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path"
	goruntime "runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	vklog "github.com/virtual-kubelet/virtual-kubelet/log"
	vkslog "github.com/virtual-kubelet/virtual-kubelet/log/slog"
	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/spec"
)

// Config configures a node.
type Config struct {
	// Name is the node's name (default: the host name).
	Name string
	// Kubeconfig is the file with the API server's address and this
	// node's credentials (default $KUBECONFIG).
	Kubeconfig string
	// Listen is the kubelet API's address (default ":10250").
	Listen string
	// Address is the address the API server reaches the node at (its
	// InternalIP; default: the Listen host, else the first non-loopback
	// address of the host).
	Address string
	// TLSCert and TLSKey are the kubelet API's serving certificate; empty:
	// a self-signed one made at start (the API server does not verify a
	// kubelet's serving certificate unless told to).
	TLSCert, TLSKey string
	// ClientCA is the CA file whose certificates the kubelet API accepts
	// (the API server's kubelet client certificate); empty: the CA of the
	// kubeconfig's cluster.
	ClientCA string
	// MaxPods is the node's pod capacity and the runtime's sandbox limit
	// (default 110, the kubelet's).
	MaxPods int
	// Runtime is the node's stockade runtime (its journal, its owner).
	Runtime *stockade.Runtime
	// Logger receives the node's logs (nil: quiet).
	Logger *slog.Logger
	// Ready, if set, is called once the node is registered and serving.
	Ready func()
	// StateDir is the directory of the node's journal: its filesystem's
	// free space is the node's DiskPressure (empty: not checked).
	StateDir string
	// CPUs and Memory (bytes) are the node's capacity; zero: the host's.
	CPUs   float64
	Memory int64
	// ReservedCPUs and ReservedMemory are kept from pods (the kubelet's
	// --system-reserved): allocatable is capacity less them.
	ReservedCPUs   float64
	ReservedMemory int64
}

// DefaultMaxPods is the kubelet's default pod capacity.
const DefaultMaxPods = 110

// Run registers the node and runs it until ctx ends. The runtime's
// sandboxes are left running (kept): the next Run re-adopts them.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Runtime == nil {
		return spec.Errorf(spec.CodeInvalidArgument, "kubenode", "no runtime")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	log := cfg.Logger
	if cfg.Name == "" {
		h, err := os.Hostname()
		if err != nil {
			return spec.Wrap(spec.CodeInvalidArgument, "kubenode", err, "no node name given and the host name is unreadable")
		}
		cfg.Name = strings.ToLower(h)
	}
	if cfg.Listen == "" {
		cfg.Listen = ":10250"
	}
	if cfg.MaxPods <= 0 {
		cfg.MaxPods = DefaultMaxPods
	}
	host, portText, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return spec.Wrap(spec.CodeInvalidArgument, "kubenode", err, "listen address %q", cfg.Listen)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port <= 0 || port > 65535 {
		return spec.Errorf(spec.CodeInvalidArgument, "kubenode", "listen address %q: port must be 1..65535 (a kubelet API needs a fixed port the API server is told)", cfg.Listen)
	}
	if cfg.Address == "" {
		cfg.Address = host
		if cfg.Address == "" || net.ParseIP(cfg.Address).IsUnspecified() {
			cfg.Address = hostAddress()
		}
	}
	restCfg, err := loadKubeconfig(cfg.Kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return spec.Wrap(spec.CodeInvalidArgument, "kubenode", err, "kubeconfig %s", cfg.Kubeconfig)
	}
	tlsCfg, err := servingTLS(cfg, restCfg)
	if err != nil {
		return err
	}
	ctx = vklog.WithLogger(ctx, vkslog.FromSlog(log.With("node", cfg.Name)))

	authn, err := kubeletAuth(client, cfg, restCfg)
	if err != nil {
		return err
	}
	nd, err := assemble(ctx, cfg, client, authn, int32(port)) //nolint:gosec // G109: port was checked to be 1..65535
	if err != nil {
		return err
	}
	defer nd.prov.Close()
	// The journal's pods first: their sandboxes are supervised again
	// before the pod controller asks about them.
	if err := nd.prov.adopt(ctx); err != nil {
		return err
	}
	err = nd.run(ctx, tlsCfg, func() {
		log.Info("node ready", "node", cfg.Name, "listen", cfg.Listen, "address", cfg.Address, "max_pods", cfg.MaxPods)
		if cfg.Ready != nil {
			cfg.Ready()
		}
	})
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return spec.Wrap(spec.CodeServerGone, "kubenode", err, "node %s", cfg.Name)
	}
	return nil
}

// describeNode sets what the node tells the cluster: its labels (only
// those NodeRestriction lets a node set on itself), its taint, capacity and
// allocatable, address, kubelet port and system facts.
func describeNode(n *corev1.Node, cfg Config, port int32) error {
	n.Labels["kubernetes.io/hostname"] = cfg.Name
	n.Labels["kubernetes.io/os"] = goruntime.GOOS
	n.Labels["kubernetes.io/arch"] = goruntime.GOARCH
	n.Labels["stockade.io/node"] = "true"
	n.Spec.Taints = []corev1.Taint{{Key: TaintKey, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	capacity, allocatable, err := resources(cfg)
	if err != nil {
		return err
	}
	n.Status.Capacity, n.Status.Allocatable = capacity, allocatable
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: cfg.Address}, {Type: corev1.NodeHostName, Address: cfg.Name}}
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = port
	n.Status.NodeInfo = corev1.NodeSystemInfo{
		OperatingSystem:         goruntime.GOOS,
		Architecture:            goruntime.GOARCH,
		KubeletVersion:          KubeletVersion,
		ContainerRuntimeVersion: "stockade://" + Version(),
	}
	return nil
}

// CheckResources checks the capacity and reservations configured: what a
// node would advertise, refused before anything is opened when the
// reservations leave nothing.
func (c Config) CheckResources() error {
	if c.MaxPods <= 0 {
		c.MaxPods = DefaultMaxPods
	}
	_, _, err := resources(c)
	return err
}

// resources are the node's capacity (the host's, or what the
// configuration says the node may use) and its allocatable: capacity less
// the reservations, as the kubelet's --system-reserved. In the documented
// DaemonSet layout the host's own kubelet advertises the same CPUs and
// memory: give the stockade node its share (Config.CPUs, Config.Memory) and
// reserve what the host keeps. Ephemeral storage is not advertised: a
// sandbox's /workspace is not bounded per pod on this engine, and a node
// that cannot bound it must not offer it.
func resources(cfg Config) (capacity, allocatable corev1.ResourceList, err error) {
	cpuMilli := int64(goruntime.NumCPU()) * 1000
	if cfg.CPUs > 0 {
		cpuMilli = int64(cfg.CPUs * 1000)
	}
	mem, _ := meminfo("MemTotal:")
	if cfg.Memory > 0 {
		mem = cfg.Memory
	}
	capacity = corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(cpuMilli, resource.DecimalSI),
		corev1.ResourcePods:   *resource.NewQuantity(int64(cfg.MaxPods), resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(mem, resource.BinarySI),
	}
	cpuLeft, memLeft := cpuMilli-int64(cfg.ReservedCPUs*1000), mem-cfg.ReservedMemory
	if cfg.ReservedCPUs < 0 || cfg.ReservedMemory < 0 || cpuLeft <= 0 || memLeft <= 0 {
		return nil, nil, spec.Errorf(spec.CodeInvalidArgument, "kubenode", "reservations of %g CPUs and %d bytes leave nothing of a capacity of %g CPUs and %d bytes (lower --reserved, or raise --cpus/--memory)",
			cfg.ReservedCPUs, cfg.ReservedMemory, float64(cpuMilli)/1000, mem)
	}
	allocatable = corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(cpuLeft, resource.DecimalSI),
		corev1.ResourcePods:   *resource.NewQuantity(int64(cfg.MaxPods), resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(memLeft, resource.BinarySI),
	}
	return capacity, allocatable, nil
}

// KubeletVersion is the kubelet version the node reports: the Kubernetes
// release whose API it was built against.
const KubeletVersion = "v1.37.2-stockade"

// Version is stockade's module version as the binary was built with it
// ("(devel)" from a checkout, the tag from go install …@version).
func Version() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Path == "github.com/stockade/stockade" && bi.Main.Version != "" {
			return bi.Main.Version
		}
		for _, d := range bi.Deps {
			if d.Path == "github.com/stockade/stockade" {
				return d.Version
			}
		}
	}
	return "unknown"
}

func hostAddress() string {
	addrs, err := net.InterfaceAddrs()
	if err == nil {
		for _, a := range addrs {
			if ip, ok := a.(*net.IPNet); ok && !ip.IP.IsLoopback() && ip.IP.To4() != nil {
				return ip.IP.String()
			}
		}
	}
	return "127.0.0.1"
}

func loadKubeconfig(path string) (*rest.Config, error) {
	if path == "" {
		path = os.Getenv("KUBECONFIG")
	}
	if path == "" {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "kubenode", "no kubeconfig: give --kubeconfig or set KUBECONFIG")
	}
	c, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, spec.Wrap(spec.CodeInvalidArgument, "kubenode", err, "kubeconfig %s", path)
	}
	c.QPS, c.Burst = 50, 100 // a node writes a status per pod change
	return c, nil
}

// servingTLS is the kubelet API's TLS: the given certificate or a
// self-signed one, client certificates verified against the client CA when
// one is presented (the API server's), and TLS 1.2 at least.
func servingTLS(cfg Config, rc *rest.Config) (*tls.Config, error) {
	var cert tls.Certificate
	var err error
	if cfg.TLSCert != "" || cfg.TLSKey != "" {
		cert, err = tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return nil, spec.Wrap(spec.CodeInvalidArgument, "kubenode", err, "serving certificate %s / %s", cfg.TLSCert, cfg.TLSKey)
		}
	} else if cert, err = selfSigned(cfg.Name, cfg.Address); err != nil {
		return nil, err
	}
	pool, err := clientCAPool(cfg, rc)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    pool,
		NextProtos:   []string{"http/1.1"},
	}, nil
}

func clientCAPEM(cfg Config, rc *rest.Config) ([]byte, error) {
	if cfg.ClientCA != "" {
		b, err := os.ReadFile(cfg.ClientCA)
		if err != nil {
			return nil, spec.Wrap(spec.CodeInvalidArgument, "kubenode", err, "client CA")
		}
		return b, nil
	}
	if len(rc.CAData) > 0 {
		return rc.CAData, nil
	}
	if rc.CAFile != "" {
		b, err := os.ReadFile(rc.CAFile)
		if err != nil {
			return nil, spec.Wrap(spec.CodeInvalidArgument, "kubenode", err, "the kubeconfig's CA")
		}
		return b, nil
	}
	return nil, spec.Errorf(spec.CodeInvalidArgument, "kubenode", "no client CA: give --client-ca (the CA of the API server's kubelet client certificate) or a kubeconfig with the cluster's CA")
}

func clientCAPool(cfg Config, rc *rest.Config) (*x509.CertPool, error) {
	b, err := clientCAPEM(cfg, rc)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, spec.Errorf(spec.CodeInvalidArgument, "kubenode", "client CA: no PEM certificate in it")
	}
	return pool, nil
}

// streamsNeedCreate authorises exec, attach, port-forward and run as
// `create` on nodes/proxy whatever the HTTP method: a WebSocket stream
// opens with a GET, and taking the verb from the method would let anyone
// with `get nodes/proxy` (a monitoring agent's usual grant) run commands in
// every pod of the node (kubernetes/kubernetes#136550).
func streamsNeedCreate(a nodeutil.Auth) nodeutil.Auth {
	return streamAuth{a}
}

type streamAuth struct{ nodeutil.Auth }

func (s streamAuth) GetRequestAttributes(u user.Info, r *http.Request) authorizer.Attributes {
	attrs := s.Auth.GetRequestAttributes(u, r)
	if !streamPath(r.URL.Path) {
		return attrs
	}
	// Built here whatever the wrapped getter returned: a getter of another
	// type must not carry its own verb through (fail closed).
	return authorizer.AttributesRecord{
		User: u, Verb: "create", Namespace: attrs.GetNamespace(), APIGroup: attrs.GetAPIGroup(), APIVersion: attrs.GetAPIVersion(),
		Resource: "nodes", Subresource: "proxy", Name: attrs.GetName(), ResourceRequest: true, Path: r.URL.Path,
	}
}

// streamPath: a kubelet API path that runs something or opens a stream
// into a pod.
func streamPath(p string) bool {
	p = path.Clean("/" + p)
	for _, prefix := range []string{"/exec/", "/attach/", "/portForward/", "/run/", "/cri/"} {
		if strings.HasPrefix(p+"/", prefix) {
			return true
		}
	}
	return false
}

// kubeletAuth authenticates the kubelet API's callers by client
// certificate (the client CA) or bearer token (a TokenReview), and
// authorises each request by a SubjectAccessReview to the API server, as a
// kubelet does in webhook mode.
func kubeletAuth(client kubernetes.Interface, cfg Config, rc *rest.Config) (nodeutil.Auth, error) {
	b, err := clientCAPEM(cfg, rc)
	if err != nil {
		return nil, err
	}
	ca, err := dynamiccertificates.NewStaticCAContent("client-ca", b)
	if err != nil {
		return nil, spec.Wrap(spec.CodeInvalidArgument, "kubenode", err, "client CA")
	}
	a, err := nodeutil.WebhookAuth(client, cfg.Name, func(c *nodeutil.WebhookAuthConfig) error {
		c.AuthnConfig.ClientCertificateCAContentProvider = ca
		return nil
	})
	if err != nil {
		return nil, spec.Wrap(spec.CodeInternal, "kubenode", err, "kubelet API authentication")
	}
	return a, nil
}

func selfSigned(name, addr string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, spec.Wrap(spec.CodeInternal, "kubenode", err, "serving key")
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().AddDate(1, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{name},
	}
	if ip := net.ParseIP(addr); ip != nil {
		tpl.IPAddresses = []net.IP{ip}
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, spec.Wrap(spec.CodeInternal, "kubenode", err, "serving certificate")
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
