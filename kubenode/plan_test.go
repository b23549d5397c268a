package kubenode

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stockade/stockade/spec"
)

func basePod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u-1"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "main", Image: "stockade/toolbox:dev", Command: []string{"sh", "-c"}, Args: []string{"echo hi"},
				TerminationMessagePath: corev1.TerminationMessagePathDefault, TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				ImagePullPolicy: corev1.PullIfNotPresent,
			}},
		},
	}
}

func tokenVolume() corev1.Volume {
	return corev1.Volume{Name: "kube-api-access-abcde", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
		{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}}},
		{DownwardAPI: &corev1.DownwardAPIProjection{}},
	}}}}
}

func TestPlanPod(t *testing.T) {
	yes, no := true, false
	deadline := int64(90)
	cases := []struct {
		name  string
		edit  func(*corev1.Pod)
		check func(*testing.T, Plan)
		// refused, when set, is a field the refusal must name.
		refused string
	}{
		{name: "logs rotate, no output quota", check: func(t *testing.T, pl Plan) {
			if pl.Process.OutputQuota != spec.NoOutputQuota || pl.Process.Record.Tail != ContainerLogTail {
				t.Errorf("quota %d record %+v", pl.Process.OutputQuota, pl.Process.Record)
			}
		}},
		{name: "requests without limits", edit: func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3"), corev1.ResourceMemory: resource.MustParse("2Gi")}
		}, check: func(t *testing.T, pl Plan) {
			if pl.Sandbox.Policy.CPUs != 3 || pl.Sandbox.Policy.MemoryBytes != 2<<30 {
				t.Errorf("a container asking for 3 CPUs and 2Gi without limits got %g CPUs and %d bytes", pl.Sandbox.Policy.CPUs, pl.Sandbox.Policy.MemoryBytes)
			}
		}},
		{name: "small requests keep the defaults", edit: func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
		}, check: func(t *testing.T, pl Plan) {
			if pl.Sandbox.Policy.CPUs != 0 {
				t.Errorf("cpus %g, want the default (0)", pl.Sandbox.Policy.CPUs)
			}
		}},
		{name: "termination grace", edit: func(p *corev1.Pod) {
			g := int64(3)
			p.Spec.TerminationGracePeriodSeconds = &g
		}, check: func(t *testing.T, pl Plan) {
			if pl.Grace.Seconds() != 3 {
				t.Errorf("grace %v", pl.Grace)
			}
		}},
		{name: "image pull secrets", edit: func(p *corev1.Pod) {
			p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "regcred"}}
		}, refused: "spec.imagePullSecrets"},
		{name: "hostname override", edit: func(p *corev1.Pod) {
			h := "other"
			p.Spec.HostnameOverride = &h
		}, refused: "hostnameOverride"},
		{name: "minimal", check: func(t *testing.T, pl Plan) {
			if got := strings.Join(pl.Process.Argv, "|"); got != "sh|-c|echo hi" {
				t.Errorf("argv %q", got)
			}
			if pl.Restart != corev1.RestartPolicyAlways || pl.Sandbox.Lifetime != spec.Kept {
				t.Errorf("restart %q lifetime %q", pl.Restart, pl.Sandbox.Lifetime)
			}
			if pl.Sandbox.Labels[LabelUID] != "u-1" || pl.Sandbox.Labels[LabelPod] != "p" || pl.Sandbox.Labels[LabelNamespace] != "ns" {
				t.Errorf("labels %v", pl.Sandbox.Labels)
			}
			if len(pl.Process.Env) != 1 || pl.Process.Env[0] != ContainerEnv+"=main" {
				t.Errorf("env %v lacks the container marker", pl.Process.Env)
			}
		}},
		{name: "resources, env, dir, tty, deadline", edit: func(p *corev1.Pod) {
			c := &p.Spec.Containers[0]
			c.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("128Mi")}
			c.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
			c.Env = []corev1.EnvVar{{Name: "A", Value: "1"}}
			c.WorkingDir = "/workspace/work/sub"
			c.TTY, c.Stdin = true, true
			p.Spec.ActiveDeadlineSeconds = &deadline
			p.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
			p.Annotations = map[string]string{AnnotationPids: "64", AnnotationNoChanges: "true"}
		}, check: func(t *testing.T, pl Plan) {
			if pl.Sandbox.Policy.CPUs != 0.5 || pl.Sandbox.Policy.MemoryBytes != 128<<20 || pl.Sandbox.Policy.Pids != 64 {
				t.Errorf("policy %+v", pl.Sandbox.Policy)
			}
			if pl.Sandbox.Env[0] != "A=1" || pl.Sandbox.Dir != "/workspace/work/sub" || !pl.Process.TTY || !pl.Process.Stdin || !pl.Process.NoChanges {
				t.Errorf("process %+v", pl.Process)
			}
			if pl.Sandbox.TTL.Seconds() != 90 || pl.Restart != corev1.RestartPolicyOnFailure {
				t.Errorf("ttl %v restart %v", pl.Sandbox.TTL, pl.Restart)
			}
		}},
		{name: "token volume accepted, not mounted", edit: func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{tokenVolume()}
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "kube-api-access-abcde", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}}
		}, check: func(t *testing.T, pl Plan) {
			if pl.TokenVolume != "kube-api-access-abcde" {
				t.Errorf("token volume %q", pl.TokenVolume)
			}
		}},
		{name: "a safe security context", edit: func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: &yes, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: &no, Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
		}},
		{name: "$(VAR) expansion", edit: func(p *corev1.Pod) {
			c := &p.Spec.Containers[0]
			c.Env = []corev1.EnvVar{{Name: "WHO", Value: "world"}}
			c.Command = []string{"echo", "hello $(WHO)", "$$(WHO)", "$(NOPE)", "$$", "a$"}
			c.Args = nil
		}, check: func(t *testing.T, pl Plan) {
			if got := strings.Join(pl.Process.Argv, "|"); got != "echo|hello world|$(WHO)|$(NOPE)|$|a$" {
				t.Errorf("expanded argv %q", got)
			}
		}},
		{name: "hostname", edit: func(p *corev1.Pod) { p.Spec.Hostname = "h" }, refused: "hostname"},
		{name: "dns config", edit: func(p *corev1.Pod) { p.Spec.DNSConfig = &corev1.PodDNSConfig{} }, refused: "dnsConfig"},
		{name: "readiness gates", edit: func(p *corev1.Pod) {
			p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "x"}}
		}, refused: "readinessGates"},
		{name: "two containers", edit: func(p *corev1.Pod) { p.Spec.Containers = append(p.Spec.Containers, p.Spec.Containers[0]) }, refused: "exactly one container"},
		{name: "init container", edit: func(p *corev1.Pod) { p.Spec.InitContainers = []corev1.Container{{Name: "i"}} }, refused: "initContainers"},
		{name: "no command", edit: func(p *corev1.Pod) { p.Spec.Containers[0].Command = nil }, refused: "command: required"},
		{name: "pull always", edit: func(p *corev1.Pod) { p.Spec.Containers[0].ImagePullPolicy = corev1.PullAlways }, refused: "imagePullPolicy"},
		{name: "ports", edit: func(p *corev1.Pod) { p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80}} }, refused: "ports"},
		{name: "a volume", edit: func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		}, refused: "volumes[data]"},
		{name: "host network", edit: func(p *corev1.Pod) { p.Spec.HostNetwork = true }, refused: "hostNetwork"},
		{name: "privileged", edit: func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: &yes}
		}, refused: "privileged"},
		{name: "run as user", edit: func(p *corev1.Pod) {
			uid := int64(0)
			p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &uid}
		}, refused: "securityContext"},
		{name: "probe", edit: func(p *corev1.Pod) { p.Spec.Containers[0].LivenessProbe = &corev1.Probe{} }, refused: "probes"},
		{name: "gpu", edit: func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
		}, refused: "nvidia.com/gpu"},
		{name: "workdir outside", edit: func(p *corev1.Pod) { p.Spec.Containers[0].WorkingDir = "/etc" }, refused: "outside /workspace"},
		{name: "unresolved env", edit: func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{}}}
		}, refused: "valueFrom"},
		{name: "reserved env", edit: func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: ContainerEnv, Value: "other"}}
		}, refused: "reserved"},
		{name: "bad pids annotation", edit: func(p *corev1.Pod) { p.Annotations = map[string]string{AnnotationPids: "lots"} }, refused: AnnotationPids},
		{name: "every problem named", edit: func(p *corev1.Pod) {
			p.Spec.HostPID = true
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80}}
		}, refused: "hostNetwork/hostPID/hostIPC: a sandbox shares nothing with the host; spec.containers[main].ports"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := basePod()
			if tc.edit != nil {
				tc.edit(pod)
			}
			pl, err := PlanPod(pod)
			if tc.refused != "" {
				var r *Refusal
				if !spec.IsCode(err, spec.CodeUnsupported) || !errors.As(err, &r) || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("PlanPod: %v; want unsupported naming %q", err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatalf("PlanPod: %v", err)
			}
			if tc.check != nil {
				tc.check(t, pl)
			}
		})
	}
}

// FuzzPlanPod: any pod the API server could hand a node (decoded from
// JSON) is planned or refused, never a panic, and a plan is one the runtime
// accepts.
func FuzzPlanPod(f *testing.F) {
	for _, p := range []*corev1.Pod{basePod(), func() *corev1.Pod {
		p := basePod()
		p.Spec.Volumes = []corev1.Volume{tokenVolume()}
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1e3")}
		return p
	}()} {
		b, err := json.Marshal(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"spec":{"containers":[{"name":"c","image":"i","command":["x"],"workingDir":"/workspace/../etc"}]}}`))
	f.Add([]byte(`{"spec":{"containers":[{"name":"c","image":"i","command":["x"],"resources":{"limits":{"cpu":"-1"}}}]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var pod corev1.Pod
		if json.Unmarshal(b, &pod) != nil {
			return
		}
		pl, err := PlanPod(&pod)
		if err != nil {
			if !spec.IsCode(err, spec.CodeUnsupported) {
				t.Fatalf("a refusal of code %s: %v", spec.CodeOf(err), err)
			}
			return
		}
		if err := pl.Process.Validate(); err != nil {
			t.Fatalf("a plan whose process the runtime refuses: %v", err)
		}
		if pl.Sandbox.Image == "" || len(pl.Process.Argv) == 0 {
			t.Fatalf("a plan with no image or argv: %+v", pl)
		}
	})
}

// An in-place resize and an ephemeral container arrive as updates; a
// running sandbox takes neither, and the pod says so.
func TestUnappliedUpdates(t *testing.T) {
	old := basePod()
	resized := old.DeepCopy()
	resized.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
	debugged := old.DeepCopy()
	debugged.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger", Image: "busybox"}}}
	for _, c := range []struct {
		cur  *corev1.Pod
		want string
	}{{resized, "in-place resize"}, {debugged, "kubectl debug"}} {
		got := unapplied(old, c.cur)
		if len(got) != 1 || !strings.Contains(got[0], c.want) {
			t.Errorf("unapplied %q, want one naming %q", got, c.want)
		}
	}
	if got := unapplied(old, old.DeepCopy()); len(got) != 0 {
		t.Errorf("an unchanged pod: %q", got)
	}
}
