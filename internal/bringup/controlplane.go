package bringup

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/health"
	"github.com/khw-dev/khw/internal/kube"
	"github.com/khw-dev/khw/internal/labid"
	"github.com/khw-dev/khw/internal/steps"
	"github.com/khw-dev/khw/internal/vm"
)

// Waits of the component steps' Apply: units active, then healthy. TCG VMs
// are ~15× slower than nspawn nodes, hence the margins.
const (
	EtcdWait         = 2 * time.Minute
	ControlPlaneWait = 3 * time.Minute
	LBWait           = time.Minute
)

// target is how the health checks reach this cluster.
func (m *Machines) target(env *steps.Env) health.Target {
	return health.Target{Cluster: env.Cluster, PKIDir: env.State.PKIDir(), Dial: m.Provider.Dialer(), Slowdown: int(vm.Slowdown(m.Provider))}
}

func adminKubeconfig(env *steps.Env) string {
	return filepath.Join(env.State.KubeconfigDir(), "admin.kubeconfig")
}

// NewEtcdStep returns lab 04-etcd: on every control plane the etcd
// binaries, its certs in /etc/etcd and etcd.service; all members started
// together (--no-block: a member of a new cluster waits for the others
// before it reports ready); then, through the etcd v3 client from the
// jumpbox, every member listed with its name and peer URL, every endpoint
// answering, one leader.
func NewEtcdStep(m *Machines) steps.Step {
	spec := &componentSpec{
		id: labid.Etcd, title: "Bootstrap the etcd cluster",
		role:     config.RoleControlPlane,
		binaries: []string{"etcd"},
		rendered: []string{"/etc/systemd/system/etcd.service"},
		inputs:   inputUnder("/etc/etcd/"),
		units: []wantUnit{{Name: "etcd.service", Deps: []string{
			"/usr/local/bin/etcd", "/etc/systemd/system/etcd.service",
			"/etc/etcd/ca.pem", "/etc/etcd/kubernetes.pem", "/etc/etcd/kubernetes-key.pem"}}},
	}
	s := &componentStep{m: m, spec: spec, wait: EtcdWait, rolling: true}
	s.health = func(ctx context.Context, env *steps.Env) ([]steps.Diff, error) {
		rep, err := health.Etcd(ctx, m.target(env))
		if rep == nil {
			return nil, err
		}
		return etcdDiffs(env.Cluster, rep), nil
	}
	s.extraCommands = func(env *steps.Env) []steps.Command {
		cp := env.Cluster.ControlPlanes()
		if len(cp) == 0 {
			return nil
		}
		return []steps.Command{{Node: cp[0].Name, Why: "every member listed, and which one leads (IS LEADER, RAFT TERM)",
			Shell: "sudo ETCDCTL_API=3 etcdctl --endpoints=https://127.0.0.1:2379 --cacert=/etc/etcd/ca.pem --cert=/etc/etcd/kubernetes.pem --key=/etc/etcd/kubernetes-key.pem member list -w table\n" +
				"sudo etcdctl --endpoints=" + etcdEndpoints(env.Cluster) + " --cacert=/etc/etcd/ca.pem --cert=/etc/etcd/kubernetes.pem --key=/etc/etcd/kubernetes-key.pem endpoint status -w table"}}
	}
	return s
}

func etcdEndpoints(c *config.Cluster) string {
	var eps []string
	for _, n := range c.ControlPlanes() {
		eps = append(eps, "https://"+n.IP+":2379")
	}
	return strings.Join(eps, ",")
}

// etcdDiffs names every way the etcd cluster differs from cluster.yaml:
// a member missing or with another peer URL, an unexpected member, an
// endpoint not answering, no leader.
func etcdDiffs(c *config.Cluster, rep *health.EtcdReport) []steps.Diff {
	var diffs []steps.Diff
	byName := map[string]health.EtcdMember{}
	for _, mb := range rep.Members {
		byName[mb.Name] = mb
	}
	want := map[string]bool{}
	if rep.MembersErr == "" {
		for _, n := range c.ControlPlanes() {
			want[n.Name] = true
			mb, ok := byName[n.Name]
			peer := "https://" + n.IP + ":2380"
			switch {
			case !ok:
				diffs = append(diffs, steps.Diff{Node: n.Name, What: "etcd member " + n.Name + " is not in the member list", Fix: "start etcd on " + n.Name + " with --initial-cluster naming it"})
			case len(mb.PeerURLs) != 1 || mb.PeerURLs[0] != peer:
				diffs = append(diffs, steps.Diff{Node: n.Name, What: fmt.Sprintf("etcd member %s has peer URLs %v, want [%s]", n.Name, mb.PeerURLs, peer), Fix: "remove the member and its data dir, then start it again"})
			}
		}
		for _, mb := range rep.Members {
			if !want[mb.Name] {
				diffs = append(diffs, steps.Diff{What: fmt.Sprintf("etcd member %q (%s) is not a control plane of cluster.yaml", mb.Name, mb.ID), Fix: "etcdctl member remove " + mb.ID})
			}
		}
	} else {
		diffs = append(diffs, steps.Diff{What: "no etcd member lists the members: " + rep.MembersErr, Fix: "start etcd on every control plane"})
	}
	for _, ep := range rep.Endpoints {
		if !ep.OK {
			diffs = append(diffs, steps.Diff{Node: ep.Node, What: "etcd at " + ep.Endpoint + " does not answer: " + ep.Err, Fix: "restart etcd.service and read its journal"})
		}
	}
	if rep.Leader == "" {
		diffs = append(diffs, steps.Diff{What: fmt.Sprintf("etcd has no leader (%d of %d members healthy, quorum needs %d)", rep.Healthy, rep.Size, rep.QuorumSize), Fix: "start the members that are down"})
	}
	return diffs
}

// The control-plane units and what each one reads at start
// (templates/node/controlplane/*.service.tmpl).
var controlPlaneUnits = []wantUnit{
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
const rbacManifest = "apiserver-to-kubelet-rbac.yaml"

// NewControlPlaneStep returns lab 05-control-plane: kube-apiserver,
// kube-controller-manager and kube-scheduler (and kubectl) on every control
// plane with their configs, certs and kubeconfigs; each apiserver's /readyz
// answers 200; the Leases of the controller-manager and the scheduler are
// held (leader election picked one instance each); the RBAC that lets the
// apiserver call kubelets is applied (server-side apply).
func NewControlPlaneStep(m *Machines) steps.Step {
	spec := &componentSpec{
		id: labid.ControlPlane, title: "Bootstrap the control plane",
		role:     config.RoleControlPlane,
		binaries: []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"},
		rendered: []string{
			"/etc/systemd/system/kube-apiserver.service", "/etc/kubernetes/config/audit-policy.yaml",
			"/etc/systemd/system/kube-controller-manager.service",
			"/etc/systemd/system/kube-scheduler.service", "/etc/kubernetes/config/kube-scheduler.yaml"},
		inputs: inputUnder("/var/lib/kubernetes/"),
		units:  controlPlaneUnits,
	}
	s := &componentStep{m: m, spec: spec, wait: ControlPlaneWait, rolling: true}
	s.health = func(ctx context.Context, env *steps.Env) ([]steps.Diff, error) {
		return controlPlaneDiffs(ctx, m, env)
	}
	s.after = func(ctx context.Context, env *steps.Env) error {
		// The RBAC needs one apiserver to answer: wait for the first /readyz.
		server := ""
		if err := waitHealthy(ctx, env, func(ctx context.Context, env *steps.Env) ([]steps.Diff, error) {
			d, ready := readyzDiffs(ctx, m, env, true)
			server = ready
			return d, nil
		}, ControlPlaneWait); err != nil {
			return err
		}
		return applyRBAC(ctx, m, env, server)
	}
	s.extraCommands = func(env *steps.Env) []steps.Command {
		cp := env.Cluster.ControlPlanes()
		if len(cp) == 0 {
			return nil
		}
		return []steps.Command{
			{Node: cp[0].Name, Why: "each apiserver is ready when /readyz says ok",
				Shell: "curl --cacert /var/lib/kubernetes/ca.pem https://127.0.0.1:6443/readyz?verbose"},
			{Node: cp[0].Name, Why: "let the apiserver (user kubernetes) reach the kubelets: logs, exec, port-forward",
				Shell: "kubectl apply --server-side --kubeconfig /etc/kubernetes/admin.kubeconfig -f " + rbacManifest},
			{Node: cp[0].Name, Why: "one controller-manager and one scheduler lead; the Lease names the holder",
				Shell: "kubectl --kubeconfig /etc/kubernetes/admin.kubeconfig -n kube-system get lease kube-controller-manager kube-scheduler"},
		}
	}
	return s
}

// readyzDiffs returns one diff per control plane whose /readyz is not 200,
// and the URL of a ready one ("" when none is). With any, one ready
// apiserver is enough.
func readyzDiffs(ctx context.Context, m *Machines, env *steps.Env, any bool) ([]steps.Diff, string) {
	var diffs []steps.Diff
	ready := ""
	for _, r := range health.APIServers(ctx, m.target(env), adminKubeconfig(env)) {
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
func controlPlaneDiffs(ctx context.Context, m *Machines, env *steps.Env) ([]steps.Diff, error) {
	diffs, server := readyzDiffs(ctx, m, env, false)
	if server == "" {
		return diffs, nil // no apiserver answers: nothing else can be read
	}
	leases, err := health.LeasesFrom(ctx, m.target(env), adminKubeconfig(env), server)
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
	rd, err := rbacDiffs(ctx, m, env, server)
	if err != nil {
		diffs = append(diffs, steps.Diff{What: "cannot check the apiserver-to-kubelet RBAC: " + err.Error()})
	}
	return append(diffs, rd...), nil
}

// restConfig is the admin kubeconfig with server replaced by server (a
// ready control plane, "https://cp1:6443": 05 runs before the load balancer
// of 06 exists), dialing inside the cluster network.
func (m *Machines) restConfig(env *steps.Env, server string) (*rest.Config, error) {
	cfg, err := kube.RESTConfig(adminKubeconfig(env), server)
	if err != nil {
		return nil, err
	}
	cfg.Dial = m.target(env).Dialer()
	// One request's bound: 10 s at nspawn speed, scaled for slower machines
	// (a TCG control plane under load answers a server-side apply in tens
	// of seconds), at most a minute.
	cfg.Timeout = vm.Scaled(m.Provider, 10*time.Second, time.Minute)
	return cfg, nil
}

// rbacDiffs is manifestDiffs of the apiserver-to-kubelet RBAC.
func rbacDiffs(ctx context.Context, m *Machines, env *steps.Env, server string) ([]steps.Diff, error) {
	return manifestDiffs(ctx, m, env, server, rbacManifest)
}

// manifestDiffs server-side-applies manifests/<name> as a dry run through
// server ("" = the admin kubeconfig's, the load balancer): an object that
// would be created or changed is a diff.
func manifestDiffs(ctx context.Context, m *Machines, env *steps.Env, server, name string) ([]steps.Diff, error) {
	data, err := os.ReadFile(filepath.Join(env.State.ManifestsDir(), name))
	if err != nil {
		return []steps.Diff{{What: "manifests/" + name + " is not rendered yet", Fix: "render and apply it"}}, nil
	}
	cfg, err := m.restConfig(env, server)
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

func applyRBAC(ctx context.Context, m *Machines, env *steps.Env, server string) error {
	return applyManifest(ctx, m, env, server, rbacManifest, labid.ControlPlane)
}

// applyManifest server-side-applies manifests/<name> through server ("" =
// the load balancer) and logs each object's outcome for step id.
func applyManifest(ctx context.Context, m *Machines, env *steps.Env, server, name, id string) error {
	data, err := os.ReadFile(filepath.Join(env.State.ManifestsDir(), name))
	if err != nil {
		return err
	}
	cfg, err := m.restConfig(env, server)
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

// NewLBStep returns lab 06-lb: HAProxy on the load balancer node with the
// rendered haproxy.cfg (TCP passthrough to every apiserver, each checked
// with an HTTPS GET /readyz: a TCP connect succeeds as soon as the port is
// open, even while that apiserver has lost etcd and answers 500 to every
// request; /readyz fails then, so HAProxy stops sending clients there),
// and /readyz through lb:6443 with the admin kubeconfig.
func NewLBStep(m *Machines) steps.Step {
	spec := &componentSpec{
		id: labid.LB, title: "Put HAProxy in front of the apiservers",
		role:     config.RoleLoadBalancer,
		rendered: []string{"/etc/haproxy/haproxy.cfg"},
		packages: []wantPackage{{Name: "haproxy", Path: "/usr/sbin/haproxy"}},
		units:    []wantUnit{{Name: "haproxy.service", Deps: []string{"/usr/sbin/haproxy", "/etc/haproxy/haproxy.cfg"}}},
	}
	s := &componentStep{m: m, spec: spec, wait: LBWait}
	s.health = func(ctx context.Context, env *steps.Env) ([]steps.Diff, error) {
		lb, ok := env.Cluster.LB()
		if !ok {
			return nil, nil
		}
		for _, r := range health.APIServers(ctx, m.target(env), adminKubeconfig(env)) {
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
	s.extraCommands = func(env *steps.Env) []steps.Command {
		return []steps.Command{{Why: "from the jumpbox, through the load balancer, as admin",
			Shell: "kubectl --kubeconfig " + adminKubeconfig(env) + " get --raw='/readyz?verbose'"}}
	}
	return s
}
