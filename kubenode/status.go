package kubenode

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stockade/stockade/lifecycle"
)

// ConditionSupported is the pod condition a refused pod carries (status
// False, the message naming every unsupported field); ConditionTokenNotMounted
// says the service-account token volume was not mounted.
const (
	ConditionSupported       corev1.PodConditionType = "stockade.io/Supported"
	ConditionTokenNotMounted corev1.PodConditionType = "stockade.io/ServiceAccountTokenNotMounted" //nolint:gosec // G101: a condition's name, no credential
)

// runView is what status needs of a podRun, copied under its lock.
type runView struct {
	refused, limited          error
	restart                   corev1.RestartPolicy
	notApplied                []string
	failure                   string
	sandboxID, procID, prevID string
	restarts                  int32
	backoff, deleted          bool
	container, tokenVolume    string
	configErr                 error // the env's references could not be read yet
}

// unreadPhase is the phase a pod keeps while its journal cannot be read:
// the last one reported (Unknown is deprecated: a kubelet that cannot tell
// says so in the reason and the container's state, not the phase).
func unreadPhase(old corev1.PodStatus) corev1.PodPhase {
	if old.Phase == "" || old.Phase == corev1.PodUnknown {
		return corev1.PodPending
	}
	return old.Phase
}

// status builds a pod's status from the journal: the sandbox's folded state
// and the container's process's.
func (p *Provider) status(ctx context.Context, pod *corev1.Pod, v runView) corev1.PodStatus {
	old := pod.Status
	st := corev1.PodStatus{QOSClass: old.QOSClass, HostIP: p.hostIP, StartTime: old.StartTime}
	if p.hostIP != "" {
		st.HostIPs = []corev1.HostIP{{IP: p.hostIP}}
	}
	cs := corev1.ContainerStatus{Name: v.container, Image: containerImage(pod), RestartCount: v.restarts}
	now := metav1.Now()
	cond := func(t corev1.PodConditionType, ok bool, reason, msg string) {
		s := corev1.ConditionFalse
		if ok {
			s = corev1.ConditionTrue
		}
		st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: s, Reason: reason, Message: msg, LastTransitionTime: transition(old, t, s, now)})
	}
	finish := func(ready bool) corev1.PodStatus {
		cond(corev1.PodScheduled, true, "", "")
		cond(corev1.PodInitialized, true, "", "")
		cond(corev1.PodReadyToStartContainers, v.sandboxID != "", "", "")
		cond(corev1.ContainersReady, ready, "", "")
		cond(corev1.PodReady, ready, "", "")
		if v.tokenVolume != "" {
			cond(ConditionTokenNotMounted, true, "SandboxHoldsNoCredentials",
				fmt.Sprintf("volume %s (the service-account token) is not mounted: a sandbox never holds API credentials", v.tokenVolume))
		}
		if len(v.notApplied) > 0 {
			cond(ConditionSupported, false, "UpdateNotApplied", "not applied to the running sandbox: "+strings.Join(v.notApplied, "; "))
		}
		if v.container != "" {
			st.ContainerStatuses = []corev1.ContainerStatus{cs}
		}
		return st
	}
	terminated := func(code int32, reason, msg string) {
		cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: msg, FinishedAt: now}}
	}

	if v.refused != nil {
		st.Phase, st.Reason, st.Message = corev1.PodFailed, "Unsupported", v.refused.Error()
		cond(ConditionSupported, false, "Unsupported", v.refused.Error())
		terminated(128, "Unsupported", v.refused.Error())
		return finish(false)
	}
	if v.limited != nil {
		st.Phase, st.Reason, st.Message = corev1.PodFailed, "OutOfpods", v.limited.Error()
		terminated(128, "OutOfpods", v.limited.Error())
		return finish(false)
	}
	if v.configErr != nil {
		// As a kubelet's CreateContainerConfigError: the pod waits, and
		// the references are read again until they can be.
		st.Phase = corev1.PodPending
		cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: v.configErr.Error()}}
		return finish(false)
	}
	if v.failure != "" {
		st.Phase, st.Reason, st.Message = corev1.PodFailed, "SandboxFailed", v.failure
		terminated(128, "SandboxFailed", v.failure)
		cs.LastTerminationState = p.containerState(ctx, v.prevID).state
		return finish(false)
	}
	if v.sandboxID == "" {
		st.Phase = corev1.PodPending
		if v.deleted {
			st.Phase = corev1.PodFailed
			terminated(137, "Deleted", "the pod was deleted before its sandbox was made")
			return finish(false)
		}
		cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating", Message: "making the sandbox"}}
		return finish(false)
	}
	sb, err := p.rt.ReplaySandbox(ctx, v.sandboxID, 0)
	if err == nil && st.StartTime == nil {
		t := metav1.NewTime(sb.Reserved)
		st.StartTime = &t
	}
	if err != nil {
		// The journal could not be read now: say so rather than guess.
		st.Phase, st.Reason, st.Message = unreadPhase(old), "JournalUnreadable", err.Error()
		cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "JournalUnreadable", Message: err.Error()}}
		return finish(false)
	}
	cur := p.containerState(ctx, v.procID)
	prev := p.containerState(ctx, v.prevID)
	cs.LastTerminationState = prev.state
	cs.ContainerID = containerID(v.procID)
	switch {
	case v.procID == "" && v.backoff:
		st.Phase = corev1.PodRunning
		cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "the container's process ended and is started again after a back-off"}}
	case v.procID == "":
		st.Phase = corev1.PodPending
		cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating", Message: "starting the container's process"}}
		if sb.Terminal() || v.deleted {
			st.Phase = corev1.PodFailed
			terminated(137, "SandboxRemoved", "the sandbox was removed")
		}
	case cur.err != nil:
		st.Phase, st.Reason, st.Message = unreadPhase(old), "JournalUnreadable", cur.err.Error()
		cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "JournalUnreadable", Message: cur.err.Error()}}
	case !cur.terminal:
		st.Phase = corev1.PodRunning
		cs.State = cur.state
		cs.Ready = true
		started := true
		cs.Started = &started
		return finish(true)
	case v.backoff:
		st.Phase = corev1.PodRunning
		cs.LastTerminationState = cur.state
		cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "the container's process ended and is started again after a back-off"}}
	default:
		cs.State = cur.state
		st.Phase = corev1.PodFailed
		if cur.succeeded {
			st.Phase = corev1.PodSucceeded
		}
		stoppedUnder := cur.proc.Exit != nil && (cur.proc.Exit.Reason == lifecycle.ReasonSandboxStopped || cur.proc.Exit.Reason == lifecycle.ReasonStopped)
		switch {
		case !v.deleted && sb.Admits() && !stoppedUnder && !exitDone(cur.proc, v.restart):
			// Between the exit and the restart decision.
			st.Phase = corev1.PodRunning
		case sb.Stopping == lifecycle.ReasonTimeout:
			st.Phase, st.Reason, st.Message = corev1.PodFailed, "DeadlineExceeded", "the pod's activeDeadlineSeconds (its sandbox's TTL) passed"
		case stoppedUnder:
			st.Phase = corev1.PodFailed
			if st.Reason == "" {
				st.Reason, st.Message = "SandboxStopped", fmt.Sprintf("sandbox %s stopped (%s): the container is not started again", v.sandboxID, orNone(string(sb.Stopping)))
			}
		}
	}
	return finish(false)
}

// procState is a container process's state as the journal folds it.
type procState struct {
	state     corev1.ContainerState
	proc      lifecycle.Process
	terminal  bool
	succeeded bool
	err       error
}

func (p *Provider) containerState(ctx context.Context, id string) procState {
	if id == "" {
		return procState{}
	}
	st, err := p.rt.ReplayProcess(ctx, id, 0)
	if err != nil {
		return procState{err: err}
	}
	ps := procState{proc: st, terminal: st.Terminal()}
	start := metav1.NewTime(st.Reserved)
	if !ps.terminal {
		ps.state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: start}}
		return ps
	}
	t := &corev1.ContainerStateTerminated{StartedAt: start, FinishedAt: metav1.NewTime(st.At), ContainerID: containerID(id), ExitCode: -1}
	if x := st.Exit; x != nil {
		if x.ExitCode != nil {
			t.ExitCode = int32(*x.ExitCode)
		}
		t.Message = x.Message
		switch x.Reason {
		case lifecycle.ReasonExited:
			t.Reason = "Completed"
			if t.ExitCode != 0 {
				t.Reason = "Error"
			}
			ps.succeeded = t.ExitCode == 0
		case lifecycle.ReasonOOM:
			t.Reason = "OOMKilled"
			if x.ExitCode == nil {
				t.ExitCode = 137
			}
		case lifecycle.ReasonLost:
			t.Reason = "Lost"
		default:
			t.Reason = reasonWord(x.Reason)
		}
		if x.Error != "" && t.Message == "" {
			t.Message = string(x.Error)
		}
	}
	ps.state = corev1.ContainerState{Terminated: t}
	return ps
}

func orNone(s string) string {
	if s == "" {
		return "no reason journaled"
	}
	return s
}

// reasonWord turns a stockade exit reason into Kubernetes' CamelCase style
// (sandbox_stopped → SandboxStopped).
func reasonWord(r lifecycle.Reason) string {
	out := make([]byte, 0, len(r))
	up := true
	for i := 0; i < len(r); i++ {
		c := r[i]
		if c == '_' {
			up = true
			continue
		}
		if up && c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		up = false
		out = append(out, c)
	}
	return string(out)
}

// containerID names a container's process as the pod status's containerID
// does a runtime's container.
func containerID(procID string) string {
	if procID == "" {
		return ""
	}
	return "stockade://" + procID
}

func containerImage(pod *corev1.Pod) string {
	if len(pod.Spec.Containers) == 1 {
		return pod.Spec.Containers[0].Image
	}
	return ""
}

// transition keeps a condition's transition time while its status holds.
func transition(old corev1.PodStatus, t corev1.PodConditionType, s corev1.ConditionStatus, now metav1.Time) metav1.Time {
	for _, c := range old.Conditions {
		if c.Type == t && c.Status == s && !c.LastTransitionTime.IsZero() {
			return c.LastTransitionTime
		}
	}
	return now
}
