package smoketest

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// When the lists during the wait fail (a slow apiserver, the last one cut
// by the deadline), the timeout still says why the pod is not ready once a
// list after the wait works, instead of "cannot list them".
func TestWaitPodReadyExplainsAfterListsCutByTheDeadline(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "ns", Labels: map[string]string{"app": "web"}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			Message: "no nodes available to schedule pods"}}}}
	cs := fake.NewSimpleClientset(pod)
	const wait = 300 * time.Millisecond
	until := time.Now().Add(wait)
	cs.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if time.Now().Before(until) {
			return true, nil, context.DeadlineExceeded
		}
		return false, nil, nil
	})
	_, err := waitPodReady(context.Background(), cs, "ns", "app=web", wait, 50*time.Millisecond)
	if err == nil || strings.Contains(err.Error(), "cannot list") || !strings.Contains(err.Error(), "no nodes available") {
		t.Fatalf("err = %v; want the scheduler's reason, not the failed lists", err)
	}

	// Lists that still fail after the wait are the problem, and are named.
	cs2 := fake.NewSimpleClientset(pod)
	cs2.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, context.DeadlineExceeded
	})
	_, err = waitPodReady(context.Background(), cs2, "ns", "app=web", 100*time.Millisecond, 20*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "cannot list them") {
		t.Fatalf("err = %v; want the failed listing named", err)
	}
}

func TestDescribePod(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  corev1.Pod
		want []string
	}{
		{"unschedulable", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Status: corev1.PodStatus{Phase: corev1.PodPending,
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/3 nodes are\n available"}}}},
			[]string{"pod p: Pending, not scheduled: Unschedulable (0/3 nodes are available)", "every worker is Ready"}},
		{"no scheduler", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Status: corev1.PodStatus{Phase: corev1.PodPending}},
			[]string{"pod p: Pending", "is kube-scheduler running"}},
		{"crash loop", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "kube-system"}, Spec: corev1.PodSpec{NodeName: "w1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning,
			ContainerStatuses: []corev1.ContainerStatus{{Name: "coredns", RestartCount: 4, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}}}},
			[]string{"pod p on w1: Running, container coredns waiting: CrashLoopBackOff, 4 restarts", "kubectl logs --previous -n kube-system p -c coredns"}},
		{"image", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{NodeName: "w2"}, Status: corev1.PodStatus{Phase: corev1.PodPending,
			ContainerStatuses: []corev1.ContainerStatus{{Name: "coredns", Image: "registry.k8s.io/coredns/coredns:v1.14.6", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull"}}}}}},
			[]string{"the image registry.k8s.io/coredns/coredns:v1.14.6 is not imported on w2"}},
		{"not ready", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{NodeName: "w2"}, Status: corev1.PodStatus{Phase: corev1.PodRunning,
			ContainerStatuses: []corev1.ContainerStatus{{Name: "c", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}},
			[]string{"container c running, not ready (readiness probe failing)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := DescribePod(&tc.pod)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q lacks %q", got, w)
				}
			}
		})
	}
	if got := DescribePods(nil); !strings.Contains(got, "no pod exists") {
		t.Errorf("DescribePods(nil) = %q", got)
	}
}
