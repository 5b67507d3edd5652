// Package lb is lab 06-lb: the step that runs HAProxy on the load
// balancer (TCP passthrough to the apiservers, HTTPS /readyz health checks)
// and checks /readyz through it (step.go), and its grading (grade.go: the
// listener, every control plane a server, a health check that can pass).
//
// Text: labs/06-lb.md. Template: templates/node/loadbalancer/haproxy.cfg.tmpl.
package lb

import (
	"context"
	"strings"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/health"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/steps"
)

// NewStep returns lab 06-lb: HAProxy on the load balancer node with the
// rendered haproxy.cfg (TCP passthrough to every apiserver, each checked
// with an HTTPS GET /readyz: a TCP connect succeeds as soon as the port is
// open, even while that apiserver has lost etcd and answers 500 to every
// request; /readyz fails then, so HAProxy stops sending clients there),
// and /readyz through lb:6443 with the admin kubeconfig.
func NewStep(m *nodeplan.Machines) steps.Step {
	spec := &nodeplan.ComponentSpec{
		ID: labid.LB, Title: "Put HAProxy in front of the apiservers",
		Role:     config.RoleLoadBalancer,
		Rendered: []string{"/etc/haproxy/haproxy.cfg"},
		Packages: []nodeplan.WantPackage{{Name: "haproxy", Path: "/usr/sbin/haproxy"}},
		Units:    []nodeplan.WantUnit{{Name: "haproxy.service", Deps: []string{"/usr/sbin/haproxy", "/etc/haproxy/haproxy.cfg"}}},
	}
	s := &nodeplan.ComponentStep{M: m, Spec: spec, Wait: nodeplan.LBWait}
	s.Health = func(ctx context.Context, env *steps.Env) ([]steps.Diff, error) {
		lb, ok := env.Cluster.LB()
		if !ok {
			return nil, nil
		}
		for _, r := range health.APIServers(ctx, m.Target(env), nodeplan.AdminKubeconfig(env)) {
			if r.Target != lb.Name {
				continue
			}
			if r.OK {
				return nil, nil
			}
			why := r.Err
			if len(r.Failed) > 0 {
				why = strings.Join(r.Failed, ", ")
			}
			return []steps.Diff{{Node: lb.Name, What: "/readyz through " + r.URL + " is not ok: " + why, Fix: "check haproxy's backends on " + lb.Name + ": journalctl -u haproxy (each \"Server … is DOWN\" line says why)"}}, nil
		}
		return nil, nil
	}
	s.ExtraCommands = func(env *steps.Env) []steps.Command {
		return []steps.Command{{Why: "from the jumpbox, through the load balancer, as admin",
			Shell: "kubectl --kubeconfig " + steps.Quote(nodeplan.AdminKubeconfig(env)) + " get --raw='/readyz?verbose'"}}
	}
	return s
}
