// Package podnet is lab 08-pod-network: the step that gives each worker a
// route to every other worker's podCIDR (step.go), and its grading
// (grade.go: each route present and via the right worker).
//
// Text: labs/08-pod-network.md. Template:
// templates/node/worker/khw-pod-routes.service.tmpl.
package podnet

import (
	"context"
	"fmt"
	"strings"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/remote"
	"github.com/khw-dev/khw/internal/render"
	"github.com/khw-dev/khw/internal/steps"
)

// routesExtra checks the kernel's routing table of worker n: every other
// worker's podCIDR via that worker's IP. The unit khw-pod-routes.service
// sets them at boot; when one is missing or wrong the fix re-runs it.
func routesExtra(c *config.Cluster, n config.Node) nodeplan.NodeExtra {
	routes := render.PodRoutes(c, n.Name)
	return nodeplan.NodeExtra{
		AfterUnits: true,
		Check: func(ctx context.Context, cl *remote.Client, w *nodeplan.NodeWant) ([]steps.Diff, error) {
			out, _, err := cl.Run(ctx, "ip -4 route show", remote.RunOptions{})
			if err != nil {
				return nil, fmt.Errorf("read the routing table: %w", err)
			}
			got := map[string]string{} // dest → via
			for _, line := range strings.Split(string(out), "\n") {
				f := strings.Fields(line)
				for i := 0; i+1 < len(f); i++ {
					if f[i] == "via" && len(f) > 0 {
						got[f[0]] = f[i+1]
					}
				}
			}
			var diffs []steps.Diff
			for _, r := range routes {
				switch via, ok := got[r.Dest]; {
				case !ok:
					diffs = append(diffs, steps.Diff{Node: w.Node.Name, What: fmt.Sprintf("no route to %s's pods %s", r.Worker, r.Dest), Fix: "ip route replace " + r.Dest + " via " + r.Via})
				case via != r.Via:
					diffs = append(diffs, steps.Diff{Node: w.Node.Name, What: fmt.Sprintf("route to %s's pods %s goes via %s, want %s", r.Worker, r.Dest, via, r.Via), Fix: "ip route replace " + r.Dest + " via " + r.Via})
				}
			}
			return diffs, nil
		},
		Fix: func(ctx context.Context, env *steps.Env, cl *remote.Client, w *nodeplan.NodeWant) error {
			_, _, err := cl.Run(ctx, "systemctl restart khw-pod-routes.service", remote.RunOptions{Sudo: true})
			return err
		},
		Commands: func(w *nodeplan.NodeWant) []steps.Command {
			var sh []string
			for _, r := range routes {
				sh = append(sh, "sudo ip route replace "+r.Dest+" via "+r.Via+"   # "+r.Worker)
			}
			sh = append(sh, "ip route")
			return []steps.Command{{Node: w.Node.Name, Why: "the other workers' pod subnets, each via its worker (what the unit does at boot)", Shell: strings.Join(sh, "\n")}}
		},
	}
}

// NewStep returns lab 08-pod-network: on every worker the routes
// to every other worker's podCIDR (no overlay: the node network carries pod
// traffic), made permanent by khw-pod-routes.service and checked in the
// kernel's routing table. The CNI config that gives pods their addresses
// from the node's podCIDR (bridge, or the teaching plugin mybridge chosen
// with kubernetes.cni in cluster.yaml) is installed with the workers.
func NewStep(m *nodeplan.Machines, c *config.Cluster) steps.Step {
	spec := &nodeplan.ComponentSpec{
		ID: labid.PodNetwork, Title: "Route the pod network between workers",
		Role:     config.RoleWorker,
		Rendered: []string{"/etc/systemd/system/khw-pod-routes.service"},
		Units:    []nodeplan.WantUnit{{Name: "khw-pod-routes.service", Deps: []string{"/etc/systemd/system/khw-pod-routes.service"}}},
		Packages: []nodeplan.WantPackage{{Name: "iproute2", Path: "/usr/sbin/ip"}},
		Extras: func(n config.Node) []nodeplan.NodeExtra {
			return []nodeplan.NodeExtra{routesExtra(c, n)}
		},
	}
	return &nodeplan.ComponentStep{M: m, Spec: spec, Wait: nodeplan.WorkerWait}
}
