// Package kubecluster runs a real Kubernetes control plane on this machine
// for stockade's node tests and `make cluster`: Debian's etcd, and
// kube-apiserver, kube-controller-manager and kube-scheduler built from the
// Go module proxy at one release (tools/kube, `make kube`). Nothing is
// faked: the API server authenticates by client certificate, authorises by
// RBAC, and reaches the nodes' kubelet APIs with its own client certificate.
package kubecluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Binaries are the programs a cluster runs, besides etcd.
var Binaries = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"}

// BinDir is where the control plane's binaries are: $STOCKADE_KUBE_BIN,
// else .build/kube/bin at the module's root (what `make kube` builds).
func BinDir() (string, error) {
	dir := os.Getenv("STOCKADE_KUBE_BIN")
	if dir == "" {
		root, err := moduleRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, ".build", "kube", "bin")
	}
	for _, b := range Binaries {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("kubecluster: %s is missing from %s: run `make kube` (it builds the control plane from the Go module proxy)", b, dir)
		}
	}
	if _, err := exec.LookPath("etcd"); err != nil {
		return "", errors.New("kubecluster: etcd is not installed: apt-get install etcd-server")
	}
	return dir, nil
}

func moduleRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("kubecluster: cannot find the module's root")
	}
	return filepath.Join(filepath.Dir(file), "..", ".."), nil
}

// Cluster is a running control plane.
type Cluster struct {
	Dir       string // its certificates, kubeconfigs, etcd data and logs
	Server    string // the API server's URL
	CA        string // the CA file (it signs every certificate)
	Admin     string // an admin kubeconfig (system:masters)
	AuditLog  string // the API server's audit log: every request of a node, JSON lines
	Bin       string // the binaries' directory (kubectl among them)
	ca        *authority
	pids      []int
	nodeGrace time.Duration
	detach    bool
}

// Options tune a cluster.
type Options struct {
	// NodeGrace is how long a node's lease may go unrenewed before the
	// controller manager marks it NotReady (default 20 s; a
	// virtual-kubelet node renews every 10 s).
	NodeGrace time.Duration
	// Detach lets the processes outlive the program that started them
	// (make cluster-up); otherwise they are killed when it dies, so a
	// test killed by its timeout leaves no control plane behind.
	Detach bool
}

// Start makes the PKI in dir, starts etcd, the API server, the controller
// manager and the scheduler (each in a session of its own, its output in
// dir/NAME.log, its pid in dir/pids) and waits until the API server is
// ready and the node role exists. On error what started is stopped.
func Start(ctx context.Context, dir string, opts Options) (_ *Cluster, err error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	if opts.NodeGrace <= 0 {
		opts.NodeGrace = 20 * time.Second
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir, Bin: bin, nodeGrace: opts.NodeGrace, detach: opts.Detach}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if c.ca, err = newAuthority(dir); err != nil {
		return nil, err
	}
	c.CA = c.ca.path("ca.crt")
	ports, err := freePorts(4)
	if err != nil {
		return nil, err
	}
	etcdClient, etcdPeer, apiPort := ports[0], ports[1], ports[2]
	c.Server = "https://127.0.0.1:" + strconv.Itoa(apiPort)
	srvCrt, srvKey, err := c.ca.issue("apiserver", "kube-apiserver", nil, []string{"127.0.0.1", "localhost", "10.0.0.1", "kubernetes", "kubernetes.default", "kubernetes.default.svc"})
	if err != nil {
		return nil, err
	}
	kcCrt, kcKey, err := c.ca.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil)
	if err != nil {
		return nil, err
	}
	adCrt, adKey, err := c.ca.issue("admin", "admin", []string{"system:masters"}, nil)
	if err != nil {
		return nil, err
	}
	c.Admin = filepath.Join(dir, "admin.kubeconfig")
	if err := kubeconfig(c.Admin, c.Server, c.CA, adCrt, adKey); err != nil {
		return nil, err
	}
	saPub, saKey, err := c.ca.serviceAccountKeys()
	if err != nil {
		return nil, err
	}
	auditPolicy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(auditPolicy, []byte(auditPolicyText), 0o600); err != nil {
		return nil, err
	}
	c.AuditLog = filepath.Join(dir, "audit.log")

	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdClient)
	if err := c.start("etcd", "etcd",
		"--name=stockade-test", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls=http://127.0.0.1:"+strconv.Itoa(etcdPeer),
		"--initial-advertise-peer-urls=http://127.0.0.1:"+strconv.Itoa(etcdPeer),
		"--initial-cluster=stockade-test=http://127.0.0.1:"+strconv.Itoa(etcdPeer),
		"--unsafe-no-fsync", "--quota-backend-bytes=2147483648"); err != nil {
		return nil, err
	}
	if err := c.start("kube-apiserver", filepath.Join(bin, "kube-apiserver"),
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+strconv.Itoa(apiPort),
		"--tls-cert-file="+srvCrt, "--tls-private-key-file="+srvKey,
		"--client-ca-file="+c.CA,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+saPub, "--service-account-signing-key-file="+saKey,
		"--service-cluster-ip-range=10.0.0.0/24",
		// A node is authorised as a kubelet is on a hardened cluster: the
		// Node authorizer (its own node, lease and pods; only the secrets
		// and config maps its pods name) and NodeRestriction (no labels
		// of the kubernetes.io namespace, no other node's objects).
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--audit-policy-file="+auditPolicy, "--audit-log-path="+c.AuditLog, "--audit-log-format=json",
		"--audit-log-maxbackup=1", "--audit-log-maxsize=200",
		"--kubelet-client-certificate="+kcCrt, "--kubelet-client-key="+kcKey,
		"--kubelet-preferred-address-types=InternalIP",
		"--allow-privileged=false",
		"--endpoint-reconciler-type=none", // it refuses a loopback advertise address
		"--profiling=false",
		"--max-requests-inflight=800", "--max-mutating-requests-inflight=400",
		"--cert-dir="+filepath.Join(dir, "apiserver-certs")); err != nil {
		return nil, err
	}
	if err := c.waitReady(ctx, 2*time.Minute); err != nil {
		return nil, err
	}
	if err := c.start("kube-controller-manager", filepath.Join(bin, "kube-controller-manager"),
		"--kubeconfig="+c.Admin, "--authentication-kubeconfig="+c.Admin, "--authorization-kubeconfig="+c.Admin,
		"--service-account-private-key-file="+saKey, "--root-ca-file="+c.CA,
		"--use-service-account-credentials=false", "--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port=0",
		"--node-monitor-period=2s", "--node-monitor-grace-period="+c.nodeGrace.String()); err != nil {
		return nil, err
	}
	if err := c.start("kube-scheduler", filepath.Join(bin, "kube-scheduler"),
		"--kubeconfig="+c.Admin, "--authentication-kubeconfig="+c.Admin, "--authorization-kubeconfig="+c.Admin,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0"); err != nil {
		return nil, err
	}
	return c, nil
}

// auditPolicyText records every request of a node (group system:nodes)
// with its body, so a test can read what a node asked for, what it was
// refused and what it wrote; nothing else is recorded.
const auditPolicyText = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Request
  userGroups: ["system:nodes"]
- level: None
`

// NodeKubeconfig writes a kubeconfig for node name: a client certificate
// for user system:node:NAME in group system:nodes.
func (c *Cluster) NodeKubeconfig(name string) (string, error) {
	crt, key, err := c.ca.issue("node-"+name, "system:node:"+name, []string{"system:nodes"}, nil)
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.Dir, "node-"+name+".kubeconfig")
	return path, kubeconfig(path, c.Server, c.CA, crt, key)
}

// Kubectl runs kubectl as admin.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.Bin, "kubectl"), append([]string{"--kubeconfig", c.Admin}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Admin)
	return cmd
}

// UserCert writes a client certificate for user in groups: name.crt and
// name.key in Dir (RBAC grants it nothing until a test applies a binding).
func (c *Cluster) UserCert(name, user string, groups ...string) (crt, key string, err error) {
	return c.ca.issue(name, user, groups, nil)
}

// Apply applies a manifest as admin, retrying while the API server warms up.
func (c *Cluster) Apply(ctx context.Context, manifest string) error {
	var last error
	for range 30 {
		cmd := c.Kubectl(ctx, "apply", "-f", "-")
		cmd.Stdin = strings.NewReader(manifest)
		out, err := cmd.CombinedOutput()
		if err == nil {
			return nil
		}
		last = fmt.Errorf("kubectl apply: %w: %s", err, out)
		time.Sleep(time.Second)
	}
	return last
}

func (c *Cluster) start(name, path string, args ...string) error {
	logf, err := os.OpenFile(filepath.Join(c.Dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer func() { _ = logf.Close() }() // the child has its own copy
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if !c.detach {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("kubecluster: starting %s: %w", name, err)
	}
	c.pids = append(c.pids, cmd.Process.Pid)
	go func() { _ = cmd.Wait() }() // reaped here; its end shows in its log
	return c.writePids()
}

func (c *Cluster) writePids() error {
	var b strings.Builder
	for _, p := range c.pids {
		fmt.Fprintln(&b, p)
	}
	return os.WriteFile(filepath.Join(c.Dir, "pids"), []byte(b.String()), 0o600)
}

// waitReady polls the API server's /readyz with the admin certificate.
func (c *Cluster) waitReady(ctx context.Context, limit time.Duration) error {
	hc, err := c.httpClient()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(limit)
	var last string
	for time.Now().Before(deadline) {
		if len(c.pids) > 0 && (syscall.Kill(c.pids[len(c.pids)-1], 0) != nil || zombie(c.pids[len(c.pids)-1])) {
			return fmt.Errorf("kubecluster: the API server exited; see %s", filepath.Join(c.Dir, "kube-apiserver.log"))
		}
		resp, err := hc.Get(c.Server + "/readyz")
		if err == nil {
			b := make([]byte, 512)
			n, _ := resp.Body.Read(b)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, b[:n])
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
	return fmt.Errorf("kubecluster: the API server was not ready in %v (last: %s); see %s", limit, last, filepath.Join(c.Dir, "kube-apiserver.log"))
}

func (c *Cluster) httpClient() (*http.Client, error) {
	caPEM, err := os.ReadFile(c.CA)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	cert, err := tls.LoadX509KeyPair(c.ca.path("admin.crt"), c.ca.path("admin.key"))
	if err != nil {
		return nil, err
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}}, nil
}

// Stop kills the control plane's processes (their sessions) and waits for
// them to go.
func (c *Cluster) Stop() {
	StopPids(c.pids)
}

// StopDir stops the control plane whose pids are in dir/pids (what
// `make cluster-down` does).
func StopDir(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "pids"))
	if err != nil {
		return err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			pids = append(pids, n)
		}
	}
	StopPids(pids)
	return nil
}

// StopPids sends TERM to each process's group, then KILL to what is left
// after five seconds.
func StopPids(pids []int) {
	for i := len(pids) - 1; i >= 0; i-- {
		_ = syscall.Kill(-pids[i], syscall.SIGTERM) // gone already is fine
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, p := range pids {
		for time.Now().Before(deadline) && syscall.Kill(p, 0) == nil && !zombie(p) {
			time.Sleep(50 * time.Millisecond)
		}
		_ = syscall.Kill(-p, syscall.SIGKILL) // what did not stop in time
	}
}

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z'
	}
	return false
}

// freePorts returns n ports free on loopback now.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// FreePort returns a port free on loopback now.
func FreePort() (int, error) {
	p, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	return p[0], nil
}
