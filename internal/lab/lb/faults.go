package lb

import (
	"context"
	"fmt"

	"github.com/khw-dev/khw/internal/lab/fault"
	"github.com/khw-dev/khw/internal/lab/labid"
)

// Faults are lab 06's troubleshooting challenges (texts:
// labs/challenges/06-lb.md).
func Faults() []fault.Fault {
	return []fault.Fault{
		{
			ID: "lb-bind-loopback", Lab: labid.LB, Level: 1,
			Source: fault.Source{Title: "mmumshad/kubernetes-the-hard-way #301: the HAProxy config used the load balancer's loopback address, not its static IP",
				URL: "https://github.com/mmumshad/kubernetes-the-hard-way/issues/301"},
			Break: func(ctx context.Context, a fault.Actions) error {
				return onLB(ctx, a, `sed -i 's/^\(\s*bind\s\+\)\(\*\|0\.0\.0\.0\)\?:6443\b/\1127.0.0.1:6443/' /etc/haproxy/haproxy.cfg
grep -q '^\s*bind\s\+127\.0\.0\.1:6443' /etc/haproxy/haproxy.cfg
systemctl reload haproxy`)
			},
			Named: []string{"[06-lb] lb: frontend kube-apiserver listens on 127.0.0.1:6443 only"},
		},
		{
			ID: "lb-backend-port", Lab: labid.LB, Level: 1,
			Source: fault.Source{Title: "kubernetes-the-hard-way: the load balancer's backends are each controller's apiserver on port 6443",
				URL: "https://github.com/kelseyhightower/kubernetes-the-hard-way/blob/master/docs/08-bootstrapping-kubernetes-controllers.md"},
			Break: func(ctx context.Context, a fault.Actions) error {
				return onLB(ctx, a, `sed -i 's|^\(\s*server cp3 [0-9.]*\):6443 |\1:6444 |' /etc/haproxy/haproxy.cfg
grep -q '^\s*server cp3 [0-9.]*:6444 ' /etc/haproxy/haproxy.cfg
systemctl reload haproxy`)
			},
			Named: []string{"[06-lb] lb: server cp3 uses port 6444; the apiserver listens on 6443"},
		},
	}
}

// onLB runs script on the cluster's load balancer.
func onLB(ctx context.Context, a fault.Actions, script string) error {
	lb, ok := a.Cluster().LB()
	if !ok {
		return fmt.Errorf("cluster %s has no load balancer", a.Cluster().Name)
	}
	_, err := a.Run(ctx, lb.Name, script)
	return err
}
