package kubenode

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/stockade/stockade/spec"
)

// fakeEnvSource holds secrets and config maps by namespace/name and counts
// what was read.
type fakeEnvSource struct {
	secrets    map[string]map[string][]byte
	configMaps map[string]map[string]string
	forbidden  bool
	reads      []string
}

func (f *fakeEnvSource) object(_ context.Context, kind, ns, name string) (map[string]string, error) {
	if kind == kindSecret {
		f.reads = append(f.reads, "secret "+ns+"/"+name)
		if f.forbidden {
			return nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, name, fmt.Errorf("no relationship found"))
		}
		if d, ok := f.secrets[ns+"/"+name]; ok {
			out := map[string]string{}
			for k, v := range d {
				out[k] = string(v)
			}
			return out, nil
		}
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
	}
	f.reads = append(f.reads, "configmap "+ns+"/"+name)
	if d, ok := f.configMaps[ns+"/"+name]; ok {
		return d, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name)
}

func envPod(env []corev1.EnvVar, from []corev1.EnvFromSource) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u-1", Labels: map[string]string{"app": "a"}, Annotations: map[string]string{"note": "n"}},
		Spec: corev1.PodSpec{NodeName: "node-1", ServiceAccountName: "sa", Containers: []corev1.Container{{
			Name: "main", Env: env, EnvFrom: from,
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi"), corev1.ResourceCPU: resource.MustParse("1500m")}},
		}}},
		Status: corev1.PodStatus{HostIP: "10.1.2.3"},
	}
}

func yes() *bool { t := true; return &t }

func TestResolveEnv(t *testing.T) {
	src := func() *fakeEnvSource {
		return &fakeEnvSource{
			secrets:    map[string]map[string][]byte{"ns/creds": {"token": []byte("s3cret"), "user": []byte("ann")}},
			configMaps: map[string]map[string]string{"ns/cfg": {"MODE": "fast", "LEVEL": "3", "not a name": "x"}},
		}
	}
	secretRef := func(name, key string, optional *bool) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key, Optional: optional}}
	}
	cases := []struct {
		name  string
		env   []corev1.EnvVar
		from  []corev1.EnvFromSource
		want  []string // NAME=value, in order
		code  spec.Code
		reads []string
		// secret, when set, is the variables from secrets, by name: their
		// refs.
		secret secretRefs
	}{
		{name: "plain values and references to earlier ones",
			env:  []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "$(A)-2 $$(A)"}},
			want: []string{"A=1", "B=1-2 $(A)"}},
		{name: "a secret's key",
			env:    []corev1.EnvVar{{Name: "TOKEN", ValueFrom: secretRef("creds", "token", nil)}},
			want:   []string{"TOKEN=s3cret"},
			reads:  []string{"secret ns/creds"},
			secret: secretRefs{"TOKEN": "secret ns/creds key token"}},
		{name: "a value built from a secret's is a secret too",
			env:    []corev1.EnvVar{{Name: "TOKEN", ValueFrom: secretRef("creds", "token", nil)}, {Name: "AUTH", Value: "Bearer $(TOKEN)"}, {Name: "PLAIN", Value: "x"}},
			want:   []string{"TOKEN=s3cret", "AUTH=Bearer s3cret", "PLAIN=x"},
			secret: secretRefs{"TOKEN": "secret ns/creds key token", "AUTH": "built from secret ns/creds key token"}},
		{name: "a missing secret",
			env:  []corev1.EnvVar{{Name: "TOKEN", ValueFrom: secretRef("gone", "token", nil)}},
			code: spec.CodeNotFound},
		{name: "a missing key",
			env:  []corev1.EnvVar{{Name: "TOKEN", ValueFrom: secretRef("creds", "nokey", nil)}},
			code: spec.CodeNotFound},
		{name: "an optional missing secret and key leave the variable unset",
			env:  []corev1.EnvVar{{Name: "A", ValueFrom: secretRef("gone", "token", yes())}, {Name: "B", ValueFrom: secretRef("creds", "nokey", yes())}},
			want: nil},
		{name: "envFrom a config map with a prefix, bad keys skipped, env overriding",
			from: []corev1.EnvFromSource{{Prefix: "X_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
			env:  []corev1.EnvVar{{Name: "X_MODE", Value: "slow"}},
			want: []string{"X_LEVEL=3", "X_MODE=slow"}},
		{name: "envFrom a secret",
			from:   []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}}}},
			want:   []string{"token=s3cret", "user=ann"},
			secret: secretRefs{"token": "secret ns/creds key token", "user": "secret ns/creds key user"}},
		{name: "envFrom an optional missing config map",
			from: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "none"}, Optional: yes()}}},
			want: nil},
		{name: "the downward API",
			env: []corev1.EnvVar{
				{Name: "NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
				{Name: "NS", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
				{Name: "APP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}}},
				{Name: "NOTE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['note']"}}},
				{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
				{Name: "HOST", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}},
				{Name: "MEM", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}},
				{Name: "CPU", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu"}}},
			},
			want: []string{"NAME=p", "NS=ns", "APP=a", "NOTE=n", "NODE=node-1", "HOST=10.1.2.3", "MEM=256", "CPU=2"}},
		{name: "a field this node does not know",
			env:  []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nothing"}}}},
			code: spec.CodeUnsupported},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := src()
			pod := envPod(c.env, c.from)
			before := pod.DeepCopy()
			got, refs, err := resolveEnv(context.Background(), s, pod)
			if c.code != "" {
				if !spec.IsCode(err, c.code) {
					t.Fatalf("err %v, want %s", err, c.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var vars []string
			for _, e := range got.Spec.Containers[0].Env {
				if e.ValueFrom != nil {
					t.Fatalf("%s still has a valueFrom", e.Name)
				}
				vars = append(vars, e.Name+"="+e.Value)
			}
			if !slices.Equal(vars, c.want) {
				t.Fatalf("env %q, want %q", vars, c.want)
			}
			if got.Spec.Containers[0].EnvFrom != nil {
				t.Fatal("envFrom left in the resolved pod")
			}
			if c.secret != nil && !maps.Equal(refs, c.secret) {
				t.Fatalf("secret refs %v, want %v", refs, c.secret)
			}
			if c.reads != nil && !slices.Equal(s.reads, c.reads) {
				t.Fatalf("read %q, want %q", s.reads, c.reads)
			}
			// The pod the node reports keeps its references.
			if fmt.Sprint(pod.Spec) != fmt.Sprint(before.Spec) {
				t.Fatal("resolveEnv changed the pod it was given")
			}
		})
	}
}

// A refusal by the Node authorizer (it learns of a binding a moment after
// the node does) is an error the pod controller retries, naming what was
// read.
func TestResolveEnvForbidden(t *testing.T) {
	s := &fakeEnvSource{forbidden: true}
	_, _, err := resolveEnv(context.Background(), s, envPod([]corev1.EnvVar{{Name: "T", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "token"}}}}, nil))
	if err == nil || !strings.Contains(err.Error(), "secret ns/creds") || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("err %v, want a refusal naming secret ns/creds", err)
	}
}

// A secret's value in the command or args would be journaled with the
// argv: refused, saying how to read it instead.
func TestResolveEnvSecretInArgv(t *testing.T) {
	s := &fakeEnvSource{secrets: map[string]map[string][]byte{"ns/creds": {"token": []byte("s3cret")}}}
	pod := envPod([]corev1.EnvVar{{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "token"}}}}, nil)
	pod.Spec.Containers[0].Args = []string{"--token=$(TOKEN)"}
	if _, _, err := resolveEnv(context.Background(), s, pod); !spec.IsCode(err, spec.CodeUnsupported) || !strings.Contains(err.Error(), "$TOKEN") {
		t.Fatalf("%v, want unsupported saying to read $TOKEN", err)
	}
}

// A limit left unset reads as what the sandbox gets: the default, or the
// request where it is larger (as the plan bounds the sandbox).
func TestResourceFieldWithoutLimits(t *testing.T) {
	c := corev1.Container{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("3"), corev1.ResourceMemory: resource.MustParse("100Mi")}}}
	for _, tc := range []struct {
		res, div, want string
	}{{"limits.cpu", "1", "3"}, {"limits.memory", "1Mi", "512"}, {"requests.memory", "1Mi", "100"}} {
		got, err := resourceField(c, corev1.ResourceFieldSelector{Resource: tc.res, Divisor: resource.MustParse(tc.div)})
		if err != nil || got != tc.want {
			t.Errorf("%s: %q %v, want %q", tc.res, got, err, tc.want)
		}
	}
}
