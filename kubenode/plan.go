package kubenode

import (
	"fmt"
	"math"
	"path"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/stockade/stockade/spec"
)

// The sandbox labels that tie a sandbox to its pod. They are journaled with
// the sandbox, so a node that restarts finds its pods' sandboxes in its own
// journal (never by name, never another node's).
const (
	LabelNamespace = "k8s.namespace"
	LabelPod       = "k8s.pod"
	LabelUID       = "k8s.uid"
	LabelContainer = "k8s.container"
)

// ContainerLogTail is how much of a container's latest output `kubectl
// logs` has, as the kubelet's containerLogMaxSize.
const ContainerLogTail = 10 << 20

// ContainerEnv marks the processes a node starts for a pod's container (its
// value is the container's name), so the journal tells them from `kubectl
// exec` processes after a restart. The workload sees it.
const ContainerEnv = "STOCKADE_CONTAINER"

// TaintKey is the node's taint: only pods that tolerate it (sandbox pods)
// are scheduled to a stockade node.
const TaintKey = "stockade.io/sandbox"

// Annotations a pod may carry to ask for what a container spec cannot say.
const (
	// AnnotationPids is the sandbox's task limit (an integer).
	AnnotationPids = "stockade.io/pids"
	// AnnotationNoChanges turns off the per-process workspace change
	// tracking ("true").
	AnnotationNoChanges = "stockade.io/no-changes"
)

// Plan is what a pod becomes on a stockade node: a sandbox and the
// container's process.
type Plan struct {
	Container string
	Sandbox   spec.Sandbox
	Process   spec.Process
	Restart   corev1.RestartPolicy
	// TokenVolume is the service-account token volume the API server
	// injected; it is not mounted (a sandbox never holds API
	// credentials), and the pod's status says so.
	TokenVolume string
	// Grace is the pod's terminationGracePeriodSeconds (nil: the API
	// server's default, 30 s, is always set): the container's process is
	// sent TERM at the pod's deletion and KILL once it has passed.
	Grace time.Duration
}

// Refusal lists every part of a pod a stockade node cannot run as asked.
// It is a spec.Error of code unsupported (see PlanPod).
type Refusal struct{ Problems []string }

func (r *Refusal) Error() string {
	return "unsupported pod: " + strings.Join(r.Problems, "; ")
}

// PlanPod maps a pod onto a sandbox and a process, or refuses it naming
// every field it cannot honour. Supported: one container with an explicit
// command (the image's entrypoint is not read), args, env with values
// (references are resolved before this), workingDir under /workspace,
// stdin, tty, cpu and memory limits, imagePullPolicy IfNotPresent or Never
// (there is no pull), the restart policies, activeDeadlineSeconds (the
// sandbox's TTL), a security context no looser than the sandbox's, and the
// service-account token volume the API server adds (not mounted).
// Everything else that would change what runs is refused.
func PlanPod(pod *corev1.Pod) (Plan, error) {
	var bad []string
	add := func(format string, a ...any) { bad = append(bad, fmt.Sprintf(format, a...)) }
	ps := pod.Spec
	pl := Plan{Restart: ps.RestartPolicy}
	if pl.Restart == "" {
		pl.Restart = corev1.RestartPolicyAlways
	}

	switch {
	case len(ps.Containers) != 1:
		add("spec.containers: exactly one container is supported, the pod has %d", len(ps.Containers))
	}
	if len(ps.InitContainers) > 0 {
		add("spec.initContainers: not supported")
	}
	if len(ps.EphemeralContainers) > 0 {
		add("spec.ephemeralContainers: not supported (use kubectl exec)")
	}
	if ps.HostNetwork || ps.HostPID || ps.HostIPC {
		add("spec.hostNetwork/hostPID/hostIPC: a sandbox shares nothing with the host")
	}
	if ps.ShareProcessNamespace != nil && *ps.ShareProcessNamespace {
		add("spec.shareProcessNamespace: not supported")
	}
	if sc := ps.SecurityContext; sc != nil {
		if sc.RunAsUser != nil || sc.RunAsGroup != nil || len(sc.SupplementalGroups) > 0 || sc.FSGroup != nil || len(sc.Sysctls) > 0 || sc.SELinuxOptions != nil || sc.AppArmorProfile != nil || sc.WindowsOptions != nil {
			add("spec.securityContext: only runAsNonRoot and seccompProfile RuntimeDefault are supported (a sandbox runs as its own unprivileged user)")
		}
		if sc.RunAsNonRoot != nil && !*sc.RunAsNonRoot {
			add("spec.securityContext.runAsNonRoot: false is not supported")
		}
		if p := sc.SeccompProfile; p != nil && p.Type != corev1.SeccompProfileTypeRuntimeDefault {
			add("spec.securityContext.seccompProfile: only RuntimeDefault (Docker's profile) is supported")
		}
	}
	if ps.RuntimeClassName != nil {
		add("spec.runtimeClassName: not supported")
	}
	if len(ps.HostAliases) > 0 {
		add("spec.hostAliases: not supported")
	}
	if len(ps.ResourceClaims) > 0 {
		add("spec.resourceClaims: not supported")
	}
	if ps.Overhead != nil {
		add("spec.overhead: not supported")
	}
	if ps.Resources != nil {
		add("spec.resources (pod-level): not supported; set the container's")
	}
	if ps.Hostname != "" || ps.Subdomain != "" || ps.SetHostnameAsFQDN != nil && *ps.SetHostnameAsFQDN || ps.HostnameOverride != nil {
		add("spec.hostname/subdomain/hostnameOverride: not supported (a sandbox's host name is its own)")
	}
	if len(ps.ImagePullSecrets) > 0 {
		// A node that never pulls cannot check that the pod holds the
		// credentials an image was pulled with: refused rather than let
		// any pod run any image cached on the host under a secret's name.
		add("spec.imagePullSecrets: not supported (a stockade node never pulls, so it cannot check a pod's right to a private image)")
	}
	if g := ps.TerminationGracePeriodSeconds; g != nil {
		pl.Grace = time.Duration(min(max(*g, 0), int64(maxGrace/time.Second))) * time.Second
	}
	if ps.DNSConfig != nil || ps.DNSPolicy != "" && ps.DNSPolicy != corev1.DNSClusterFirst {
		add("spec.dnsPolicy/dnsConfig: only the default (ClusterFirst) is accepted, and a sandbox has no cluster DNS (its network is none)")
	}
	if len(ps.ReadinessGates) > 0 {
		add("spec.readinessGates: not supported")
	}
	if ps.OS != nil && ps.OS.Name != corev1.Linux {
		add("spec.os: a sandbox runs Linux")
	}
	if ps.HostUsers != nil {
		add("spec.hostUsers: not supported (a sandbox's user is its own)")
	}
	if sc := ps.SecurityContext; sc != nil && (sc.SupplementalGroupsPolicy != nil || sc.FSGroupChangePolicy != nil || sc.SELinuxChangePolicy != nil) {
		add("spec.securityContext: supplementalGroupsPolicy, fsGroupChangePolicy and seLinuxChangePolicy are not supported")
	}
	if ps.ActiveDeadlineSeconds != nil {
		pl.Sandbox.TTL = time.Duration(*ps.ActiveDeadlineSeconds) * time.Second
	}
	tokenMount := ""
	for _, v := range ps.Volumes {
		if isTokenVolume(v) && tokenMount == "" {
			tokenMount = v.Name
			continue
		}
		add("spec.volumes[%s]: volumes are not supported (a sandbox has its own /workspace)", v.Name)
	}
	pl.TokenVolume = tokenMount

	if len(ps.Containers) == 1 {
		planContainer(&pl, ps.Containers[0], tokenMount, add)
	}
	planAnnotations(&pl, pod.Annotations, add)

	pl.Sandbox.Lifetime = spec.Kept
	pl.Sandbox.Labels = map[string]string{
		LabelNamespace: pod.Namespace,
		LabelPod:       pod.Name,
		LabelUID:       string(pod.UID),
		LabelContainer: pl.Container,
	}
	// The container's env and workingDir are the sandbox's, so `kubectl
	// exec` processes have them too (as a container's do); only the
	// container's own process carries the marker.
	pl.Process.Env = []string{ContainerEnv + "=" + pl.Container}
	pl.Process.Stdout, pl.Process.Stderr = spec.Discard, spec.Discard
	// A container's logs never kill it: they rotate, the recording
	// keeping its first bytes and its last ContainerLogTail (the
	// kubelet's containerLogMaxSize).
	pl.Process.OutputQuota = spec.NoOutputQuota
	pl.Process.Record = spec.Record{Tail: ContainerLogTail}
	if len(bad) == 0 {
		if err := pl.Process.Validate(); err != nil {
			add("spec.containers[%s]: %v", pl.Container, err)
		}
		if err := (spec.Process{Argv: []string{"true"}, Env: pl.Sandbox.Env, Dir: pl.Sandbox.Dir, Stdout: spec.Discard, Stderr: spec.Discard}).Validate(); err != nil {
			add("spec.containers[%s]: %v", pl.Container, err)
		}
	}
	if len(bad) > 0 {
		return pl, spec.Wrap(spec.CodeUnsupported, "kubenode", &Refusal{Problems: bad}, "pod %s/%s", pod.Namespace, pod.Name)
	}
	return pl, nil
}

func planContainer(pl *Plan, c corev1.Container, tokenMount string, add func(string, ...any)) {
	pl.Container = c.Name
	at := "spec.containers[" + c.Name + "]"
	pl.Sandbox.Image = c.Image
	if c.Image == "" {
		add("%s.image: empty", at)
	}
	if c.ImagePullPolicy == corev1.PullAlways {
		add("%s.imagePullPolicy: Always is not supported (a stockade node never pulls: use IfNotPresent or Never with an image the node's engine has)", at)
	}
	if len(c.Command) == 0 {
		add("%s.command: required (a stockade node does not run the image's entrypoint)", at)
	}
	vars := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			vars[e.Name] = e.Value
		}
	}
	for _, a := range append(append([]string(nil), c.Command...), c.Args...) {
		pl.Process.Argv = append(pl.Process.Argv, expand(a, vars))
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			add("%s.env[%s]: an unresolved valueFrom", at, e.Name)
			continue
		}
		if e.Name == ContainerEnv {
			add("%s.env[%s]: reserved", at, e.Name)
			continue
		}
		pl.Sandbox.Env = append(pl.Sandbox.Env, e.Name+"="+e.Value)
	}
	if len(c.EnvFrom) > 0 {
		add("%s.envFrom: unresolved", at)
	}
	if c.WorkingDir != "" {
		if !strings.HasPrefix(path.Clean(c.WorkingDir)+"/", "/workspace/") {
			add("%s.workingDir: %q is outside /workspace", at, c.WorkingDir)
		}
		pl.Sandbox.Dir = c.WorkingDir
	}
	if len(c.Ports) > 0 {
		add("%s.ports: a sandbox serves no ports", at)
	}
	for _, m := range c.VolumeMounts {
		if m.Name == tokenMount && tokenMount != "" {
			continue
		}
		add("%s.volumeMounts[%s]: volumes are not supported", at, m.Name)
	}
	if len(c.VolumeDevices) > 0 {
		add("%s.volumeDevices: not supported", at)
	}
	if c.LivenessProbe != nil || c.ReadinessProbe != nil || c.StartupProbe != nil {
		add("%s: probes are not supported (the pod is ready while its process runs)", at)
	}
	if c.Lifecycle != nil {
		add("%s.lifecycle: hooks are not supported", at)
	}
	if c.StdinOnce {
		add("%s.stdinOnce: not supported", at)
	}
	if c.RestartPolicy != nil || len(c.RestartPolicyRules) > 0 {
		add("%s.restartPolicy: per-container restart policies are not supported", at)
	}
	if c.TerminationMessagePath != "" && c.TerminationMessagePath != corev1.TerminationMessagePathDefault {
		add("%s.terminationMessagePath: not supported", at)
	}
	if c.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError {
		add("%s.terminationMessagePolicy: FallbackToLogsOnError is not supported", at)
	}
	pl.Process.Stdin = c.Stdin
	pl.Process.TTY = c.TTY
	if sc := c.SecurityContext; sc != nil {
		if sc.Privileged != nil && *sc.Privileged {
			add("%s.securityContext.privileged: a sandbox is never privileged", at)
		}
		if sc.AllowPrivilegeEscalation != nil && *sc.AllowPrivilegeEscalation {
			add("%s.securityContext.allowPrivilegeEscalation: a sandbox has no-new-privileges", at)
		}
		if sc.Capabilities != nil && len(sc.Capabilities.Add) > 0 {
			add("%s.securityContext.capabilities.add: a sandbox has no capabilities", at)
		}
		if sc.RunAsUser != nil || sc.RunAsGroup != nil || sc.SELinuxOptions != nil || sc.WindowsOptions != nil || sc.AppArmorProfile != nil || sc.ProcMount != nil {
			add("%s.securityContext: runAsUser, runAsGroup, SELinux, AppArmor and procMount are not supported", at)
		}
		if sc.RunAsNonRoot != nil && !*sc.RunAsNonRoot {
			add("%s.securityContext.runAsNonRoot: false is not supported", at)
		}
		if sc.ReadOnlyRootFilesystem != nil && !*sc.ReadOnlyRootFilesystem {
			add("%s.securityContext.readOnlyRootFilesystem: false is not supported (the root filesystem is read-only)", at)
		}
		if p := sc.SeccompProfile; p != nil && p.Type != corev1.SeccompProfileTypeRuntimeDefault {
			add("%s.securityContext.seccompProfile: only RuntimeDefault is supported", at)
		}
	}
	for name := range c.Resources.Limits {
		if name != corev1.ResourceCPU && name != corev1.ResourceMemory {
			add("%s.resources.limits[%s]: only cpu and memory are supported", at, name)
		}
	}
	for name := range c.Resources.Requests {
		if name != corev1.ResourceCPU && name != corev1.ResourceMemory {
			add("%s.resources.requests[%s]: only cpu and memory are supported", at, name)
		}
	}
	if len(c.Resources.Claims) > 0 {
		add("%s.resources.claims: not supported", at)
	}
	if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		pl.Sandbox.Policy.CPUs = float64(q.MilliValue()) / 1000
		if pl.Sandbox.Policy.CPUs <= 0 {
			add("%s.resources.limits.cpu: must be positive", at)
		}
	} else if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok && float64(q.MilliValue())/1000 > spec.DefaultCPUs {
		// No limit: the sandbox's default bound, but never below what
		// the scheduler reserved for it.
		pl.Sandbox.Policy.CPUs = float64(q.MilliValue()) / 1000
	}
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		pl.Sandbox.Policy.MemoryBytes = quantityBytes(q)
		if pl.Sandbox.Policy.MemoryBytes <= 0 {
			add("%s.resources.limits.memory: must be positive", at)
		}
	} else if q, ok := c.Resources.Requests[corev1.ResourceMemory]; ok && quantityBytes(q) > spec.DefaultMemoryBytes {
		pl.Sandbox.Policy.MemoryBytes = quantityBytes(q)
	}
}

func planAnnotations(pl *Plan, ann map[string]string, add func(string, ...any)) {
	if v, ok := ann[AnnotationPids]; ok {
		var n int64
		if _, err := fmt.Sscan(v, &n); err != nil || n <= 0 || fmt.Sprint(n) != v {
			add("metadata.annotations[%s]: %q is not a positive integer", AnnotationPids, v)
		}
		pl.Sandbox.Policy.Pids = n
	}
	if v, ok := ann[AnnotationNoChanges]; ok {
		switch v {
		case "true":
			pl.Process.NoChanges = true
		case "false":
		default:
			add("metadata.annotations[%s]: %q is not true or false", AnnotationNoChanges, v)
		}
	}
}

// expand does what a kubelet does to a container's command and args:
// $(NAME) becomes the container's variable NAME when it has one (else it
// stays as written), and $$ is a literal $.
func expand(in string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(in); i++ {
		if in[i] != '$' || i+1 >= len(in) {
			b.WriteByte(in[i])
			continue
		}
		switch in[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(in[i+2:], ')')
			if end < 0 {
				b.WriteByte('$')
				continue
			}
			name := in[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(in[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

func quantityBytes(q resource.Quantity) int64 {
	v, ok := q.AsInt64()
	if !ok {
		f := q.AsApproximateFloat64()
		if f > math.MaxInt64 {
			return math.MaxInt64
		}
		return int64(f)
	}
	return v
}

// isTokenVolume: the projected volume the API server's ServiceAccount
// admission adds (kube-api-access-*): a token, the cluster's CA and the
// namespace, nothing else.
func isTokenVolume(v corev1.Volume) bool {
	p := v.Projected
	if p == nil || !strings.HasPrefix(v.Name, "kube-api-access-") {
		return false
	}
	token := false
	for _, s := range p.Sources {
		switch {
		case s.ServiceAccountToken != nil:
			token = true
		case s.ConfigMap != nil && s.ConfigMap.Name == "kube-root-ca.crt":
		case s.DownwardAPI != nil:
		default:
			return false
		}
	}
	return token
}
