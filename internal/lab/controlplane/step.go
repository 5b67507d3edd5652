// Package controlplane is lab 05-control-plane: the step that runs
// kube-apiserver, kube-controller-manager and kube-scheduler on the control
// planes and checks /readyz, the leader-election Leases and the RBAC that
// lets the apiserver reach kubelets (step.go), and its grading (grade.go:
// the apiserver's certs, its kubelet client's RBAC, the control-plane
// kubeconfigs, the encryption config).
//
// Text: labs/05-control-plane.md. Templates: templates/node/controlplane/
// kube-*.service.tmpl, kube-scheduler.yaml.tmpl, audit-policy.yaml.tmpl;
// templates/manifests/apiserver-to-kubelet-rbac.yaml.tmpl.
package controlplane

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/health"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/lab/nodeplan"
	"github.com/khw-dev/khw/internal/steps"
)

// NewStep returns lab 05-control-plane: kube-apiserver,
// kube-controller-manager and kube-scheduler (and kubectl) on every control
// plane with their configs, certs and kubeconfigs; each apiserver's /readyz
// answers 200; the Leases of the controller-manager and the scheduler are
// held (leader election picked one instance each); the RBAC that lets the
// apiserver call kubelets is applied (server-side apply).
func NewStep(m *nodeplan.Machines) steps.Step {
	spec := &nodeplan.ComponentSpec{
		ID: labid.ControlPlane, Title: "Bootstrap the control plane",
		Role:     config.RoleControlPlane,
		Binaries: []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"},
		Rendered: []string{
			"/etc/systemd/system/kube-apiserver.service", "/etc/kubernetes/config/audit-policy.yaml",
			"/etc/systemd/system/kube-controller-manager.service",
			"/etc/systemd/system/kube-scheduler.service", "/etc/kubernetes/config/kube-scheduler.yaml"},
		Inputs: nodeplan.InputUnder("/var/lib/kubernetes/"),
		Units:  nodeplan.ControlPlaneUnits,
	}
	s := &nodeplan.ComponentStep{M: m, Spec: spec, Wait: nodeplan.ControlPlaneWait, Rolling: true}
	s.Health = func(ctx context.Context, env *steps.Env) ([]steps.Diff, error) {
		return controlPlaneDiffs(ctx, m, env)
	}
	s.After = func(ctx context.Context, env *steps.Env) error {
		// The RBAC needs one apiserver to answer: wait for the first /readyz.
		server := ""
		if err := nodeplan.WaitHealthy(ctx, env, func(ctx context.Context, env *steps.Env) ([]steps.Diff, error) {
			d, ready := ReadyzDiffs(ctx, m, env, true)
			server = ready
			return d, nil
		}, nodeplan.ControlPlaneWait); err != nil {
			return err
		}
		return applyRBAC(ctx, m, env, server)
	}
	s.ExtraCommands = func(env *steps.Env) []steps.Command {
		cp := env.Cluster.ControlPlanes()
		if len(cp) == 0 {
			return nil
		}
		n := cp[0].Name
		const kubectl = "sudo kubectl --kubeconfig /etc/kubernetes/admin.kubeconfig "
		return []steps.Command{
			{Node: n, Why: "the apiserver on " + n + " is ready when /readyz says ok (wait for it: at most 60 s)",
				Shell: steps.WaitLoop(60, 1, "curl -fsS --cacert /var/lib/kubernetes/ca.pem https://127.0.0.1:6443/readyz") + "\n" +
					"curl --cacert /var/lib/kubernetes/ca.pem https://127.0.0.1:6443/readyz?verbose"},
			{Why: "copy the RBAC that lets the apiserver (user kubernetes) reach the kubelets to " + n,
				Shell: `scp -F "$KHW_SSH_CONFIG" ` + steps.Quote(filepath.Join(env.State.ManifestsDir(), nodeplan.RBACManifest)) + " " + n + ":"},
			{Node: n, Why: "apply it: logs, exec and port-forward go through the kubelets",
				Shell: kubectl + "apply --server-side -f " + nodeplan.RBACManifest + "\nrm -f " + nodeplan.RBACManifest},
			{Node: n, Why: "one controller-manager and one scheduler lead; the Lease names the holder (the first takes a few seconds)",
				Shell: steps.WaitLoop(60, 1, kubectl+"-n kube-system get lease kube-controller-manager kube-scheduler") + "\n" +
					kubectl + "-n kube-system get lease kube-controller-manager kube-scheduler"},
		}
	}
	return s
}

// readyzDiffs returns one diff per control plane whose /readyz is not 200,
// and the URL of a ready one ("" when none is). With any, one ready
// apiserver is enough.
func ReadyzDiffs(ctx context.Context, m *nodeplan.Machines, env *steps.Env, any bool) ([]steps.Diff, string) {
	var diffs []steps.Diff
	ready := ""
	for _, r := range health.APIServers(ctx, m.Target(env), nodeplan.AdminKubeconfig(env)) {
		if lb, _ := env.Cluster.LB(); r.Target == lb.Name {
			continue
		}
		if r.OK {
			if ready == "" {
				ready = r.URL
			}
			continue
		}
		why := r.Err
		if len(r.Failed) > 0 {
			why = strings.Join(r.Failed, ", ")
		}
		diffs = append(diffs, steps.Diff{Node: r.Target, What: "kube-apiserver /readyz is not ok: " + why, Fix: "read journalctl -u kube-apiserver on " + r.Target})
	}
	if any && ready != "" {
		return nil, ready
	}
	return diffs, ready
}

// controlPlaneDiffs: every apiserver ready, both Leases held and fresh, the
// RBAC manifest applied as rendered.
func controlPlaneDiffs(ctx context.Context, m *nodeplan.Machines, env *steps.Env) ([]steps.Diff, error) {
	diffs, server := ReadyzDiffs(ctx, m, env, false)
	if server == "" {
		return diffs, nil // no apiserver answers: nothing else can be read
	}
	diffs = append(diffs, LeaseDiffs(ctx, m, env, server)...)
	rd, err := rbacDiffs(ctx, m, env, server)
	if err != nil {
		diffs = append(diffs, steps.Diff{What: "cannot check the apiserver-to-kubelet RBAC: " + err.Error()})
	}
	return append(diffs, rd...), nil
}

// LeaseDiffs is one diff per leader-election Lease (kube-controller-manager,
// kube-scheduler) that is missing or not renewed within its duration, read
// from the apiserver at server; a Lease that cannot be read is a diff too.
func LeaseDiffs(ctx context.Context, m *nodeplan.Machines, env *steps.Env, server string) []steps.Diff {
	var diffs []steps.Diff
	leases, err := health.LeasesFrom(ctx, m.Target(env), nodeplan.AdminKubeconfig(env), server)
	if err != nil {
		diffs = append(diffs, steps.Diff{What: "cannot read the leader-election Leases: " + err.Error()})
	}
	for _, l := range leases {
		switch {
		case !l.Found:
			diffs = append(diffs, steps.Diff{What: "Lease kube-system/" + l.Name + " does not exist: no " + l.Name + " has won leader election", Fix: "wait for " + l.Name + ", read its journal"})
		case !l.Fresh:
			diffs = append(diffs, steps.Diff{What: fmt.Sprintf("Lease kube-system/%s held by %s was last renewed %s ago", l.Name, l.HolderNode, time.Since(l.RenewTime).Round(time.Second)), Fix: "wait for another " + l.Name + " to take over"})
		}
	}
	return diffs
}

// rbacDiffs is manifestDiffs of the apiserver-to-kubelet RBAC.
func rbacDiffs(ctx context.Context, m *nodeplan.Machines, env *steps.Env, server string) ([]steps.Diff, error) {
	return nodeplan.ManifestDiffs(ctx, m, env, server, nodeplan.RBACManifest)
}

func applyRBAC(ctx context.Context, m *nodeplan.Machines, env *steps.Env, server string) error {
	return nodeplan.ApplyManifest(ctx, m, env, server, nodeplan.RBACManifest, labid.ControlPlane)
}
