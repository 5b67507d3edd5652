// Package kubeconfig writes the kubeconfig files of the cluster (client-go
// clientcmd, never hand-written YAML): one per client identity, each with the
// cluster CA, the client cert and its key EMBEDDED
// (certificate-authority-data, client-certificate-data, client-key-data), so
// a file can be copied to a node on its own.
//
// Every file has one cluster entry named kubernetes.clusterName, one user
// named after the identity the apiserver derives from the client cert (the
// cert's CN, k8s.io/apiserver pkg/authentication/request/x509/x509.go), and
// one context "default", which is the current-context.
//
// The table of files, users, servers and node paths is Specs. Workers and the
// jumpbox reach the apiservers through the load balancer (https://lb:6443),
// so losing one control plane is invisible to them; control-plane components
// use their local apiserver (https://127.0.0.1:6443). See
// shared/design/cluster-facts.md, section "kubeconfigs".
package kubeconfig

import (
	"github.com/khw-dev/khw/internal/config"
)

// DirName is the directory of the kubeconfigs inside the cluster state
// directory (D/kubeconfigs/<file>).
const DirName = "kubeconfigs"

// ContextName is the one context in every file, set as current-context.
const ContextName = "default"

// BootstrapUser is the user entry of a bootstrap kubeconfig. The name is only
// a label inside the file: the apiserver identifies a bootstrap token as user
// system:bootstrap:<token-id> in group system:bootstrappers
// (https://kubernetes.io/docs/reference/access-authn-authz/bootstrap-tokens/).
const BootstrapUser = "kubelet-bootstrap"

// BootstrapTokenPlaceholder is the token a bootstrap kubeconfig holds until
// WriteBootstrap puts a real one in. It can never authenticate: a bootstrap
// token must match [a-z0-9]{6}\.[a-z0-9]{16} (k8s.io/cluster-bootstrap
// token/api BootstrapTokenPattern), and this one has upper-case letters and
// dashes, so the apiserver's bootstrap-token authenticator does not handle it
// (k8s.io/kubernetes plugin/pkg/auth/authenticator/token/bootstrap/bootstrap.go
// returns "not handled" when the token does not parse), no other
// authenticator accepts it, and the kubelet gets 401 Unauthorized.
const BootstrapTokenPlaceholder = "PLACEHOLDER.khw-writes-the-bootstrap-token-here"

// Paths on the nodes where each kubeconfig goes (owner root, mode 0600).
const (
	// AdminCPPath holds admin-cp.kubeconfig on every control plane.
	AdminCPPath = "/etc/kubernetes/admin.kubeconfig"
	// KubeletPath is the kubelet's --kubeconfig. On a TLS-bootstrap worker the
	// kubelet writes this file itself after its client CSR is approved.
	KubeletPath = "/var/lib/kubelet/kubeconfig"
	// KubeletBootstrapPath is the kubelet's --bootstrap-kubeconfig.
	KubeletBootstrapPath = "/var/lib/kubelet/bootstrap-kubeconfig"
	// KubeProxyPath is kube-proxy's kubeconfig (clientConnection.kubeconfig).
	KubeProxyPath = "/var/lib/kube-proxy/kubeconfig"
	// ControllerManagerPath is kube-controller-manager's --kubeconfig.
	ControllerManagerPath = "/var/lib/kubernetes/kube-controller-manager.kubeconfig"
	// SchedulerPath is kube-scheduler's kubeconfig.
	SchedulerPath = "/var/lib/kubernetes/kube-scheduler.kubeconfig"
)

// File names in the state directory that do not depend on a node name. The
// names come from config's constants, which refuses node names that would
// make a node's file one of these (config.ReservedNodeName).
const (
	// AdminFile: user admin via the load balancer, for kubectl on the jumpbox.
	AdminFile = config.CertAdmin + nodeFileSuffix
	// AdminCPFile: user admin via https://127.0.0.1:<port>, copied to every
	// control plane as AdminCPPath (kubectl there works even when the load
	// balancer is down). Same cert as AdminFile, different server.
	AdminCPFile             = config.KubeconfigAdminCP + nodeFileSuffix
	KubeProxyFile           = config.CertKubeProxy + nodeFileSuffix
	ControllerManagerFile   = config.CertControllerManager + nodeFileSuffix
	SchedulerFile           = config.CertScheduler + nodeFileSuffix
	bootstrapFileSuffix     = config.BootstrapSuffix + nodeFileSuffix
	nodeFileSuffix          = ".kubeconfig"
	controllerManagerUser   = "system:kube-controller-manager"
	schedulerUser           = "system:kube-scheduler"
	kubeProxyUser           = "system:kube-proxy"
	adminUser               = "admin"
	nodeUserPrefix          = "system:node:"
	controllerManagerCertID = config.CertControllerManager
	schedulerCertID         = config.CertScheduler
	kubeProxyCertID         = config.CertKubeProxy
	adminCertID             = config.CertAdmin
)

// Target is one place a kubeconfig is copied to.
type Target struct {
	// Node is the node name (cp1, w3 …).
	Node string
	// Path is the absolute path on that node.
	Path string
}

// Spec describes one kubeconfig file.
type Spec struct {
	// File is the name under D/kubeconfigs, e.g. "w1.kubeconfig".
	File string
	// User is the user entry name; for cert-based files it equals the CN the
	// client cert must carry (admin, system:node:w1, system:kube-proxy …).
	User string
	// Server is the apiserver URL: c.APIServerURL() (https://lb:6443) or
	// c.LocalAPIServerURL() (https://127.0.0.1:6443).
	Server string
	// Bootstrap is true for a TLS-bootstrap worker's bootstrap kubeconfig: it
	// authenticates with a bootstrap token (BootstrapTokenPlaceholder until
	// WriteBootstrap) and holds no client cert.
	Bootstrap bool
	// CertFile and KeyFile are the PEM client cert and key embedded in the
	// file: names inside the PKI directory (<name>.pem, <name>-key.pem), or,
	// when External, a worker's nodes[].kubeletCert paths as written in
	// cluster.yaml. Empty when Bootstrap.
	CertFile, KeyFile string
	// External is true when CertFile/KeyFile come from nodes[].kubeletCert (a
	// pre-issued cert made by hand); they are then used as written (a
	// relative path is relative to khw's working directory) instead of
	// inside the PKI directory.
	External bool
	// Node is the worker a per-node file belongs to ("" otherwise).
	Node string
	// OnJumpbox is true for the file used in place on the jumpbox
	// (admin.kubeconfig, e.g. KUBECONFIG=D/kubeconfigs/admin.kubeconfig).
	OnJumpbox bool
	// Targets are the nodes and paths the file is copied to (mode 0600,
	// owner root). Empty for admin.kubeconfig.
	Targets []Target
}

// NodeFile is the kubeconfig name of a worker with a khw-issued cert:
// "<node>.kubeconfig".
func NodeFile(node string) string { return node + nodeFileSuffix }

// BootstrapFile is the bootstrap kubeconfig name of a TLS-bootstrap worker:
// "<node>-bootstrap.kubeconfig".
func BootstrapFile(node string) string { return node + bootstrapFileSuffix }

// Specs returns every kubeconfig of cluster c, in this order: admin,
// admin-cp, one per worker without tlsBootstrap (file order), kube-proxy,
// kube-controller-manager, kube-scheduler, one bootstrap file per
// tlsBootstrap worker. For the default cluster:
//
//	file                                user                            server                  targets
//	admin.kubeconfig                    admin                           https://lb:6443         (jumpbox, in place)
//	admin-cp.kubeconfig                 admin                           https://127.0.0.1:6443  cp1-3 /etc/kubernetes/admin.kubeconfig
//	w1.kubeconfig, w2.kubeconfig        system:node:wN                  https://lb:6443         wN /var/lib/kubelet/kubeconfig
//	kube-proxy.kubeconfig               system:kube-proxy               https://lb:6443         w1-3 /var/lib/kube-proxy/kubeconfig
//	kube-controller-manager.kubeconfig  system:kube-controller-manager  https://127.0.0.1:6443  cp1-3 /var/lib/kubernetes/kube-controller-manager.kubeconfig
//	kube-scheduler.kubeconfig           system:kube-scheduler           https://127.0.0.1:6443  cp1-3 /var/lib/kubernetes/kube-scheduler.kubeconfig
//	w3-bootstrap.kubeconfig             kubelet-bootstrap (token)       https://lb:6443         w3 /var/lib/kubelet/bootstrap-kubeconfig
func Specs(c *config.Cluster) []Spec {
	lbURL, localURL := c.APIServerURL(), c.LocalAPIServerURL()
	cpTargets := func(path string) []Target {
		var t []Target
		for _, n := range c.ControlPlanes() {
			t = append(t, Target{Node: n.Name, Path: path})
		}
		return t
	}
	certPair := func(id string) (string, string) { return id + ".pem", id + config.KeySuffix + ".pem" }

	var out []Spec
	cf, kf := certPair(adminCertID)
	out = append(out,
		Spec{File: AdminFile, User: adminUser, Server: lbURL, CertFile: cf, KeyFile: kf, OnJumpbox: true},
		Spec{File: AdminCPFile, User: adminUser, Server: localURL, CertFile: cf, KeyFile: kf, Targets: cpTargets(AdminCPPath)},
	)
	var proxyTargets []Target
	for _, w := range c.Workers() {
		proxyTargets = append(proxyTargets, Target{Node: w.Name, Path: KubeProxyPath})
		if w.TLSBootstrap {
			continue
		}
		cf, kf := certPair(w.Name)
		ext := w.KubeletCert != nil
		if ext {
			cf, kf = w.KubeletCert.Cert, w.KubeletCert.Key
		}
		out = append(out, Spec{
			File: NodeFile(w.Name), User: nodeUserPrefix + w.Name, Server: lbURL,
			CertFile: cf, KeyFile: kf, External: ext, Node: w.Name,
			Targets: []Target{{Node: w.Name, Path: KubeletPath}},
		})
	}
	cf, kf = certPair(kubeProxyCertID)
	out = append(out, Spec{File: KubeProxyFile, User: kubeProxyUser, Server: lbURL, CertFile: cf, KeyFile: kf, Targets: proxyTargets})
	cf, kf = certPair(controllerManagerCertID)
	out = append(out, Spec{File: ControllerManagerFile, User: controllerManagerUser, Server: localURL, CertFile: cf, KeyFile: kf,
		Targets: cpTargets(ControllerManagerPath)})
	cf, kf = certPair(schedulerCertID)
	out = append(out, Spec{File: SchedulerFile, User: schedulerUser, Server: localURL, CertFile: cf, KeyFile: kf,
		Targets: cpTargets(SchedulerPath)})
	for _, w := range c.Workers() {
		if !w.TLSBootstrap {
			continue
		}
		out = append(out, Spec{
			File: BootstrapFile(w.Name), User: BootstrapUser, Server: lbURL, Bootstrap: true, Node: w.Name,
			Targets: []Target{{Node: w.Name, Path: KubeletBootstrapPath}},
		})
	}
	return out
}

// ForNode returns the files that go to node, each with the one Target on that
// node, in Specs order. The jumpbox-only admin.kubeconfig is never included.
func ForNode(c *config.Cluster, node string) []Spec {
	var out []Spec
	for _, s := range Specs(c) {
		for _, t := range s.Targets {
			if t.Node == node {
				s.Targets = []Target{t}
				out = append(out, s)
				break
			}
		}
	}
	return out
}
