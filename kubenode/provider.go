package kubenode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1listers "k8s.io/client-go/listers/core/v1"

	"github.com/stockade/stockade"
	"github.com/stockade/stockade/lifecycle"
	"github.com/stockade/stockade/spec"
)

// Provider runs a node's pods as sandboxes of one stockade runtime (one
// journal, one Docker endpoint). It keeps no state of its own that the
// journal does not hold: which sandbox is which pod's is in the sandbox's
// journaled labels, which process is the container's is in the process's
// journaled environment, and every status it reports is read from the
// journal.
type Provider struct {
	rt      *stockade.Runtime
	node    string
	hostIP  string
	maxPods int
	log     *slog.Logger
	lister  corev1listers.PodLister
	env     envSource // what pods' env refers to (nil: pods with references fail to plan)

	ctx    context.Context // the provider's life: supervisors end with it
	cancel context.CancelFunc

	mu     sync.Mutex
	pods   map[string]*podRun // by namespace/name
	notify func(*corev1.Pod)
}

// restartBackoff bounds the wait before a container's process is started
// again (doubling from the first, as the kubelet's crash-loop back-off).
var restartBackoff = [2]time.Duration{time.Second, 30 * time.Second}

func newProvider(rt *stockade.Runtime, node, hostIP string, maxPods int, lister corev1listers.PodLister, log *slog.Logger) *Provider {
	ctx, cancel := context.WithCancel(context.Background())
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Provider{rt: rt, node: node, hostIP: hostIP, maxPods: maxPods, lister: lister, log: log,
		ctx: ctx, cancel: cancel, pods: map[string]*podRun{}}
}

func podKey(ns, name string) string { return ns + "/" + name }

// adopt finds the pods' sandboxes the journal holds (recovery has re-adopted
// them) and supervises each again: its container's process is waited for
// where it runs, and the restart policy applies when it ends. A sandbox
// whose pod no longer exists is removed by the pod controller's sweep
// (GetPods lists it; deleteDanglingPods removes it).
func (p *Provider) adopt(ctx context.Context) error {
	infos, err := p.rt.Sandboxes(ctx)
	if err != nil {
		return err
	}
	for _, in := range infos {
		ns, name, uid := in.Labels[LabelNamespace], in.Labels[LabelPod], in.Labels[LabelUID]
		if name == "" || ns == "" {
			continue // not a pod's: a node's runtime makes only pods' sandboxes, but an operator may have made one
		}
		r := &podRun{p: p, key: podKey(ns, name), ns: ns, name: name, uid: types.UID(uid),
			container: in.Labels[LabelContainer], sandboxID: in.ID, adopted: true, done: make(chan struct{})}
		procs, err := p.containerProcesses(ctx, in.ID)
		if err != nil {
			return err
		}
		if n := len(procs); n > 0 {
			r.procID = procs[n-1]
			r.restarts = int32(n - 1)
			if n > 1 {
				r.prevID = procs[n-2]
			}
		}
		if in.Unreconciled {
			r.failure = fmt.Sprintf("recovery could not reconcile sandbox %s: %s", in.ID, in.Why)
		}
		p.pods[r.key] = r
		p.log.Info("pod re-adopted", "pod", r.key, "sandbox", in.ID, "process", r.procID, "restarts", r.restarts)
		var sctx context.Context
		sctx, r.cancel = context.WithCancel(p.ctx)
		go r.supervise(sctx)
	}
	return nil
}

// containerProcesses lists, oldest first, the processes the node started
// for the sandbox's container (their journaled environment names it).
func (p *Provider) containerProcesses(ctx context.Context, sandboxID string) ([]string, error) {
	hist, err := p.rt.History(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range hist {
		if e.Kind != "process" || e.Type != (lifecycle.ProcessReserved{}).Type() {
			continue
		}
		var r lifecycle.ProcessReserved
		if err := json.Unmarshal(e.Payload, &r); err != nil {
			return nil, spec.Wrap(spec.CodeInternal, "kubenode", err, "process %s's reserved event", e.ID)
		}
		if slices.ContainsFunc(r.Spec.Env, func(v string) bool { return strings.HasPrefix(v, ContainerEnv+"=") }) {
			ids = append(ids, e.ID)
		}
	}
	return ids, nil
}

// CreatePod makes the pod's sandbox and starts its container, or refuses
// the pod: the refusal is the pod's status (phase Failed, reason
// Unsupported, the message naming every field), never an ignored field.
func (p *Provider) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	key := podKey(pod.Namespace, pod.Name)
	p.mu.Lock()
	old := p.pods[key]
	p.mu.Unlock()
	if old != nil {
		if old.uid == pod.UID {
			return nil // already running (a repeated create)
		}
		// The pod was deleted and made again under the same name while
		// this node was away: the old sandbox is the old pod's.
		if err := p.remove(ctx, old); err != nil {
			return err
		}
	}
	// Read before the lock: GETs of the API server. A reference that
	// cannot be read yet leaves the pod waiting (CreateContainerConfigError)
	// while its supervisor reads it again.
	plan, refused, configErr := p.planOf(ctx, pod)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pods[key] != nil {
		return nil
	}
	r := &podRun{p: p, key: key, ns: pod.Namespace, name: pod.Name, uid: pod.UID, pod: pod.DeepCopy(), done: make(chan struct{})}
	r.plan, r.refused, r.configErr, r.container = plan, refused, configErr, plan.Container
	if r.refused == nil && p.maxPods > 0 && p.live() >= p.maxPods {
		r.limited = spec.Errorf(spec.CodeResourceExhausted, "kubenode", "node %s runs %d sandboxes, its limit (--max-pods)", p.node, p.maxPods)
	}
	p.pods[key] = r
	var sctx context.Context
	sctx, r.cancel = context.WithCancel(p.ctx)
	go r.supervise(sctx)
	return nil
}

// planOf reads the references of pod's env (env.go) and plans it: the
// plan is made of the resolved pod (the pod the node reports keeps the
// references), its variables from secrets given to the sandbox as secret
// variables, never in its journaled env. refused: the pod cannot run here;
// configErr: a reference cannot be read yet (the pod waits and it is read
// again).
func (p *Provider) planOf(ctx context.Context, pod *corev1.Pod) (pl Plan, refused, configErr error) {
	resolved, refs := pod, secretRefs(nil)
	if p.env != nil {
		var err error
		resolved, refs, err = resolveEnv(ctx, p.env, pod)
		switch {
		case spec.IsCode(err, spec.CodeUnsupported):
			if len(pod.Spec.Containers) > 0 {
				pl.Container = pod.Spec.Containers[0].Name
			}
			return pl, err, nil
		case err != nil:
			if len(pod.Spec.Containers) > 0 {
				pl.Container = pod.Spec.Containers[0].Name // its status says why it waits
			}
			return pl, nil, err
		}
	}
	pl, refused = PlanPod(resolved)
	pl.Sandbox.Env, pl.Sandbox.Secrets = splitSecrets(pl.Sandbox.Env, refs)
	return pl, refused, nil
}

// splitSecrets moves the variables refs names out of env into secret
// variables, in env's order.
func splitSecrets(env []string, refs secretRefs) ([]string, []spec.SecretVar) {
	if len(refs) == 0 {
		return env, nil
	}
	var plain []string
	var secrets []spec.SecretVar
	for _, e := range env {
		name, value, _ := strings.Cut(e, "=")
		if ref, ok := refs[name]; ok {
			secrets = append(secrets, spec.SecretVar{Name: name, Ref: ref, Value: value})
		} else {
			plain = append(plain, e)
		}
	}
	return plain, secrets
}

// live counts the pods whose sandbox runs or is being made (not refused,
// not finished), under p.mu: what the node's pod limit bounds.
func (p *Provider) live() int {
	n := 0
	for _, r := range p.pods {
		r.mu.Lock()
		if r.refused == nil && r.limited == nil && r.failure == "" && !r.finished {
			n++
		}
		r.mu.Unlock()
	}
	return n
}

// UpdatePod takes a pod's new metadata; a change to what runs is refused
// (Kubernetes allows only the image to change, and a sandbox's image is
// pinned at create).
func (p *Provider) UpdatePod(ctx context.Context, pod *corev1.Pod) error {
	r := p.get(pod.Namespace, pod.Name)
	if r == nil || r.uid != pod.UID {
		return p.CreatePod(ctx, pod)
	}
	r.mu.Lock()
	if r.pod != nil {
		r.notApplied = append(r.notApplied, unapplied(r.pod, pod)...)
		pod = pod.DeepCopy()
		pod.Status = r.pod.Status // ours: the next status keeps its times
	}
	r.pod = pod.DeepCopy()
	r.mu.Unlock()
	p.push(r)
	return nil
}

// unapplied names the changes of a pod update a running sandbox cannot
// take (the pod then says so in its stockade.io/Supported condition): the
// image (pinned at create), activeDeadlineSeconds (the TTL is fixed at
// create), an in-place resize, an ephemeral container (kubectl debug), and
// stockade's annotations.
func unapplied(old, cur *corev1.Pod) []string {
	var out []string
	if len(old.Spec.Containers) == 1 && len(cur.Spec.Containers) == 1 && old.Spec.Containers[0].Image != cur.Spec.Containers[0].Image {
		out = append(out, fmt.Sprintf("image %s → %s (a sandbox's image is pinned at create: delete the pod and make it again)", old.Spec.Containers[0].Image, cur.Spec.Containers[0].Image))
	}
	if !equalDeadline(old.Spec.ActiveDeadlineSeconds, cur.Spec.ActiveDeadlineSeconds) {
		out = append(out, "activeDeadlineSeconds (a sandbox's TTL is fixed at create)")
	}
	if len(old.Spec.Containers) == 1 && len(cur.Spec.Containers) == 1 && !equality.Semantic.DeepEqual(old.Spec.Containers[0].Resources, cur.Spec.Containers[0].Resources) {
		out = append(out, "resources (an in-place resize: a sandbox's CPU and memory are fixed at create; delete the pod and make it again)")
	}
	if len(cur.Spec.EphemeralContainers) > len(old.Spec.EphemeralContainers) {
		out = append(out, "ephemeralContainers (kubectl debug: a sandbox runs one container; use kubectl exec)")
	}
	for _, k := range []string{AnnotationPids, AnnotationNoChanges} {
		if old.Annotations[k] != cur.Annotations[k] {
			out = append(out, "annotation "+k+" (read at create)")
		}
	}
	return out
}

func equalDeadline(a, b *int64) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

// DeletePod stops the pod's processes and removes its sandbox (every
// resource, journaled), then reports the pod's terminal status.
func (p *Provider) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	r := p.get(pod.Namespace, pod.Name)
	if r == nil {
		return errdefs.NotFoundf("pod %s/%s is not on node %s", pod.Namespace, pod.Name, p.node)
	}
	r.mu.Lock()
	if r.pod == nil {
		r.pod = pod.DeepCopy()
	} else {
		r.pod.DeletionTimestamp, r.pod.DeletionGracePeriodSeconds = pod.DeletionTimestamp, pod.DeletionGracePeriodSeconds
	}
	again := r.deleting
	r.deleting = true
	grace := r.grace()
	proc := r.proc
	r.mu.Unlock()
	if again {
		// A deletion again (kubectl delete --grace-period=0 --force): a
		// shorter grace than the one waited for ends the wait now.
		if grace == 0 && proc != nil {
			_ = proc.Signal(ctx, syscall.SIGKILL) // ended or not, the removal under way settles it
		}
		return nil
	}
	// The pod's grace is waited for in its own goroutine, never in the pod
	// controller's workers (a few, shared by every pod of the node): the
	// controller deletes the pod object once the grace has passed, and
	// the removal is tried again until it is done.
	go p.removeInBackground(r)
	return nil
}

// removeInBackground removes a deleted pod's sandbox, tried again with a
// back-off until it is done or the provider closes (the sandboxes are kept
// then, and the next node's sweep removes them).
func (p *Provider) removeInBackground(r *podRun) {
	backoff := restartBackoff[0]
	for {
		err := p.remove(p.ctx, r)
		if err == nil || p.ctx.Err() != nil {
			return
		}
		p.log.Warn("removing a deleted pod's sandbox; trying again", "pod", r.key, "err", err)
		select {
		case <-p.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, restartBackoff[1])
	}
}

// maxGrace bounds a pod's grace (a year of seconds would overflow a
// Duration into a negative, which is no grace at all).
const maxGrace = 24 * time.Hour

// grace is how long the container's process has between TERM and KILL at
// the pod's deletion: the delete's grace, else the pod's
// terminationGracePeriodSeconds. r.mu is held.
func (r *podRun) grace() time.Duration {
	g := r.plan.Grace
	if pod := r.pod; pod != nil && pod.DeletionGracePeriodSeconds != nil {
		secs := max(*pod.DeletionGracePeriodSeconds, 0)
		g = time.Duration(min(secs, int64(maxGrace/time.Second))) * time.Second // the delete's, as a kubelet honours it
	}
	return min(max(g, 0), maxGrace)
}

func (p *Provider) remove(ctx context.Context, r *podRun) error {
	r.cancel()
	<-r.done
	// Read once the supervisor is gone: no restart can come between.
	r.mu.Lock()
	proc, grace := r.proc, r.grace()
	r.mu.Unlock()
	if proc != nil {
		p.terminate(ctx, r, proc, grace)
	}
	r.mu.Lock()
	id := r.sandboxID
	r.mu.Unlock()
	// The pod's sandboxes: its recorded one, and any the journal labels
	// with its UID (a create the deletion cut short goes on in the
	// sandbox's actor and may have made one the run never learnt of).
	ids, err := p.sandboxesOf(ctx, r.uid)
	if err != nil {
		return err
	}
	if id != "" && !slices.Contains(ids, id) {
		ids = append(ids, id)
	}
	for _, id := range ids {
		sb, err := p.rt.Sandbox(ctx, id)
		switch {
		case spec.IsCode(err, spec.CodeNotFound):
		case err != nil:
			return err
		default:
			if err := sb.Remove(ctx); err != nil && !spec.IsCode(err, spec.CodeNotFound) {
				return err
			}
		}
	}
	r.mu.Lock()
	r.deleted, r.backoff = true, false
	r.mu.Unlock()
	p.log.Info("pod removed", "pod", r.key, "sandbox", id)
	p.push(r)
	p.mu.Lock()
	if p.pods[r.key] == r {
		delete(p.pods, r.key)
	}
	p.mu.Unlock()
	return nil
}

// terminate ends the container's process as a kubelet ends a container at
// its pod's deletion: TERM now, KILL once grace has passed; the sandbox's
// removal then stops what else runs in it.
func (p *Provider) terminate(ctx context.Context, r *podRun, proc *stockade.Process, grace time.Duration) {
	select {
	case <-proc.Done():
		return
	default:
	}
	if err := proc.Signal(ctx, syscall.SIGTERM); err != nil {
		p.log.Warn("TERM to a deleted pod's container", "pod", r.key, "err", err)
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-proc.Done():
		return
	case <-ctx.Done():
	case <-t.C:
	}
	if err := proc.Signal(ctx, syscall.SIGKILL); err != nil {
		p.log.Warn("KILL to a deleted pod's container", "pod", r.key, "err", err)
	}
}

// sandboxesOf lists the live sandboxes the journal labels with a pod's
// UID.
func (p *Provider) sandboxesOf(ctx context.Context, uid types.UID) ([]string, error) {
	if uid == "" {
		return nil, nil
	}
	infos, err := p.rt.Sandboxes(ctx)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, in := range infos {
		if in.Labels[LabelUID] == string(uid) {
			ids = append(ids, in.ID)
		}
	}
	return ids, nil
}

func (p *Provider) get(ns, name string) *podRun {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pods[podKey(ns, name)]
}

// GetPod returns the pod as this node runs it, its status read from the
// journal; not found when the node runs no such pod.
func (p *Provider) GetPod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	r := p.get(ns, name)
	if r == nil {
		return nil, errdefs.NotFoundf("pod %s/%s is not on node %s", ns, name, p.node)
	}
	return r.snapshot(ctx), nil
}

// GetPodStatus is GetPod's status.
func (p *Provider) GetPodStatus(ctx context.Context, ns, name string) (*corev1.PodStatus, error) {
	pod, err := p.GetPod(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	return &pod.Status, nil
}

// GetPods lists the pods this node runs, re-adopted ones included (so the
// pod controller removes those whose pod was deleted while the node was
// away).
func (p *Provider) GetPods(ctx context.Context) ([]*corev1.Pod, error) {
	p.mu.Lock()
	runs := make([]*podRun, 0, len(p.pods))
	for _, r := range p.pods {
		runs = append(runs, r)
	}
	p.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(runs))
	for _, r := range runs {
		out = append(out, r.snapshot(ctx))
	}
	return out, nil
}

// NotifyPods registers the pod controller's callback for status changes.
func (p *Provider) NotifyPods(_ context.Context, fn func(*corev1.Pod)) {
	p.mu.Lock()
	p.notify = fn
	runs := make([]*podRun, 0, len(p.pods))
	for _, r := range p.pods {
		runs = append(runs, r)
	}
	p.mu.Unlock()
	for _, r := range runs {
		go p.push(r) // what changed before the controller listened
	}
}

// push reports a pod's current status to the pod controller. A run's
// pushes are serialised (snapshot and hand-over together), so an older
// status never lands after a newer one; a re-adopted run whose pod is not
// yet seen is not reported (its placeholder knows no restart policy).
func (p *Provider) push(r *podRun) {
	p.mu.Lock()
	fn := p.notify
	p.mu.Unlock()
	if fn == nil {
		return
	}
	r.pushMu.Lock()
	defer r.pushMu.Unlock()
	r.mu.Lock()
	bound := r.pod != nil
	r.mu.Unlock()
	if !bound {
		return
	}
	fn(r.snapshot(p.ctx))
}

// Close stops supervising (the sandboxes and their processes go on: they
// are kept, and the next node re-adopts them).
func (p *Provider) Close() {
	p.cancel()
	p.mu.Lock()
	runs := make([]*podRun, 0, len(p.pods))
	for _, r := range p.pods {
		runs = append(runs, r)
	}
	p.mu.Unlock()
	for _, r := range runs {
		<-r.done
	}
}

// podRun is one pod on this node: its sandbox and its container's process.
type podRun struct {
	p         *Provider
	key       string
	ns, name  string
	uid       types.UID
	container string
	adopted   bool
	cancel    context.CancelFunc
	done      chan struct{}

	pushMu sync.Mutex // one status hand-over at a time

	mu         sync.Mutex
	pod        *corev1.Pod // the pod as last given (nil: re-adopted, not yet seen)
	limited    error       // refused for the node's pod limit
	notApplied []string    // updates of the pod that were not applied
	finished   bool        // its container will not run again (its sandbox stopped)
	plan       Plan
	refused    error
	configErr  error  // the env's references unread yet: read again by supervise
	failure    string // why the pod cannot run (create failed, sandbox lost)
	sandboxID  string
	procID     string // the container's current process
	prevID     string // the one before (kubectl logs --previous)
	restarts   int32
	backoff    bool // the container's process ended and will be started again
	deleting   bool // the pod's deletion is under way (removeInBackground)
	deleted    bool
	proc       *stockade.Process
}

// supervise runs the pod: the sandbox is made (unless re-adopted), then the
// container's process is started, waited for, and started again as the
// restart policy says, each change reported.
func (r *podRun) supervise(ctx context.Context) {
	defer close(r.done)
	p := r.p
	if r.adopted && !r.bind(ctx) {
		return
	}
	defer func() {
		r.mu.Lock()
		r.backoff = false // no restart comes once the supervisor is gone
		r.mu.Unlock()
	}()
	if !r.awaitConfig(ctx) {
		return
	}
	r.mu.Lock()
	refused, limited, failure := r.refused, r.limited, r.failure
	r.mu.Unlock()
	if refused != nil || limited != nil || failure != "" {
		p.log.Warn("pod not run", "pod", r.key, "refused", refused, "limited", limited, "failure", failure)
		p.push(r)
		return
	}
	var sb *stockade.Sandbox
	if r.sandboxID == "" {
		p.push(r) // Pending: ContainerCreating
		var err error
		sb, err = p.rt.CreateSandbox(ctx, r.plan.Sandbox)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.fail(fmt.Sprintf("creating the sandbox: %v", err))
			return
		}
		r.mu.Lock()
		r.sandboxID = sb.ID()
		r.mu.Unlock()
		p.log.Info("pod's sandbox created", "pod", r.key, "sandbox", sb.ID())
	} else {
		var err error
		if sb, err = p.rt.Sandbox(ctx, r.sandboxID); err != nil {
			if ctx.Err() != nil {
				return
			}
			r.fail(fmt.Sprintf("sandbox %s: %v", r.sandboxID, err))
			return
		}
	}
	backoff := restartBackoff[0]
	for {
		proc, err := r.current(ctx, sb)
		if errors.Is(err, errFinished) {
			r.finish(ctx, sb)
			return
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.fail(fmt.Sprintf("starting the container's process: %v", err))
			return
		}
		p.push(r)
		res, err := proc.Wait(ctx)
		if ctx.Err() != nil {
			return
		}
		code := res.ExitCode
		p.log.Info("container process ended", "pod", r.key, "process", proc.ID, "exit", code, "reason", res.Reason, "err", err)
		r.mu.Lock()
		r.proc = nil
		policy := r.plan.Restart
		r.mu.Unlock()
		again := policy == corev1.RestartPolicyAlways || policy == corev1.RestartPolicyOnFailure && (code != 0 || res.Reason != string(lifecycle.ReasonExited))
		// A sandbox stopped on purpose (its TTL, activeDeadlineSeconds, an
		// operator's stop) ends the pod as it would a kubelet's; one that
		// died under the process is made again, as a kubelet makes a dead
		// pod sandbox again.
		asked := r.sandboxStopAsked(ctx, sb)
		died := res.Reason == string(lifecycle.ReasonSandboxStopped) && !asked
		if !again || res.Reason == string(lifecycle.ReasonStopped) || asked {
			r.finish(ctx, sb)
			return
		}
		if !res.Started.IsZero() && res.Ended.Sub(res.Started) >= backoffReset {
			backoff = restartBackoff[0] // it ran long enough: the back-off starts over, as a kubelet's
		}
		r.mu.Lock()
		r.backoff = true
		r.mu.Unlock()
		p.push(r)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, restartBackoff[1])
		r.mu.Lock()
		r.prevID, r.procID = r.procID, ""
		r.restarts++
		r.mu.Unlock()
		if died {
			nsb, err := r.remake(ctx, sb)
			if err != nil {
				if ctx.Err() == nil {
					r.fail(fmt.Sprintf("making the dead sandbox again: %v", err))
				}
				return
			}
			sb = nsb
		}
		r.mu.Lock()
		r.backoff = false
		r.mu.Unlock()
	}
}

// sandboxStopAsked says a stop was asked of the sandbox (its TTL, which is
// the pod's activeDeadlineSeconds, or an operator's stop): journaled
// before the stop reaches its processes, so it is known when one ends.
func (r *podRun) sandboxStopAsked(ctx context.Context, sb *stockade.Sandbox) bool {
	st, err := r.p.rt.ReplaySandbox(ctx, sb.ID(), 0)
	if err != nil {
		return false
	}
	asked := func(reason lifecycle.Reason) bool {
		return reason == lifecycle.ReasonTimeout || reason == lifecycle.ReasonStopped
	}
	return asked(st.Stopping) || st.Exit != nil && asked(st.Exit.Reason)
}

// backoffReset is how long a container's process must run for its restart
// back-off to start over (the kubelet's 10 minutes).
var backoffReset = 10 * time.Minute

// remake replaces a sandbox that died with a new one made from the pod's
// plan. The dead one is removed (its journal and recordings stay, so
// `kubectl logs --previous` reads the process it ran); the new one starts
// with a fresh /workspace, as a new container starts with a fresh
// writable layer.
func (r *podRun) remake(ctx context.Context, dead *stockade.Sandbox) (*stockade.Sandbox, error) {
	if err := dead.Remove(ctx); err != nil && !spec.IsCode(err, spec.CodeNotFound) {
		r.p.log.Warn("removing a pod's dead sandbox", "pod", r.key, "sandbox", dead.ID(), "err", err)
	}
	r.mu.Lock()
	plan := r.plan.Sandbox
	r.mu.Unlock()
	sb, err := r.p.rt.CreateSandbox(ctx, plan)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.sandboxID = sb.ID()
	r.mu.Unlock()
	r.p.log.Info("pod's dead sandbox made again", "pod", r.key, "dead", dead.ID(), "sandbox", sb.ID())
	return sb, nil
}

// finish stops a pod's sandbox once its container will not run again (as a
// kubelet leaves a finished container): its CPU and memory are freed, its
// workspace, journal and recordings stay (kubectl logs works) until the pod
// is deleted, which removes it.
func (r *podRun) finish(ctx context.Context, sb *stockade.Sandbox) {
	r.mu.Lock()
	r.finished = true
	r.mu.Unlock()
	if err := sb.Stop(ctx); err != nil && ctx.Err() == nil {
		r.p.log.Warn("stopping a finished pod's sandbox", "pod", r.key, "sandbox", sb.ID(), "err", err)
	}
	r.p.push(r)
}

// awaitConfig reads the env's references again, with the restart
// back-off between tries, until they can be read (then the pod is planned)
// or ctx ends (false).
func (r *podRun) awaitConfig(ctx context.Context) bool {
	backoff := restartBackoff[0]
	for {
		r.mu.Lock()
		configErr, pod := r.configErr, r.pod.DeepCopy() // its status is written under mu
		r.mu.Unlock()
		if configErr == nil {
			return true
		}
		r.p.log.Warn("pod's env unreadable; trying again", "pod", r.key, "err", configErr)
		r.p.push(r)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, restartBackoff[1])
		pl, refused, err := r.p.planOf(ctx, pod)
		if err == nil {
			err = r.giveSecrets(ctx, pl) // a re-adopted sandbox's (none: nothing to give)
		}
		r.mu.Lock()
		r.configErr = err
		if err == nil {
			r.plan, r.container = pl, pl.Container
			if r.sandboxID == "" {
				r.refused = refused // a re-adopted pod ran, so it was accepted then
			}
		}
		r.mu.Unlock()
	}
}

// bind waits for a re-adopted sandbox's pod (the informer's cache) and
// takes its plan; false when the pod is gone (the sweep removes the
// sandbox) or the provider closes.
func (r *podRun) bind(ctx context.Context) bool {
	for {
		pod, err := r.p.lister.Pods(r.ns).Get(r.name)
		if err == nil && pod.UID == r.uid {
			pl, refused, err := r.p.planOf(ctx, pod)
			if err == nil {
				// The secrets' values are not in the journal: the
				// re-adopted sandbox has them again from the pod's
				// references, read now.
				err = r.giveSecrets(ctx, pl)
			}
			r.mu.Lock()
			r.pod = pod.DeepCopy()
			if err != nil {
				// What runs goes on; a new process (a restart, kubectl
				// exec) needs the env: the pod says why it cannot have it
				// and supervise reads it again with a back-off.
				r.configErr = err
				if r.container == "" && len(pod.Spec.Containers) > 0 {
					r.container = pod.Spec.Containers[0].Name
				}
			} else {
				r.plan = pl
			}
			if refused != nil && r.failure == "" {
				// It ran before, so it was accepted then: a node of
				// another version. Keep supervising what runs.
				r.p.log.Warn("re-adopted pod would be refused now", "pod", r.key, "err", refused)
			}
			r.mu.Unlock()
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// giveSecrets gives a re-adopted sandbox its secret variables' values.
func (r *podRun) giveSecrets(ctx context.Context, pl Plan) error {
	r.mu.Lock()
	id := r.sandboxID
	r.mu.Unlock()
	if len(pl.Sandbox.Secrets) == 0 || id == "" {
		return nil
	}
	sb, err := r.p.rt.Sandbox(ctx, id)
	if err != nil {
		return err
	}
	return sb.SetSecrets(ctx, pl.Sandbox.Secrets)
}

// current returns the container's live process: the re-adopted one, or a
// new one.
func (r *podRun) current(ctx context.Context, sb *stockade.Sandbox) (*stockade.Process, error) {
	r.mu.Lock()
	id := r.procID
	r.mu.Unlock()
	if id != "" {
		if h, err := r.p.rt.Process(ctx, id); err == nil {
			r.mu.Lock()
			r.proc = h
			r.mu.Unlock()
			return h, nil
		} else if !spec.IsCode(err, spec.CodeNotFound) {
			return nil, err
		}
		st, err := r.p.rt.ReplayProcess(ctx, id, 0)
		if err != nil {
			return nil, err
		}
		if st.Terminal() {
			// It ended while no node watched: a finished process whose
			// policy says no restart stays finished.
			if exitDone(st, r.plan.Restart) {
				return nil, errFinished
			}
			r.mu.Lock()
			r.prevID, r.procID = id, ""
			r.restarts++
			r.mu.Unlock()
		}
	}
	r.mu.Lock()
	pl := r.plan.Process
	r.mu.Unlock()
	h, err := sb.Start(ctx, pl)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.procID, r.proc = h.ID(), h
	r.mu.Unlock()
	r.p.log.Info("container process started", "pod", r.key, "process", h.ID)
	return h, nil
}

var errFinished = errors.New("the container's process finished")

// exitDone: a terminal process the policy does not start again.
func exitDone(st lifecycle.Process, policy corev1.RestartPolicy) bool {
	switch policy {
	case corev1.RestartPolicyNever:
		return true
	case corev1.RestartPolicyOnFailure:
		return st.Exit != nil && st.Exit.Reason == lifecycle.ReasonExited && st.Exit.ExitCode != nil && *st.Exit.ExitCode == 0
	case corev1.RestartPolicyAlways:
		// Started again whatever the exit, as with no policy (Kubernetes'
		// default is Always), below.
	}
	return false
}

func (r *podRun) fail(why string) {
	r.mu.Lock()
	r.failure = why
	r.mu.Unlock()
	r.p.log.Warn("pod failed", "pod", r.key, "why", why)
	r.p.push(r)
}

// snapshot is the pod with its status as the journal says.
func (r *podRun) snapshot(ctx context.Context) *corev1.Pod {
	r.mu.Lock()
	var pod *corev1.Pod
	if r.pod != nil {
		pod = r.pod.DeepCopy()
	} else {
		pod = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: r.name, UID: r.uid}}
		pod.Spec.NodeName = r.p.node
		if r.container != "" {
			pod.Spec.Containers = []corev1.Container{{Name: r.container}}
		}
	}
	v := runView{
		refused: r.refused, limited: r.limited, failure: r.failure, sandboxID: r.sandboxID, procID: r.procID, prevID: r.prevID,
		restarts: r.restarts, backoff: r.backoff && !r.deleted, deleted: r.deleted, container: r.container, tokenVolume: r.plan.TokenVolume,
		restart: r.plan.Restart, notApplied: slices.Clone(r.notApplied), configErr: r.configErr,
	}
	r.mu.Unlock()
	pod.Status = r.p.status(ctx, pod, v)
	r.mu.Lock()
	if r.pod != nil {
		// The next status keeps this one's transition times.
		r.pod.Status = *pod.Status.DeepCopy()
	}
	r.mu.Unlock()
	return pod
}
