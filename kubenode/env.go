package kubenode

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/stockade/stockade/spec"
)

// envSource reads the secrets and config maps a pod's env refers to. A
// node reads them one GET at a time, each one its own pod names: the Node
// authorizer permits exactly that, and nothing of any other pod's (a list or
// a watch of every secret of the cluster is what a kubelet-sized credential
// must not be able to do).
type envSource interface {
	// object is a secret's or a config map's data (kind: kindSecret or
	// kindConfigMap), its values as text.
	object(ctx context.Context, kind, ns, name string) (map[string]string, error)
}

// The kinds an env refers to, as errors and refs name them.
const (
	kindSecret    = "secret"
	kindConfigMap = "config map"
)

// apiEnvSource reads them from the API server.
type apiEnvSource struct{ client kubernetes.Interface }

func (a apiEnvSource) object(ctx context.Context, kind, ns, name string) (map[string]string, error) {
	out := map[string]string{}
	if kind == kindSecret {
		s, err := a.client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		for k, v := range s.Data {
			out[k] = string(v)
		}
		return out, nil
	}
	c, err := a.client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	maps.Copy(out, c.Data)
	for k, v := range c.BinaryData {
		out[k] = string(v)
	}
	return out, nil
}

// read is an object's data; nil, and no error, when an optional one is
// absent.
func read(ctx context.Context, src envSource, kind, ns, name string, optional *bool) (map[string]string, error) {
	data, err := src.object(ctx, kind, ns, name)
	switch {
	case missing(err, optional):
		return nil, nil
	case err != nil:
		return nil, refErr(err, kind, ns, name)
	}
	return data, nil
}

// keyOf is one key of an object; false: an optional reference to
// something absent.
func keyOf(ctx context.Context, src envSource, kind, ns, name, key string, optional *bool) (string, bool, error) {
	data, err := read(ctx, src, kind, ns, name, optional)
	if err != nil || data == nil {
		return "", false, err
	}
	v, ok := data[key]
	switch {
	case ok:
		return v, true, nil
	case optional != nil && *optional:
		return "", false, nil
	}
	return "", false, spec.Errorf(spec.CodeNotFound, "kubenode", "%s %s/%s has no key %q (add it, or mark the reference optional)", kind, ns, name, key)
}

// resolveEnv returns a copy of pod whose containers' env holds values only:
// envFrom and valueFrom (secrets, config maps, the pod's own fields and
// resources) are read and written in, as the kubelet does before a
// container starts. The copy goes to the plan, never back to the pod the
// node reports: a status write, /runningpods/ and the node's logs carry the
// references, not the values. Service links are not made: a sandbox has
// no network to reach a service by. An error names the reference and what
// to do; the pod controller retries the create, so a secret made later is
// picked up.
func resolveEnv(ctx context.Context, src envSource, pod *corev1.Pod) (*corev1.Pod, secretRefs, error) {
	out := pod.DeepCopy()
	refs := secretRefs{}
	for i := range out.Spec.Containers {
		c := &out.Spec.Containers[i]
		env, err := containerEnv(ctx, src, pod, *c, refs)
		if err != nil {
			return nil, nil, spec.Wrap(spec.CodeOf(err), "kubenode", err, "pod %s/%s container %s", pod.Namespace, pod.Name, c.Name)
		}
		c.Env, c.EnvFrom = env, nil
		// $(VAR) in the command or args is expanded into the argv, which
		// is journaled: a secret's value must not go there.
		for _, a := range append(slices.Clone(c.Command), c.Args...) {
			for name := range refs {
				if strings.Contains(a, "$("+name+")") {
					return nil, nil, spec.Errorf(spec.CodeUnsupported, "kubenode", "pod %s/%s container %s: its command or args refer to $(%s), a value from a secret, which the argv would write into the node's journal; read it from the environment in the command instead ($%s in a shell)",
						pod.Namespace, pod.Name, c.Name, name, name)
				}
			}
		}
	}
	return out, refs, nil
}

// secretRefs are the env variables whose values come from a secret (or
// are built from one), by name: what each refers to. The plan gives them
// to the sandbox as secret variables (spec.SecretVar), never written down.
type secretRefs map[string]string

func containerEnv(ctx context.Context, src envSource, pod *corev1.Pod, c corev1.Container, refs secretRefs) ([]corev1.EnvVar, error) {
	var env []corev1.EnvVar
	vars := map[string]string{}
	set := func(name, value, ref string) {
		if i := slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Name == name }); i >= 0 {
			env[i].Value = value
		} else {
			env = append(env, corev1.EnvVar{Name: name, Value: value})
		}
		vars[name] = value
		if ref != "" {
			refs[name] = ref
		} else {
			delete(refs, name)
		}
	}
	for _, from := range c.EnvFrom {
		data, err := envFromData(ctx, src, pod.Namespace, from)
		if err != nil {
			return nil, err
		}
		ref := ""
		if from.SecretRef != nil {
			ref = "secret " + pod.Namespace + "/" + from.SecretRef.Name
		}
		for _, k := range slices.Sorted(maps.Keys(data)) {
			// The kubelet skips a key that is no variable name (and says
			// so in an event); so does the node, silently here and by the
			// plan's validation of what is left.
			if name := from.Prefix + k; spec.ValidEnvName(name) {
				r := ref
				if r != "" {
					r += " key " + k
				}
				set(name, data[k], r)
			}
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			// A value built from a secret's ($(VAR)) is a secret too.
			ref := ""
			for name, r := range refs {
				if strings.Contains(e.Value, "$("+name+")") {
					ref = "built from " + r
					break
				}
			}
			set(e.Name, expand(e.Value, vars), ref)
			continue
		}
		v, ok, err := envValueFrom(ctx, src, pod, c, e)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		if ok {
			ref := ""
			if k := e.ValueFrom.SecretKeyRef; k != nil {
				ref = "secret " + pod.Namespace + "/" + k.Name + " key " + k.Key
			}
			set(e.Name, v, ref)
		}
	}
	return env, nil
}

func envFromData(ctx context.Context, src envSource, ns string, from corev1.EnvFromSource) (map[string]string, error) {
	switch {
	case from.ConfigMapRef != nil:
		return read(ctx, src, kindConfigMap, ns, from.ConfigMapRef.Name, from.ConfigMapRef.Optional)
	case from.SecretRef != nil:
		return read(ctx, src, kindSecret, ns, from.SecretRef.Name, from.SecretRef.Optional)
	}
	return nil, spec.Errorf(spec.CodeUnsupported, "kubenode", "an envFrom with neither configMapRef nor secretRef")
}

// envValueFrom is one valueFrom's value; false: an optional reference to
// something absent (the variable is not set).
func envValueFrom(ctx context.Context, src envSource, pod *corev1.Pod, c corev1.Container, e corev1.EnvVar) (string, bool, error) {
	ns := pod.Namespace
	switch vf := e.ValueFrom; {
	case vf.SecretKeyRef != nil:
		return keyOf(ctx, src, kindSecret, ns, vf.SecretKeyRef.Name, vf.SecretKeyRef.Key, vf.SecretKeyRef.Optional)
	case vf.ConfigMapKeyRef != nil:
		return keyOf(ctx, src, kindConfigMap, ns, vf.ConfigMapKeyRef.Name, vf.ConfigMapKeyRef.Key, vf.ConfigMapKeyRef.Optional)
	case vf.FieldRef != nil:
		v, err := podField(pod, vf.FieldRef.FieldPath)
		return v, err == nil, err
	case vf.ResourceFieldRef != nil:
		v, err := resourceField(c, *vf.ResourceFieldRef)
		return v, err == nil, err
	}
	return "", false, spec.Errorf(spec.CodeUnsupported, "kubenode", "a valueFrom this node does not know")
}

func missing(err error, optional *bool) bool {
	return apierrors.IsNotFound(err) && optional != nil && *optional
}

func refErr(err error, what, ns, name string) error {
	switch {
	case apierrors.IsNotFound(err):
		return spec.Wrap(spec.CodeNotFound, "kubenode", err, "%s %s/%s does not exist (create it, or mark the reference optional)", what, ns, name)
	case apierrors.IsForbidden(err):
		// The Node authorizer learns of a pod's binding a moment after
		// the node does: the create is retried.
		return spec.Wrap(spec.CodeServerGone, "kubenode", err, "reading %s %s/%s was refused to this node (the API server may not yet know the pod is bound here; retried)", what, ns, name)
	}
	return spec.Wrap(spec.CodeServerGone, "kubenode", err, "reading %s %s/%s", what, ns, name)
}

// podField is the downward API's value of a field path.
func podField(pod *corev1.Pod, path string) (string, error) {
	if k, ok := subscript(path, "metadata.labels"); ok {
		return pod.Labels[k], nil
	}
	if k, ok := subscript(path, "metadata.annotations"); ok {
		return pod.Annotations[k], nil
	}
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP", "status.hostIPs":
		return pod.Status.HostIP, nil
	case "status.podIP", "status.podIPs":
		return "", nil // a sandbox has no pod network
	}
	return "", spec.Errorf(spec.CodeUnsupported, "kubenode", "fieldRef %q is not one this node knows", path)
}

// subscript reads path as prefix['key'].
func subscript(path, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(path, prefix+"['")
	if !ok || !strings.HasSuffix(rest, "']") {
		return "", false
	}
	return strings.TrimSuffix(rest, "']"), true
}

// resourceField is a container's resource in the reference's divisor,
// rounded up as the kubelet does; an unset limit is what the sandbox gets
// (plan.go): the default, or the request where it is larger.
func resourceField(c corev1.Container, ref corev1.ResourceFieldSelector) (string, error) {
	var q resource.Quantity
	switch ref.Resource {
	case "limits.cpu":
		q = c.Resources.Limits[corev1.ResourceCPU]
		if q.IsZero() {
			q = *resource.NewMilliQuantity(int64(spec.DefaultCPUs*1000), resource.DecimalSI)
			if r := c.Resources.Requests[corev1.ResourceCPU]; r.Cmp(q) > 0 {
				q = r
			}
		}
	case "limits.memory":
		q = c.Resources.Limits[corev1.ResourceMemory]
		if q.IsZero() {
			q = *resource.NewQuantity(spec.DefaultMemoryBytes, resource.BinarySI)
			if r := c.Resources.Requests[corev1.ResourceMemory]; r.Cmp(q) > 0 {
				q = r
			}
		}
	case "requests.cpu":
		q = c.Resources.Requests[corev1.ResourceCPU]
	case "requests.memory":
		q = c.Resources.Requests[corev1.ResourceMemory]
	default:
		return "", spec.Errorf(spec.CodeUnsupported, "kubenode", "resourceFieldRef %q is not one this node knows", ref.Resource)
	}
	div := ref.Divisor
	if div.IsZero() {
		div = resource.MustParse("1")
	}
	if strings.HasSuffix(ref.Resource, ".cpu") {
		m := (q.MilliValue() + div.MilliValue() - 1) / div.MilliValue()
		return strconv.FormatInt(m, 10), nil
	}
	return strconv.FormatInt((q.Value()+div.Value()-1)/div.Value(), 10), nil
}
