package upgrade

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/kube"
	"github.com/khw-dev/khw/internal/lab/controlplane"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/lab/workers"
	"github.com/khw-dev/khw/internal/steps"
	"github.com/khw-dev/khw/internal/vm"
)

// The upgrade's steps, in the order the version-skew policy's "supported
// component upgrade order" gives (PolicyURL).
const (
	StepAPIServers  = "upgrade-apiservers"
	StepControllers = "upgrade-controllers"
	StepWorkers     = "upgrade-workers"
)

// Steps returns the upgrade's steps for the version cluster.yaml now names
// (versions.kubernetes): each installs that version's binaries from the
// catalog (checked against their digests) on its nodes and restarts what
// runs them, one node at a time, each node waited for until the cluster is
// healthy again; none changes anything while the cluster is unhealthy.
//
//  1. upgrade-apiservers: kube-apiserver on each control plane; healthy:
//     every apiserver's /readyz.
//  2. upgrade-controllers: kube-controller-manager, kube-scheduler and
//     kubectl on each control plane, after every apiserver (the policy's
//     upgrade order: right whichever apiserver they talk to; here the one
//     on their own node); healthy:
//     every /readyz, both leader-election Leases held and renewed.
//  3. upgrade-workers: kubelet and kube-proxy on each worker, cordoned and
//     drained first ("in-place minor version kubelet upgrades are not
//     supported"), uncordoned once its Node is Ready again as posted by
//     the new kubelet; healthy: every Node Ready, none left cordoned by khw.
func Steps(m *nodeplan.Machines) []steps.Step {
	cpUnit := func(name string) nodeplan.WantUnit {
		return nodeplan.WantUnit{Name: name + ".service", Deps: []string{"/usr/local/bin/" + name}}
	}
	api := &nodeplan.ComponentStep{M: m, Wait: nodeplan.ControlPlaneWait, Rolling: true, RollingOnly: true,
		Spec: &nodeplan.ComponentSpec{ID: StepAPIServers, Title: "Upgrade kube-apiserver, one control plane at a time",
			Role: config.RoleControlPlane, Binaries: []string{"kube-apiserver"}, Units: []nodeplan.WantUnit{cpUnit("kube-apiserver")}},
		Health: func(ctx context.Context, env *steps.Env) ([]steps.Diff, error) {
			return apiserversReady(ctx, m, env), nil
		},
	}
	ctl := &nodeplan.ComponentStep{M: m, Wait: nodeplan.ControlPlaneWait, Rolling: true, RollingOnly: true,
		Spec: &nodeplan.ComponentSpec{ID: StepControllers, Title: "Upgrade kube-controller-manager and kube-scheduler, one control plane at a time",
			Role: config.RoleControlPlane, Binaries: []string{"kube-controller-manager", "kube-scheduler", "kubectl"},
			Units: []nodeplan.WantUnit{cpUnit("kube-controller-manager"), cpUnit("kube-scheduler")}},
		Health: func(ctx context.Context, env *steps.Env) ([]steps.Diff, error) {
			return controllersHealthy(ctx, m, env)
		},
	}
	wk := &workerStep{m: m}
	wk.inner = &nodeplan.ComponentStep{M: m, Wait: nodeplan.WorkerWait, Rolling: true, RollingOnly: true,
		Spec: &nodeplan.ComponentSpec{ID: StepWorkers, Title: "Upgrade kubelet and kube-proxy, one drained worker at a time",
			Role: config.RoleWorker, Binaries: []string{"kubelet", "kube-proxy"},
			Units: []nodeplan.WantUnit{
				{Name: "kubelet.service", Deps: []string{"/usr/local/bin/kubelet"}},
				{Name: "kube-proxy.service", Deps: []string{"/usr/local/bin/kube-proxy"}}}},
		Health: func(ctx context.Context, env *steps.Env) ([]steps.Diff, error) {
			diffs, err := workers.NodesReady(ctx, m, env, workerNames(env.Cluster))
			if err != nil || len(diffs) > 0 {
				return diffs, err
			}
			return deploymentsAvailable(ctx, m, env)
		},
		BeforeNode: func(ctx context.Context, env *steps.Env, n config.Node) error { return wk.drain(ctx, env, n.Name) },
		AfterNode: func(ctx context.Context, env *steps.Env, n config.Node) error {
			return wk.uncordon(ctx, env, n.Name, "its Node is Ready with the new kubelet")
		},
		ExtraCommands: func(env *steps.Env) []steps.Command {
			return []steps.Command{{Why: "before each worker's binaries: cordon it and evict its pods (DaemonSet pods stay); after its Node is Ready again: uncordon it",
				Shell: "kubectl drain w1 --ignore-daemonsets --delete-emptydir-data\n# … install and restart kubelet and kube-proxy on w1, wait for Ready …\nkubectl uncordon w1"}}
		},
	}
	return []steps.Step{api, ctl, wk}
}

func workerNames(c *config.Cluster) []string {
	var out []string
	for _, n := range c.Workers() {
		out = append(out, n.Name)
	}
	return out
}

// apiserversReady is one diff per control plane whose /readyz is not ok
// (05-control-plane's check).
func apiserversReady(ctx context.Context, m *nodeplan.Machines, env *steps.Env) []steps.Diff {
	diffs, _ := controlplane.ReadyzDiffs(ctx, m, env, false)
	return diffs
}

// controllersHealthy: every apiserver ready, and the Leases of
// kube-controller-manager and kube-scheduler held and renewed (as
// 05-control-plane checks them).
func controllersHealthy(ctx context.Context, m *nodeplan.Machines, env *steps.Env) ([]steps.Diff, error) {
	diffs, server := controlplane.ReadyzDiffs(ctx, m, env, false)
	if len(diffs) > 0 || server == "" {
		return diffs, nil
	}
	return controlplane.LeaseDiffs(ctx, m, env, server), nil
}

// workerStep is upgrade-workers: the rolling ComponentStep, plus the
// workers khw cordoned and has not uncordoned yet (an upgrade cut short
// between the two) as differences, uncordoned first by Apply.
type workerStep struct {
	m     *nodeplan.Machines
	inner *nodeplan.ComponentStep
}

func (s *workerStep) ID() string    { return s.inner.ID() }
func (s *workerStep) Title() string { return s.inner.Title() }

func (s *workerStep) Commands(env *steps.Env, diffs []steps.Diff) []steps.Command {
	return s.inner.Commands(env, diffs)
}

func (s *workerStep) Check(ctx context.Context, env *steps.Env) ([]steps.Diff, error) {
	diffs, err := s.inner.Check(ctx, env)
	if err != nil {
		return nil, err
	}
	left, err := s.cordonedByKHW(ctx, env)
	if err != nil {
		return nil, err
	}
	for _, n := range left {
		diffs = append(diffs, steps.Diff{Node: n, What: "Node " + n + " is still cordoned by khw upgrade", Fix: "khw upgrade uncordons it"})
	}
	return diffs, nil
}

func (s *workerStep) Apply(ctx context.Context, env *steps.Env, diffs []steps.Diff) error {
	left, err := s.cordonedByKHW(ctx, env)
	if err != nil {
		return err
	}
	for _, n := range left {
		if err := s.uncordon(ctx, env, n, "cordoned by a khw upgrade that stopped before it was done; drained again if it still needs the new binaries"); err != nil {
			return steps.OnNode(n, err)
		}
	}
	d, err := s.inner.Check(ctx, env)
	if err != nil || len(d) == 0 {
		return err
	}
	return s.inner.Apply(ctx, env, d)
}

// client is a clientset through the load balancer.
func (s *workerStep) client(env *steps.Env) (*drainClient, error) {
	cfg, err := s.m.RestConfig(env, "")
	if err != nil {
		return nil, err
	}
	cs, err := kube.Clientset(cfg)
	if err != nil {
		return nil, err
	}
	return &drainClient{cs: cs, timeout: vm.Scaled(s.m.Provider, DrainTimeout, 30*time.Minute)}, nil
}

func (s *workerStep) cordonedByKHW(ctx context.Context, env *steps.Env) ([]string, error) {
	dc, err := s.client(env)
	if err != nil {
		return nil, err
	}
	return dc.cordonedByKHW(ctx, workerNames(env.Cluster))
}

func (s *workerStep) drain(ctx context.Context, env *steps.Env, node string) error {
	dc, err := s.client(env)
	if err != nil {
		return err
	}
	env.Notef("%s: cordon, then evict its pods (DaemonSet pods stay)", node)
	return dc.drain(ctx, node, func(line string) { env.Notef("%s: %s", node, line) })
}

func (s *workerStep) uncordon(ctx context.Context, env *steps.Env, node, why string) error {
	dc, err := s.client(env)
	if err != nil {
		return err
	}
	done, err := dc.uncordon(ctx, node)
	if err == nil {
		if done {
			env.Notef("%s: uncordoned (%s)", node, why)
		} else {
			env.Notef("%s: left cordoned (it was cordoned before khw upgrade)", node)
		}
	}
	return err
}

// deploymentsAvailable is one diff per Deployment with fewer available
// replicas than it wants: the pods evicted from the worker drained last
// must run again elsewhere before the next worker is drained (CoreDNS has
// two replicas and no PodDisruptionBudget).
func deploymentsAvailable(ctx context.Context, m *nodeplan.Machines, env *steps.Env) ([]steps.Diff, error) {
	cfg, err := m.RestConfig(env, "")
	if err != nil {
		return nil, err
	}
	cs, err := kube.Clientset(cfg)
	if err != nil {
		return nil, err
	}
	list, err := cs.AppsV1().Deployments("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list Deployments: %w", err)
	}
	var diffs []steps.Diff
	for _, d := range list.Items {
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		if d.Status.AvailableReplicas < want {
			diffs = append(diffs, steps.Diff{What: fmt.Sprintf("Deployment %s/%s has %d of %d replicas available", d.Namespace, d.Name, d.Status.AvailableReplicas, want),
				Fix: "wait for its pods to start on the other workers; kubectl -n " + d.Namespace + " describe deployment " + d.Name})
		}
	}
	return diffs, nil
}
