package upgrade

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sversion "k8s.io/apimachinery/pkg/version"

	"github.com/khw-dev/khw/internal/kube"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/steps"
)

// Observe reads what runs now: each control plane's kube-apiserver
// version (GET /version on it, not through the load balancer) and each
// Node's kubelet version. An apiserver that does not answer is left out
// (Check refuses a cluster where none answers; the steps refuse an
// unhealthy one). Errors: the Nodes cannot be listed.
func Observe(ctx context.Context, m *nodeplan.Machines, env *steps.Env) (Running, error) {
	r := Running{APIServers: map[string]string{}, Kubelets: map[string]string{}}
	for _, n := range env.Cluster.ControlPlanes() {
		cfg, err := m.RestConfig(env, m.Target(env).APIServerURL(n.Name))
		if err != nil {
			return r, err
		}
		cs, err := kube.Clientset(cfg)
		if err != nil {
			return r, err
		}
		// GET /version as Discovery().ServerVersion() does, bound by ctx.
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Raw()
		var info k8sversion.Info
		if err == nil && json.Unmarshal(body, &info) == nil && info.GitVersion != "" {
			r.APIServers[n.Name] = info.GitVersion
		}
	}
	cfg, err := m.RestConfig(env, "")
	if err != nil {
		return r, err
	}
	cs, err := kube.Clientset(cfg)
	if err != nil {
		return r, err
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return r, fmt.Errorf("list Nodes: %w", err)
	}
	for _, n := range nodes.Items {
		r.Kubelets[n.Name] = n.Status.NodeInfo.KubeletVersion
	}
	return r, nil
}
