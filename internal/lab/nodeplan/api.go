package nodeplan

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/khw-dev/khw/internal/health"
	"github.com/khw-dev/khw/internal/kube"
	"github.com/khw-dev/khw/internal/steps"
	"github.com/khw-dev/khw/internal/vm"
	"k8s.io/client-go/rest"
)

// Waits of the component steps' Apply: units active, then healthy. TCG VMs
// are ~15× slower than nspawn nodes, hence the margins.
const (
	EtcdWait         = 2 * time.Minute
	ControlPlaneWait = 3 * time.Minute
	LBWait           = time.Minute
)

// Target is how the health checks reach this cluster.
func (m *Machines) Target(env *steps.Env) health.Target {
	return health.Target{Cluster: env.Cluster, PKIDir: env.State.PKIDir(), Dial: m.Provider.Dialer(), Slowdown: int(vm.Slowdown(m.Provider))}
}

func AdminKubeconfig(env *steps.Env) string {
	return filepath.Join(env.State.KubeconfigDir(), "admin.kubeconfig")
}

// The control-plane units and what each one reads at start
// (templates/node/controlplane/*.service.tmpl).
var ControlPlaneUnits = []WantUnit{
	{Name: "kube-apiserver.service", Deps: []string{
		"/usr/local/bin/kube-apiserver", "/etc/systemd/system/kube-apiserver.service",
		"/etc/kubernetes/config/audit-policy.yaml",
		"/var/lib/kubernetes/ca.pem", "/var/lib/kubernetes/kubernetes.pem", "/var/lib/kubernetes/kubernetes-key.pem",
		"/var/lib/kubernetes/service-account.pem", "/var/lib/kubernetes/service-account-key.pem",
		"/var/lib/kubernetes/encryption-config.yaml"}},
	{Name: "kube-controller-manager.service", Deps: []string{
		"/usr/local/bin/kube-controller-manager", "/etc/systemd/system/kube-controller-manager.service",
		"/var/lib/kubernetes/ca.pem", "/var/lib/kubernetes/ca-key.pem", "/var/lib/kubernetes/service-account-key.pem",
		"/var/lib/kubernetes/kube-controller-manager.kubeconfig"}},
	{Name: "kube-scheduler.service", Deps: []string{
		"/usr/local/bin/kube-scheduler", "/etc/systemd/system/kube-scheduler.service",
		"/etc/kubernetes/config/kube-scheduler.yaml", "/var/lib/kubernetes/kube-scheduler.kubeconfig"}},
}

// rbacManifest is the ClusterRole/Binding that lets the apiserver (user
// "kubernetes", its kubelet client cert's CN) reach the kubelet API for
// logs, exec and port-forward.
const RBACManifest = "apiserver-to-kubelet-rbac.yaml"

// RestConfig is the admin kubeconfig with server replaced by server (a
// ready control plane, "https://cp1:6443": 05 runs before the load balancer
// of 06 exists), dialing inside the cluster network.
func (m *Machines) RestConfig(env *steps.Env, server string) (*rest.Config, error) {
	cfg, err := kube.RESTConfig(AdminKubeconfig(env), server)
	if err != nil {
		return nil, err
	}
	cfg.Dial = m.Target(env).Dialer()
	// One request's bound: 10 s at nspawn speed, scaled for slower machines
	// (a TCG control plane under load answers a server-side apply in tens
	// of seconds), at most a minute.
	cfg.Timeout = vm.Scaled(m.Provider, 10*time.Second, time.Minute)
	return cfg, nil
}

// ManifestDiffs server-side-applies manifests/<name> as a dry run through
// server ("" = the admin kubeconfig's, the load balancer): an object that
// would be created or changed is a diff.
func ManifestDiffs(ctx context.Context, m *Machines, env *steps.Env, server, name string) ([]steps.Diff, error) {
	data, err := os.ReadFile(filepath.Join(env.State.ManifestsDir(), name))
	if err != nil {
		return []steps.Diff{{What: "manifests/" + name + " is not rendered yet", Fix: "render and apply it"}}, nil
	}
	cfg, err := m.RestConfig(env, server)
	if err != nil {
		return nil, err
	}
	res, err := kube.ApplyDryRun(ctx, cfg, data)
	if err != nil {
		return nil, err
	}
	var diffs []steps.Diff
	for _, a := range res {
		if a.Action != "unchanged" {
			diffs = append(diffs, steps.Diff{What: fmt.Sprintf("%s/%s would be %s by manifests/%s", a.Kind, a.Name, a.Action, name), Fix: "apply it (server-side)"})
		}
	}
	sort.Slice(diffs, func(i, j int) bool { return diffs[i].What < diffs[j].What })
	return diffs, nil
}

// ApplyManifest server-side-applies manifests/<name> through server ("" =
// the load balancer) and logs each object's outcome for step id.
func ApplyManifest(ctx context.Context, m *Machines, env *steps.Env, server, name, id string) error {
	data, err := os.ReadFile(filepath.Join(env.State.ManifestsDir(), name))
	if err != nil {
		return err
	}
	cfg, err := m.RestConfig(env, server)
	if err != nil {
		return err
	}
	res, err := kube.Apply(ctx, cfg, data)
	if err != nil {
		return fmt.Errorf("apply manifests/%s: %w", name, err)
	}
	for _, a := range res {
		fmt.Fprintf(env.NodeLog(""), "%s %s: %s\n", time.Now().Format(time.RFC3339), id, a)
	}
	return nil
}
