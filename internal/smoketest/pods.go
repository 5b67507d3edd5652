package smoketest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/khw-dev/khw/internal/lab/labid"
)

// PodReady reports whether pod p is Running, not being deleted, and has the
// condition Ready=True (every container passed its readiness probe).
func PodReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// imagePullReasons are the container waiting reasons of an image that is
// not on the node (the kubelet's images.ErrImagePull, ErrImagePullBackOff,
// ErrImageNeverPull, ErrImageInspect, ErrInvalidImageName).
var imagePullReasons = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "ErrImageNeverPull": true,
	"ImageInspectError": true, "InvalidImageName": true,
}

// DescribePod says in one line why pod p is not ready, followed by a fix
// when the reason is a known one, e.g.
//
//	pod coredns-7d9c-x2 on w1: Pending, container coredns waiting: ImagePullBackOff (Back-off pulling image "registry.k8s.io/coredns/coredns:v1.14.6"): the image registry.k8s.io/coredns/coredns:v1.14.6 is not imported on w1 …
//
// The reasons come from the pod's status: the PodScheduled condition
// (Unschedulable and the scheduler's message), each container's waiting or
// terminated state and restart count.
func DescribePod(p *corev1.Pod) string {
	node := p.Spec.NodeName
	where := "pod " + p.Name
	if node != "" {
		where += " on " + node
	}
	var parts []string
	phase := string(p.Status.Phase)
	if phase == "" {
		phase = "Pending"
	}
	if p.DeletionTimestamp != nil {
		phase += " (being deleted)"
	}
	parts = append(parts, phase)
	var hint string
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			parts = append(parts, fmt.Sprintf("not scheduled: %s (%s)", c.Reason, oneLine(c.Message)))
			hint = "no worker can take it: check that every worker is Ready (kubectl get nodes) and has no taint the pod does not tolerate"
		}
	}
	if node == "" && hint == "" && p.Status.Phase == corev1.PodPending {
		hint = "no node was picked yet: is kube-scheduler running and holding its Lease (khw status)?"
	}
	statuses := append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
	for _, cs := range statuses {
		switch {
		case cs.State.Waiting != nil:
			w := cs.State.Waiting
			s := fmt.Sprintf("container %s waiting: %s", cs.Name, w.Reason)
			if w.Message != "" {
				s += " (" + oneLine(w.Message) + ")"
			}
			parts = append(parts, s)
			switch {
			case imagePullReasons[w.Reason]:
				hint = fmt.Sprintf("the image %s is not imported on %s: the nodes are offline and pull nothing; step "+labid.Workers+" imports the catalog images (sudo ctr -n k8s.io images import …; sudo crictl images lists them)", cs.Image, orUnknown(node))
			case w.Reason == "CrashLoopBackOff":
				hint = fmt.Sprintf("container %s keeps exiting: read kubectl logs --previous -n %s %s -c %s", cs.Name, p.Namespace, p.Name, cs.Name)
			case w.Reason == "ContainerCreating" || w.Reason == "PodInitializing":
				hint = fmt.Sprintf("the kubelet on %s has not started the container: kubectl describe pod -n %s %s shows the events (pod sandbox, CNI)", orUnknown(node), p.Namespace, p.Name)
			}
		case cs.State.Terminated != nil:
			t := cs.State.Terminated
			parts = append(parts, fmt.Sprintf("container %s terminated: %s (exit code %d)", cs.Name, t.Reason, t.ExitCode))
		case cs.State.Running != nil && !cs.Ready:
			parts = append(parts, fmt.Sprintf("container %s running, not ready (readiness probe failing)", cs.Name))
		}
		if cs.RestartCount > 0 {
			parts = append(parts, fmt.Sprintf("%d restarts", cs.RestartCount))
		}
	}
	if len(statuses) == 0 && node != "" && p.Status.Phase == corev1.PodPending {
		hint = fmt.Sprintf("the kubelet on %s has not reported the pod's containers yet: is it running, and is the pod sandbox created (kubectl describe pod -n %s %s)?", node, p.Namespace, p.Name)
	}
	s := where + ": " + strings.Join(parts, ", ")
	if hint != "" {
		s += ": " + hint
	}
	return s
}

// DescribePods describes every pod of pods that is not ready (DescribePod),
// "; "-separated, sorted by name. With no pod at all it says so: the
// controller that should create them (the ReplicaSet controller of
// kube-controller-manager for a Deployment) has not.
func DescribePods(pods []corev1.Pod) string {
	if len(pods) == 0 {
		return "no pod exists: the ReplicaSet controller (kube-controller-manager) has not created one; is kube-controller-manager running and holding its Lease (khw status)?"
	}
	sorted := append([]corev1.Pod(nil), pods...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	var out []string
	for i := range sorted {
		if !PodReady(&sorted[i]) {
			out = append(out, DescribePod(&sorted[i]))
		}
	}
	if len(out) == 0 {
		return "every pod is ready"
	}
	return strings.Join(out, "; ")
}

// lastWarning returns the newest Warning event about pod name in namespace,
// as "Reason: message", or "" (none, or the events cannot be listed).
func lastWarning(ctx context.Context, cs kubernetes.Interface, namespace, name string) string {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	evs, err := cs.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + name})
	if err != nil {
		return ""
	}
	var best *corev1.Event
	var bestAt time.Time
	for i := range evs.Items {
		e := &evs.Items[i]
		if e.Type != corev1.EventTypeWarning || e.InvolvedObject.Name != name {
			continue
		}
		at := e.LastTimestamp.Time
		if at.IsZero() {
			at = e.EventTime.Time
		}
		if best == nil || at.After(bestAt) {
			best, bestAt = e, at
		}
	}
	if best == nil {
		return ""
	}
	return best.Reason + ": " + oneLine(best.Message)
}

// WhyNotReady lists the pods of namespace matching selector (a label
// selector such as "k8s-app=kube-dns") and describes those not ready
// (DescribePods), each followed by its newest Warning event. It is the
// message of a wait that timed out; a failed List is reported in it.
func WhyNotReady(ctx context.Context, cs kubernetes.Interface, namespace, selector string) string {
	lctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	pods, err := cs.CoreV1().Pods(namespace).List(lctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return fmt.Sprintf("cannot list the pods %s in %s: %v", selector, namespace, err)
	}
	if len(pods.Items) == 0 {
		return DescribePods(nil)
	}
	sort.Slice(pods.Items, func(i, j int) bool { return pods.Items[i].Name < pods.Items[j].Name })
	var out []string
	for i := range pods.Items {
		p := &pods.Items[i]
		if PodReady(p) {
			continue
		}
		s := DescribePod(p)
		if w := lastWarning(ctx, cs, namespace, p.Name); w != "" {
			s += " [last warning: " + w + "]"
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return "every pod is ready"
	}
	return strings.Join(out, "; ")
}

// waitPodReady polls the pods of namespace matching selector every poll
// until one is ready (PodReady), at most wait, and returns it. On timeout
// the error names each pod's state (WhyNotReady).
func waitPodReady(ctx context.Context, cs kubernetes.Interface, namespace, selector string, wait, poll time.Duration) (*corev1.Pod, error) {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var lastErr error
	for {
		lctx, lcancel := context.WithTimeout(wctx, requestTimeout)
		pods, err := cs.CoreV1().Pods(namespace).List(lctx, metav1.ListOptions{LabelSelector: selector})
		lcancel()
		if err == nil {
			lastErr = nil
			sort.Slice(pods.Items, func(i, j int) bool { return pods.Items[i].Name < pods.Items[j].Name })
			for i := range pods.Items {
				if PodReady(&pods.Items[i]) {
					return &pods.Items[i], nil
				}
			}
		} else {
			lastErr = err
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			// The last list may have been cut by the deadline itself: ask
			// once more, outside it, why the pods are not ready; only if
			// that fails too is the listing the problem.
			why := WhyNotReady(ctx, cs, namespace, selector)
			if lastErr != nil && strings.HasPrefix(why, "cannot list") {
				return nil, fmt.Errorf("no pod %s in namespace %s became Ready within %v: cannot list them: %w", selector, namespace, wait, lastErr)
			}
			return nil, fmt.Errorf("no pod %s in namespace %s became Ready within %v: %s", selector, namespace, wait, why)
		case <-time.After(poll):
		}
	}
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func orUnknown(node string) string {
	if node == "" {
		return "its node"
	}
	return node
}
