package health

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// KubeNode is one Node object as the apiserver holds it (what
// `kubectl get nodes -o wide` shows, plus the conditions that explain a
// NotReady node or evictions).
type KubeNode struct {
	// Name is metadata.name (the kubelet's --hostname-override or hostname,
	// which must be the CN system:node:<name> of its client certificate).
	Name string `json:"name"`
	// Ready is the Ready condition's status: "True", "False" or "Unknown"
	// (the node controller sets Unknown when the kubelet stopped posting
	// status for the node-monitor grace period, 50 s by default); "" when
	// the kubelet never posted it.
	Ready string `json:"ready"`
	// Reason and Message are the Ready condition's, e.g.
	// "KubeletNotReady" / "container runtime network not ready: … cni
	// plugin not initialized" when no CNI config is installed.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Problems lists the other conditions in their bad state, by type:
	// MemoryPressure, DiskPressure, PIDPressure (status True: the kubelet
	// evicts pods and the node gets a NoSchedule taint) and
	// NetworkUnavailable (True: the node's pod routes are not set up).
	// Empty when all are fine.
	Problems []string `json:"problems,omitempty"`
	// PodCIDR is spec.podCIDR: the range the node's pods get their IPs
	// from (set in the kubelet config here, or by the controller manager's
	// --allocate-node-cidrs).
	PodCIDR string `json:"podCIDR,omitempty"`
	// KubeletVersion is status.nodeInfo.kubeletVersion.
	KubeletVersion string `json:"kubeletVersion,omitempty"`
	// Unschedulable is spec.unschedulable (kubectl cordon).
	Unschedulable bool `json:"unschedulable,omitempty"`
	// Created is metadata.creationTimestamp: when the kubelet first
	// registered the node.
	Created time.Time `json:"created"`
}

// pressureConditions are the Node conditions that are bad when True
// (k8s.io/api/core/v1 NodeConditionType; kubelet eviction:
// https://kubernetes.io/docs/concepts/scheduling-eviction/node-pressure-eviction/).
var pressureConditions = []corev1.NodeConditionType{
	corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure, corev1.NodeNetworkUnavailable,
}

// KubeNodeFrom summarizes one Node object.
func KubeNodeFrom(n *corev1.Node) KubeNode {
	out := KubeNode{
		Name:           n.Name,
		PodCIDR:        n.Spec.PodCIDR,
		KubeletVersion: n.Status.NodeInfo.KubeletVersion,
		Unschedulable:  n.Spec.Unschedulable,
		Created:        n.CreationTimestamp.Time,
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			out.Ready = string(c.Status)
			if c.Status != corev1.ConditionTrue {
				out.Reason, out.Message = c.Reason, c.Message
			}
			continue
		}
		for _, p := range pressureConditions {
			if c.Type == p && c.Status == corev1.ConditionTrue {
				out.Problems = append(out.Problems, string(c.Type))
			}
		}
	}
	return out
}

// KubeNodes lists the Node objects through the load balancer (the
// kubeconfig's own server when the cluster has no load balancer) as
// kubeconfigPath's user, bounded by HTTPTimeout (longer on slow nodes, Target.Slowdown), sorted by name. It
// returns an error when the kubeconfig cannot be loaded or the list
// failed; a node of cluster.yaml without a Node object is simply absent
// (its kubelet has not registered).
func KubeNodes(ctx context.Context, t Target, kubeconfigPath string) ([]KubeNode, error) {
	cfg, err := t.restConfig(kubeconfigPath)
	if err != nil {
		return nil, err
	}
	if lb, ok := t.Cluster.LB(); ok {
		if cfg, err = forServer(cfg, t.apiServerURL(lb.Name)); err != nil {
			return nil, err
		}
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", cfg.Host, err)
	}
	lctx, cancel := context.WithTimeout(ctx, t.httpTimeout())
	defer cancel()
	list, err := cs.CoreV1().Nodes().List(lctx, metav1.ListOptions{})
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("list Nodes via %s: %w", cfg.Host, err)
	}
	out := make([]KubeNode, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, KubeNodeFrom(&list.Items[i]))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Summary is the node's state in a few words, as a STATUS column: "Ready",
// "NotReady (KubeletNotReady)", "Unknown (NodeStatusUnknown)", followed
// by ",SchedulingDisabled" when cordoned and the problem conditions, e.g.
// "Ready,DiskPressure".
func (n KubeNode) Summary() string {
	var s string
	switch n.Ready {
	case string(corev1.ConditionTrue):
		s = "Ready"
	case string(corev1.ConditionFalse):
		s = "NotReady"
	case string(corev1.ConditionUnknown):
		s = "Unknown"
	default:
		s = "NoReadyCondition"
	}
	if n.Reason != "" {
		s += " (" + n.Reason + ")"
	}
	parts := []string{s}
	if n.Unschedulable {
		parts = append(parts, "SchedulingDisabled")
	}
	parts = append(parts, n.Problems...)
	return strings.Join(parts, ",")
}
